"""The mirror: each write slot's ranges are read by mirrorflow's range source (one Spark
task and one consumer a slot) and written, exactly once, by the same Spark task
(``mapInArrow``), so records enter Python once.

The driver reads the remote partitions' resume positions first and reads each range
from where its writing stopped (a retry of a plan reads only what is left); the task's
writer reads the position again after fencing, so a zombie that committed meanwhile is
accounted for. Each task returns one row: its range's :class:`RangeResult`.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator
from dataclasses import replace

from mirrorflow.config.loader import parse_config
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.errors import DataLossError, MirrorflowError, one_line, raised_within
from mirrorflow.kafka import clients
from mirrorflow.kafka.watermarks import probe_watermarks
from mirrorflow.quality import digests
from mirrorflow.schema import mapping
from mirrorflow.schema.mapping import IdMapping, MappingKey
from mirrorflow.schema.transfer import IdMapper
from mirrorflow.source import ledger, topic_sync
from mirrorflow.source.history import merge_spans
from mirrorflow.source.plan_records import Plan
from mirrorflow.source.plan_store import PlanStore
from mirrorflow.source.write_task import WriteError, WriteTask
from mirrorflow.source.writer import SlotWriter
from mirrorflow.spark.kafka_source import for_writer, read_groups

log = logging.getLogger(__name__)

RESULT_SCHEMA = "result string"
PRE_READ_TIMEOUT_S = 5.0  # the driver's look at how far earlier attempts got


class MirrorJobError(MirrorflowError):
    """The Spark job failed; nothing was committed."""


class SourceTopicGoneError(MirrorflowError):
    """A planned source topic was deleted before its range was read."""


def write_tasks(flow: FlowConfig, plan: Plan,
                written: dict[tuple[str, int], int] | None = None) -> list[WriteTask]:
    """The plan's ranges as write tasks; ``written``: per source partition, the next
    upstream offset the plan's committed spans reach (where earlier attempts stopped)."""
    written = written or {}
    return [WriteTask(flow.name, plan.plan_id, r.topic, r.partition, r.remote_topic, r.start,
                      r.end, r.max_message_bytes, flow.get("failOnDataLoss"),
                      flow.get("exactly.once.support"), flow.get("mirrorflow.transaction.records"),
                      written.get((r.topic, r.partition), r.start), plan.created_ms, r.slot)
            for r in plan.ranges]


def mirror(spark, config: MirrorConfig, flow: FlowConfig, plan: Plan) -> dict:
    """Write every range of ``plan`` not yet written to the target; return the plan's
    result (:func:`plan_result`)."""
    target, source = config.cluster(flow.target), config.cluster(flow.source)
    # Where earlier attempts stopped, from the plan's span records: they never expire, as
    # the progress group's offsets do after offsets.retention.minutes.
    written = {tp: max(s.upstream_last for s in spans) + 1 for tp, spans in
               ledger.read_spans(target, flow.source, plan.plan_id).items()}
    tasks = write_tasks(flow, plan, written)
    try:
        resume = ledger.read_resume(target, flow.source,
                                    [(t.remote_topic, t.partition) for t in tasks],
                                    timeout=PRE_READ_TIMEOUT_S)
    except ledger.LedgerError as exc:
        # An earlier attempt's open transaction holds its position unstable until a
        # writer fences it; each writer does that first, then resumes exactly.
        log.info("resume positions not readable yet (%s); every range is read from its "
                 "start and each writer skips what an earlier attempt committed", exc)
        resume = {}
    reads: dict[int, list[tuple[str, int, int, int]]] = {}
    pending = {}
    for task in tasks:
        position = resume.get((task.remote_topic, task.partition))
        start = max(task.start, task.written_until)
        if position is not None and position.plan_id == plan.plan_id:
            start = max(start, position.next_upstream)
        if start < task.end:
            reads.setdefault(task.slot, []).append((task.topic, task.partition, start,
                                                    task.end))
            pending[(task.topic, task.partition)] = task
    attempt: list[dict] = []
    if reads:
        _check_topics_exist(source, {t for ranges in reads.values() for t, *_ in ranges})
        # The remote topics' limits now, not as planned: a plan a too large record left
        # pending goes on once the limit is raised.
        limits = topic_sync.message_limits(config, flow, {t.topic: t.remote_topic
                                                          for t in pending.values()})
        pending = {tp: replace(t, max_message_bytes=limits.get(t.remote_topic,
                                                               t.max_message_bytes))
                   for tp, t in pending.items()}
        ledger.spans_store(target, flow.source, flow.get("replication.factor")).ensure()
        from pyspark.sql import functions as F

        transfer = flow.schema_transfer
        frame = for_writer(_slot_reads(spark, source, reads),
                           *digests.writer_columns(
                               F, headers=transfer is None or transfer.include_headers))
        known = mapping.stored(PlanStore(config, flow).topic.read()) if transfer else {}
        write = functools.partial(write_slot, config.text, flow.source, flow.target,
                                  pending, known)
        try:
            rows = frame.mapInArrow(write, RESULT_SCHEMA).collect()
        except Exception as exc:
            raise worker_error(exc) from exc
        attempt = [json.loads(row["result"]) for row in rows]
    return plan_result(config, flow, plan, attempt)


def _slot_reads(spark, source, reads: dict[int, list[tuple[str, int, int, int]]]):
    """The ranges to write, a Spark task (and one consumer) per write slot, reading that
    slot's ranges."""
    return read_groups(spark, source, [ranges for _, ranges in sorted(reads.items())])


def plan_result(config: MirrorConfig, flow: FlowConfig, plan: Plan,
                attempt: list[dict]) -> dict:
    """Per range, what every attempt of the plan wrote (from the span records: records,
    remote offsets, offset syncs) with this attempt's figures (bytes, ages, latencies,
    time, retention gaps). A range whose first written offset is past its start is
    checked against the source's log start: retention there fails the run with
    ``failOnDataLoss`` or is recorded as a gap."""
    spans = ledger.read_spans(config.cluster(flow.target), flow.source, plan.plan_id)
    figures = {(r["topic"], r["partition"]): r for r in attempt}
    # A transaction's markers reach the spans topic a moment after its commit returns:
    # this attempt's spans come from its writers; earlier attempts' from the topic.
    for tp, done in figures.items():
        known = {s.downstream_first for s in spans.get(tp, [])}
        mine = [ledger.Span.decode(v.encode()) for v in done.get("spans", [])]
        spans[tp] = sorted([*spans.get(tp, []), *(s for s in mine
                                                  if s.downstream_first not in known)],
                           key=lambda s: s.upstream_first)
    late = [(r.topic, r.partition) for r in plan.ranges
            if not spans.get((r.topic, r.partition))
            or spans[(r.topic, r.partition)][0].upstream_first > r.start]
    source = config.cluster(flow.source)
    log_starts = {tp: w.low for tp, w in probe_watermarks(
        source, late, source.isolation_level()).items()} if late else {}
    ranges = []
    for r in plan.ranges:
        tp = (r.topic, r.partition)
        mine = spans.get(tp, [])
        done = figures.get(tp, {})
        gaps = [tuple(g) for g in done.get("gaps", [])]
        first = mine[0].upstream_first if mine else r.end
        if tp in log_starts and log_starts[tp] > r.start and not any(g[0] == r.start
                                                                     for g in gaps):
            gap = (r.start, min(log_starts[tp], first))
            if flow.get("failOnDataLoss"):
                raise DataLossError(
                    f"source {r.topic}[{r.partition}]: offsets {gap[0]}..{gap[1] - 1} of the "
                    f"planned range {r.start}..{r.end - 1} were removed by retention before "
                    f"they were mirrored. Set {flow.name}.failOnDataLoss = false to skip them")
            gaps.insert(0, gap)
        ranges.append({
            "topic": r.topic, "partition": r.partition, "remote_topic": r.remote_topic,
            "start": r.start, "end": r.end, "records": sum(s.records for s in mine),
            "records_written": done.get("records_written", 0),
            "bytes_written": done.get("bytes_written", 0),
            "first_downstream": mine[0].downstream_first if mine else None,
            "last_downstream": mine[-1].downstream_last if mine else None,
            "owned": [list(s) for s in merge_spans(
                (s.downstream_first, s.downstream_last) for s in mine)],
            "syncs": [list(s) for s in ledger.merged_syncs(mine)],
            "spans": [s.value().decode() for s in mine],
            "gaps": [list(g) for g in gaps],
            "resumed_from": done.get("resumed_from", r.start),
            "transactional": done.get("transactional", True),
            "at_least_once": done.get("at_least_once"),
            "restamped": done.get("restamped", 0),
            "record_age_ms": done.get("record_age_ms"),
            "replication_latency_ms": done.get("replication_latency_ms"),
            "write_seconds": done.get("write_seconds", 0.0),
            "source_digest": done.get("source_digest"),
            "schema_ids": done.get("schema_ids", [])})
    return {"plan_id": plan.plan_id, "ranges": ranges}


def worker_error(exc: Exception) -> MirrorflowError:
    """The error a write task (or the range source reading for it) raised, as a mirrorflow
    error of its own type with its own one-line message (Spark wraps it in a Java
    exception with the worker's traceback); anything else is a :class:`MirrorJobError`
    quoting the first exception of Spark's text."""
    return (raised_within(str(exc), WriteError)
            or MirrorJobError(f"the mirror's Spark job failed: {one_line(exc)}"))


def _check_topics_exist(source, topics: set[str]) -> None:
    present = set(clients.cluster_metadata(clients.admin_client(source), 15).topics)
    gone = sorted(topics - present)
    if gone:
        raise SourceTopicGoneError(
            f"source topic {gone[0]!r} no longer exists on cluster {source.alias!r}: it was "
            "deleted after planning. Nothing was committed; the next run drops it from the "
            "pending plan")


def write_slot(config_text: str, source_alias: str, target_alias: str,
               tasks: dict[tuple[str, int], WriteTask], known: dict[MappingKey, IdMapping],
               batches: Iterator) -> Iterator:
    """Runs in a Spark task: write the ranges of the task's one write slot, then yield a
    result per range. The config's text travels with the function; secrets are resolved
    here, by the worker. ``known``: the flow's stored schema mappings."""
    import pyarrow as pa

    config = parse_config(config_text)
    flow = config.flows[(source_alias, target_alias)]
    transfer, mapper = flow.schema_transfer, None
    if transfer is not None:
        mapper = IdMapper(transfer, flow.name, config.cluster(source_alias),
                          config.cluster(target_alias), known,
                          flow.policy().is_heartbeats_topic,
                          next(iter(tasks.values())).plan_id)
    writer = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if writer is None:
                tp = (batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
                slot = tasks[tp].slot
                writer = SlotWriter([t for t in tasks.values() if t.slot == slot],
                                    config.cluster(target_alias), config.cluster(source_alias),
                                    mapper=mapper, drop_headers=bool(
                                        transfer and not transfer.include_headers))
                writer.open()
            writer.write_batch(batch)
        if writer is not None:
            yield pa.RecordBatch.from_pylist([{"result": json.dumps(r.to_dict())}
                                              for r in writer.close()])
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        if writer is not None:
            writer.release()
