"""Operator tools: reset a flow's positions (earliest, latest, or a timestamp).

A reset rewrites the offset store for the flow's source partitions, starts each
partition's chain anew there with a named ``reset`` break (mode, offsets skipped or
repeated, the run that asked), and drops a pending plan and a schema transfer's stored
id mappings, so the next run plans from the new positions. Heartbeat topics keep theirs
(see :func:`reset_starts`). Resetting to earliest mirrors again what is already on the
target: it is meant for rebuilding a target, and the DAG and CLI ask for an explicit
confirmation.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.kafka.watermarks import probe_watermarks
from mirrorflow.plain import plain
from mirrorflow.schema import mapping
from mirrorflow.source.history import CHAIN, Chain, HistoryStore
from mirrorflow.source.ledger import keep_written
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import discover_topics
from mirrorflow.source.plan_records import Break
from mirrorflow.source.plan_store import PENDING_KEY, PlanStore

log = logging.getLogger(__name__)
RESET_MODES = ("earliest", "latest", "timestamp")


class ResetError(MirrorflowError):
    """A reset was asked for wrongly (mode, timestamp or confirmation)."""


@dataclass(frozen=True)
class ResetResult:
    mode: str
    positions: dict[str, int]


def check_confirmation(flow: FlowConfig, confirm: str | None) -> None:
    if (confirm or "").strip() != flow.name:
        raise ResetError(f"a reset of flow {flow.name!r} must be confirmed by giving the flow "
                         f"name {flow.name!r} as confirmation")


def reset_starts(config: MirrorConfig, flow: FlowConfig, mode: str,
                 timestamp_ms: int | None = None) -> dict[tuple[str, int], int]:
    """Where a reset to ``mode`` would start each source partition of the flow's topics,
    reading only. Heartbeat topics keep their positions: they carry liveness, not data,
    and the heartbeat the resetting run itself emitted must still reach the target."""
    if mode not in RESET_MODES:
        raise ResetError(f"reset mode must be one of {', '.join(RESET_MODES)}, got {mode!r}")
    if mode == "timestamp" and timestamp_ms is None:
        raise ResetError("a reset to a timestamp needs the timestamp in milliseconds")
    source = config.cluster(flow.source)
    policy = flow.policy()
    parts = [(t, p) for t, n in discover_topics(config, flow).items()
             if not policy.is_heartbeats_topic(t) for p in range(n)]
    marks = probe_watermarks(source, parts)
    if mode == "earliest":
        return {tp: m.low for tp, m in marks.items()}
    if mode == "latest":
        return {tp: m.high for tp, m in marks.items()}
    return _offsets_for_time(source, parts, timestamp_ms, marks)


def reset_positions(config: MirrorConfig, flow: FlowConfig, mode: str,
                    timestamp_ms: int | None = None, run_id: str = "") -> ResetResult:
    """Set the flow's positions so the next run starts at ``mode`` in every source
    partition of its topics (see :func:`reset_starts`); ``run_id`` (who asked) goes into
    each partition's ``reset`` break."""
    starts = reset_starts(config, flow, mode, timestamp_ms)
    source = config.cluster(flow.source)
    parts = sorted(starts)
    target = config.cluster(flow.target)
    store = OffsetStore(target, flow.source, flow.get("replication.factor"))
    before = store.positions()
    ids = clients.topic_ids(source, sorted({t for t, _ in parts}))
    store.commit({tp: start - 1 for tp, start in starts.items()})
    history = HistoryStore(target, flow.source, flow.get("replication.factor"))
    chains = history.read_all(CHAIN).chains
    breaks = {}
    for (topic, partition), start in starts.items():
        was = before.get((topic, partition))
        was_next = start if was is None else was + 1
        found = Break(topic, partition, "reset", min(was_next, start), max(was_next, start),
                      ids.get(topic, ""), f"reset to {mode}"
                      + (f" ({timestamp_ms} ms)" if mode == "timestamp" else "")
                      + f" by {run_id or 'an operator'}: from offset {was_next} to {start}",
                      int(time.time() * 1000))
        known = chains.get((topic, partition))
        breaks[(topic, partition)] = Chain(found.topic_id, start,
                                           (known.breaks if known else []) + [plain(found)])
    history.write([], {}, breaks)
    plans = PlanStore(config, flow)
    entries = plans.topic.read()
    pending = entries.get(PENDING_KEY)  # the id only: the plan may be damaged
    if pending:
        kept = keep_written(target, flow.source, pending.decode(),
                            flow.get("replication.factor"))
        if kept:
            log.warning("flow %s: the reset drops plan %s, whose records already written "
                        "stay on the target as the flow's own", flow.name, pending.decode())
        # Partitions the reset leaves where they were (heartbeats) go on after what the
        # dropped plan wrote, so that none of it is written twice.
        on = {tp: last for tp, last in kept.items()  # ``before`` holds: not reset
              if tp not in starts and last > before.get(tp, -1)}
        if on:  # their chains go on too: those offsets are accounted for, on the target
            history.write([], {}, {tp: Chain(chains[tp].topic_id, last + 1, chains[tp].breaks)
                                   for tp, last in on.items() if tp in chains})
            store.commit(on)
    # A schema transfer's stored mappings go too: a reset is how a target is rebuilt (a
    # target registry replaced under the flow among the causes), and the next run
    # registers its schemas again (a registry that still holds them answers the same ids).
    plans.topic.write([(PENDING_KEY, None)]
                      + [(key, None) for key in entries if key.startswith(mapping.PREFIX)])
    return ResetResult(mode, {f"{t}[{p}]": s for (t, p), s in sorted(starts.items())})


def _offsets_for_time(source, parts, timestamp_ms, marks) -> dict[tuple[str, int], int]:
    """First offset at or after the timestamp; the end where every record is older."""
    from confluent_kafka import TopicPartition

    consumer = clients.consumer(source)
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(t, p, timestamp_ms) for t, p in parts], timeout=30)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0
            else marks[(tp.topic, tp.partition)].high for tp in found}
