"""Planning a run: which offset ranges of which source partitions to mirror.

A plan is stored on the target cluster before any record moves, in the compacted topic
``mirrorflow-plans.{source}.internal``. While a plan is pending (not yet committed), every
new attempt, whether an Airflow retry or the next ``mirrorflow run``, finishes that same
plan instead of making a new one. So the ranges a retry reads are exactly the ranges the
failed attempt read, and each range's ``target_start`` (the remote partition's end when the
plan was made, i.e. while the target held exactly the committed data) tells the writer
where this plan's records begin on the target.

Every plan records the topic id (KIP-516) of each source topic it reads, and starts each
partition where the flow's chain of it ends (:class:`mirrorflow.source.history.Chain`):
at the committed position, or, where that is not so, with a named :class:`Break`. A
topic deleted and created again has a new id: its new incarnation is planned from its log
start (a ``recreated`` break), never from the old incarnation's position.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace

from mirrorflow.config.model import ClusterConfig, FlowConfig, MirrorConfig
from mirrorflow.config.offset_reset import OffsetReset
from mirrorflow.errors import DataLossError
from mirrorflow.kafka import clients, internal_topics
from mirrorflow.kafka.watermarks import WatermarkError, log_ends, log_starts, probe_watermarks
from mirrorflow.lease import check_held
from mirrorflow.source import topic_sync
from mirrorflow.source.history import CHAIN, Chain, HistoryStore
from mirrorflow.source.ledger import spans_store
from mirrorflow.source.offset_syncs import offset_syncs_topic
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan_records import (
    Break,
    Gap,
    Plan,
    PlanError,
    Range,
    TopicPart,
    deal,
    write_slots,
)
from mirrorflow.source.plan_store import PlanStore

log = logging.getLogger(__name__)

# How long a plan waits for the broker to open the remote partitions it created, asking
# at most this often (_await_opened).
OPENED_TIMEOUT_S = 60.0
OPENED_PAUSE_S = 0.5
# ... and, until these are served, asking for at most this many of them, spread over all.
OPENED_SAMPLE = 64


# --------------------------------------------------------------------------- planning


def _source_metadata(config: MirrorConfig, flow: FlowConfig):
    source = config.cluster(flow.source)
    try:
        return clients.cluster_metadata(clients.admin_client(source), 10)
    except Exception as exc:
        raise PlanError(f"source cluster {flow.source!r} ({source.bootstrap_servers}) is not "
                        f"reachable: {exc}") from None


def discover_topics(config: MirrorConfig, flow: FlowConfig) -> dict[str, int]:
    """Source topics the flow mirrors, with their partition counts."""
    metadata = _source_metadata(config, flow)
    selected = flow.topic_filter().select(metadata.topics)
    return {t: len(metadata.topics[t].partitions) for t in selected
            if metadata.topics[t].error is None}


def ensure_remote_topics(config: MirrorConfig, flow: FlowConfig, topics: dict[str, int],
                         create: bool = True) -> tuple[dict[str, str], set[str]]:
    """Create missing remote topics (same partition count, the source's configs) and grow
    remote topics with fewer partitions than their source, as MM2 does; return source
    topic -> remote topic, and the remote topics that existed before (a topic created now
    is empty: its offsets need no asking, and its new partitions' leaders may still be
    settling). With ``create=False`` (a dry run) nothing is created or grown."""
    from confluent_kafka.admin import NewTopic

    policy = flow.policy()
    remote = {t: policy.format_remote_topic(flow.source, t) for t in topics}
    target = config.cluster(flow.target)
    admin = clients.admin_client(target)
    existing = clients.cluster_metadata(admin, 20).topics
    current = {name: len(existing[name].partitions) for name in remote.values()
               if name in existing}
    grow = topic_sync.partition_increases(topics, current, remote)
    missing = [t for t in topics if remote[t] not in existing]
    if create and (grow or missing):
        _state_topics_first(config, flow)
    if grow and not create:
        log.info("a run would grow %s", ", ".join(f"{t} to {n} partitions"
                                                 for t, n in grow.items()))
    elif grow:
        try:
            topic_sync.add_partitions(target, grow, current)
        except topic_sync.MetadataSyncError as exc:
            raise PlanError(str(exc)) from None
    existed = set(remote.values()) & set(existing)
    if not missing or not create:
        return remote, existed
    configs = (topic_sync.source_topic_configs(config, flow, missing)
               if flow.get("sync.topic.configs.enabled") else {})
    new = [NewTopic(remote[t], num_partitions=topics[t],
                    replication_factor=flow.get("replication.factor"),
                    config=configs.get(t, {})) for t in missing]
    check_held()
    for request in clients.metadata_requests(
            new, lambda t: 1 + t.num_partitions + len(t.config or {})):
        for name, future in admin.create_topics(request, operation_timeout=30,
                                                request_timeout=30).items():
            try:
                clients.answer(future, target, f"creating topic {name!r}", 30)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise PlanError(f"cannot create remote topic {name!r} on cluster "
                                    f"{flow.target!r}: {exc}") from None
                existed.add(name)  # created meanwhile by another: it may hold records
    log.info("created %d remote topics on %s: %s", len(missing), flow.target,
             _listed([remote[t] for t in missing]))
    return remote, existed


def _log_breaks(breaks: list[Break]) -> None:
    """A warning per break, but one line per kind of new partition (a first run over
    thousands of partitions is not thousands of lines)."""
    new: dict[str, list[Break]] = {}
    for found in breaks:
        if found.cause == "new":
            new.setdefault(found.detail, []).append(found)
        else:
            log.warning("%s[%d]: chain break (%s) at offset %d: %s", found.topic,
                        found.partition, found.cause, found.end, found.detail)
    for detail, found in new.items():
        log.info("chain break (new) of %d partitions (%s): %s", len(found),
                 _listed([f"{b.topic}[{b.partition}] at offset {b.end}" for b in found]), detail)


def _listed(names: list[str], shown: int = 10) -> str:
    """``names`` for a log line: the first ``shown`` of them, then how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _state_topics_first(config: MirrorConfig, flow: FlowConfig) -> None:
    """Create the missing state topics a run writes on the target (its plan, span records,
    positions, history, and offset syncs where they go there and are emitted) before its
    new remote topics or partitions. A broker opens new partitions in the order they were
    created, on one thread, so a state topic created after thousands of remote partitions
    has no leader until they all have one, and the run's plan waited for them before its
    mirror could start (a first run of 10,000 remote partitions: the plan's save waited
    24 s, the whole time the broker took to open them)."""
    target = config.cluster(flow.target)
    replication = flow.get("replication.factor")
    syncs = offset_syncs_topic(config, flow)
    internal_topics.ensure([
        PlanStore(config, flow).topic, spans_store(target, flow.source, replication),
        OffsetStore(target, flow.source, replication).topic,
        HistoryStore(target, flow.source, replication).topic,
        *([syncs] if flow.get("emit.offset-syncs.enabled") and syncs.cluster == target
          else [])])


def _await_opened(target: ClusterConfig, partitions: list[TopicPart]) -> None:
    """Until the target serves each remote partition the plan created and writes to (its
    log end answers). A broker knows of new partitions before it has opened them, one by
    one, for seconds when they are thousands; a producer sent to one not open yet retries
    it (NOT_LEADER_OR_FOLLOWER) and asks for metadata again. With the state topics created
    first (:func:`_state_topics_first`) nothing else held the mirror back, and its
    producers did so thousands of times while the broker opened the rest, slowing it (a
    first run of 10,000 partitions: 2,600 retries over 6 s). This asks at most twice a
    second; after :data:`OPENED_TIMEOUT_S` the producers wait on their own.

    It asks for :data:`OPENED_SAMPLE` partitions spread over all of them until those are
    served, then for every one: the broker opens them in the order of their creation
    requests, so the sample's last are served about when all are. Asking for every
    partition not yet served, twice a second, cost a first run of 10,000 partitions
    about 5 CPU-s of the driver's (librdkafka answers each partition as a Python future),
    on the cores the broker opens them with, and the broker answered every one.

    The log says how long the broker took: most of a first run of thousands of new
    partitions, and a figure of the broker's disk (docs/benchmark.md)."""
    if not partitions:
        return
    started = time.monotonic()
    step = -(-len(partitions) // OPENED_SAMPLE)
    deadline = started + OPENED_TIMEOUT_S
    try:
        for wanted in (partitions[::step], partitions) if step > 1 else (partitions,):
            log_ends(target, wanted, timeout=max(deadline - time.monotonic(), 0.1),
                     retry_max_s=OPENED_PAUSE_S)
    except WatermarkError as exc:
        log.warning("%s; the mirror's producers wait for them", exc)
        return
    log.info("cluster %r serves the %d partition%s this plan created, after %.1f s",
             target.alias, len(partitions), "" if len(partitions) == 1 else "s",
             time.monotonic() - started)


def _max_message_bytes(target: ClusterConfig, topics: list[str]) -> dict[str, int]:
    """Each remote topic's max.message.bytes: the writer's limit per record batch, so that
    a larger record fails naming its offset before anything of it is sent."""
    limits = {}
    for topic, entries in topic_sync.describe_configs(target, topics).items():
        entry = entries.get("max.message.bytes")
        if entry is not None and entry.value and entry.value.isdigit():
            limits[topic] = int(entry.value)
    return limits


def build_plan(config: MirrorConfig, flow: FlowConfig, run_id: str, *,
               only_topics: Iterable[str] | None = None,
               max_records: int | None = None, dry_run: bool = False,
               starts: Mapping[TopicPart, int] | None = None,
               cores: int | None = None) -> Plan:
    """Plan every source partition from its committed position to its end (for the
    source's isolation level); ``only_topics`` narrows the flow's topics (its heartbeat
    topics always stay in). A dry run writes nothing: no remote topic is created.
    ``starts`` (a dry run of a reset) plans those partitions from the offsets given.
    ``cores``: the Spark's that will mirror it, where known (:func:`write_slots`)."""
    topics = discover_topics(config, flow)
    policy = flow.policy()
    if only_topics is not None:
        # Heartbeat topics stay in, as MM2 always replicates them: the run's sensor waits
        # for the heartbeat this very plan carries.
        wanted = set(only_topics)
        topics = {t: n for t, n in topics.items()
                  if t in wanted or policy.is_heartbeats_topic(t)}
    remote, existing = ensure_remote_topics(config, flow, topics, create=not dry_run)
    cap = min(max_records or flow.get("mirrorflow.max.records.per.partition"),
              flow.get("mirrorflow.max.records.per.partition"))
    source_parts = [(t, p) for t, n in topics.items() for p in range(n)]
    source = config.cluster(flow.source)
    source_marks = probe_watermarks(source, source_parts, source.isolation_level())
    target = config.cluster(flow.target)
    target_ends = log_ends(target, [(remote[t], p) for t, p in source_parts
                                             if remote[t] in existing])
    # Topics created just now are not described: a broker learns of thousands of new
    # partitions seconds after CreateTopics returns, and this limit only steers the
    # dealing of ranges to slots (the mirror reads each remote topic's limit it writes by).
    limits = _max_message_bytes(target, [remote[t] for t in topics if remote[t] in existing])
    committed, outside = OffsetStore(config.cluster(flow.target), flow.source,
                                     flow.get("replication.factor")).read()
    chains = HistoryStore(target, flow.source).read_all(CHAIN).chains
    ids = clients.topic_ids(source, list(topics))
    for (topic, partition), start in (starts or {}).items():
        committed[(topic, partition)] = start - 1
        chains[(topic, partition)] = Chain(ids.get(topic, ""), start)
    ranges: list[Range] = []
    gaps: list[Gap] = []
    breaks: list[Break] = []
    chained_topics = {t for t, _ in chains}
    for topic, partition in source_parts:
        marks = source_marks[(topic, partition)]
        start, found = _chain_start(topic, partition, ids.get(topic, ""), marks,
                                    committed.get((topic, partition)),
                                    chains.get((topic, partition)),
                                    (topic, partition) in outside,
                                    topic in chained_topics,
                                    # A heartbeats topic starts at its log start whatever
                                    # auto.offset.reset says: MM2 emits one every second
                                    # and skips only the first, but a run waits for the
                                    # heartbeat it emitted just before this plan.
                                    OffsetReset() if policy.is_heartbeats_topic(topic)
                                    else flow.offset_reset)
        breaks += found
        if start > marks.high:
            raise PlanError(
                f"source {topic}[{partition}] ends at offset {marks.high} but offset "
                f"{start - 1} was already mirrored: the topic was recreated or truncated; "
                f"reset the flow's position for this topic to mirror it again")
        if start < marks.low:
            gap = Gap(topic, partition, start, marks.low)
            if flow.get("failOnDataLoss"):
                raise DataLossError(
                    f"source {topic}[{partition}]: offsets {gap.start}..{gap.end - 1} were "
                    f"removed by retention before they were mirrored; set "
                    f"{flow.name}.failOnDataLoss = false to skip them")
            log.warning("data loss on %s[%d]: offsets %d..%d skipped", topic, partition,
                        gap.start, gap.end - 1)
            gaps.append(gap)
            start = marks.low
        end = min(marks.high, start + cap)
        if end > start:
            ranges.append(Range(topic, partition, start, end, remote[topic],
                                target_ends.get((remote[topic], partition), 0),
                                limits.get(remote[topic])))
    _log_breaks(breaks)
    if not dry_run:
        _await_opened(config.cluster(flow.target), [(r.remote_topic, r.partition)
                                                     for r in ranges
                                                     if r.remote_topic not in existing])
    return Plan(
        plan_id=f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}",
        flow=flow.name, run_id=run_id, created_ms=int(time.time() * 1000),
        ranges=tuple(deal(ranges, write_slots(flow, [r.size for r in ranges], cores))),
        gaps=tuple(gaps),
        topic_ids=ids, breaks=tuple(breaks),
        isolation=source.isolation_level(),
    )


def _chain_start(topic: str, partition: int, topic_id: str, marks, position: int | None,
                 chain: Chain | None, moved_outside: bool, topic_known: bool,
                 reset: OffsetReset) -> tuple[int, list[Break]]:
    """Where the plan starts a partition, and the break that explains it where that is
    not where the flow's chain of it ends (see the module's note)."""
    def named(cause: str, start: int, end: int, detail: str) -> list[Break]:
        return [Break(topic, partition, cause, start, end, topic_id, detail,
                      int(time.time() * 1000))]

    if chain is not None and topic_id and chain.topic_id and chain.topic_id != topic_id:
        return marks.low, named("recreated", marks.low, marks.low,
                                f"the topic was deleted and created again (topic id "
                                f"{chain.topic_id} -> {topic_id}); its old incarnation "
                                f"was accounted for up to offset {chain.next - 1}, the new "
                                f"one is mirrored from its log start")
    if position is None:
        if chain is not None:  # the offset store lost it (deleted by hand): the chain knows
            return chain.next, []
        kind = "a new partition of a topic the flow mirrors" if topic_known else \
            "a topic new to the flow"
        if reset.value == "none":
            raise PlanError(f"source {topic}[{partition}] is {kind} and has no position, "
                            f"and {reset.named} starts no partition (MM2's consumer fails "
                            "the same way): set the flow's positions with mirrorflow reset, "
                            "or set it to earliest or latest")
        if reset.value == "latest":
            left_out = (f"offsets {marks.low}..{marks.high - 1} left out"
                        if marks.high > marks.low else "nothing left out")
            return marks.high, named("new", marks.low, marks.high,
                                     f"{kind}: mirrored from its end ({reset.named}, as "
                                     f"MM2), {left_out}")
        return marks.low, named("new", marks.low, marks.low,
                                f"{kind}: mirrored from its log start")
    start = position + 1
    if chain is None:
        return start, named("new", start, start,
                            f"the flow's chain of it starts at the committed position "
                            f"(offset {position}), set before the flow kept a chain")
    if chain.next != start and moved_outside:
        low, high = sorted((chain.next, start))
        return start, named("outside", low, high,
                            f"the position was moved from offset {chain.next - 1} to "
                            f"{position} outside mirrorflow (MirrorMaker 2 took over, or "
                            f"another tool wrote mm2-offsets)")
    return start, []  # a position mirrorflow set that disagrees: the proof says so


def _without_gone_topics(config: MirrorConfig, flow: FlowConfig, store: PlanStore,
                         plan: Plan) -> Plan:
    """The pending plan minus the ranges of source topics deleted since it was made (their
    reads can never finish) or deleted and created again (a new topic id: the ranges
    point into the old incarnation; each becomes a ``recreated`` break, so the commit
    starts the new incarnation's chain at its log start and the next plan mirrors it).
    The plan is stored again, so the change is on record."""
    planned = sorted({r.topic for r in plan.ranges})
    present = _source_metadata(config, flow).topics
    gone = [t for t in planned if t not in present]
    ids = clients.topic_ids(config.cluster(flow.source), [t for t in planned if t in present])
    recreated = [t for t in planned if t in ids and plan.topic_ids.get(t)
                 and ids[t] != plan.topic_ids[t]]
    if not gone and not recreated:
        return plan
    if gone:
        log.warning("source topics deleted since plan %s was made, dropped from it (their "
                    "positions stay, so a recreated topic is detected): %s", plan.plan_id,
                    ", ".join(gone))
    source = config.cluster(flow.source)
    lows = log_starts(source, [(r.topic, r.partition) for r in plan.ranges
                               if r.topic in recreated])
    breaks = [Break(r.topic, r.partition, "recreated", lows[(r.topic, r.partition)],
                    lows[(r.topic, r.partition)], ids[r.topic],
                    f"the topic was deleted and created again while plan {plan.plan_id} was "
                    f"pending (topic id {plan.topic_ids[r.topic]} -> {ids[r.topic]}); its "
                    f"planned range {r.start}..{r.end - 1} of the old incarnation is dropped, "
                    "the new one is mirrored from its log start", int(time.time() * 1000))
              for r in plan.ranges if r.topic in recreated]
    for found in breaks:
        log.warning("%s[%d]: %s", found.topic, found.partition, found.detail)
    kept = replace(plan, ranges=tuple(r for r in plan.ranges
                                      if r.topic not in gone and r.topic not in recreated),
                   breaks=(*(b for b in plan.breaks if b.topic not in recreated), *breaks))
    store.save(kept)
    return kept


def plan_run(config: MirrorConfig, flow: FlowConfig, run_id: str, **limits) -> tuple[Plan, bool]:
    """The pending plan if there is one (resumed), else a new stored plan. (plan, resumed)."""
    store = PlanStore(config, flow)
    pending = store.pending()
    if pending is not None:
        log.info("resuming pending plan %s of run %s", pending.plan_id, pending.run_id)
        return _without_gone_topics(config, flow, store, pending), True
    plan = build_plan(config, flow, run_id, **limits)
    store.save(plan)
    return plan, False
