"""The mirror: one Spark task per write slot reads the slot's ranges with one consumer
and writes them, exactly once, with one transactional producer, both in the JVM
(``jvm/connector``'s ``mirrorflow-mirror`` format: ``dev.mirrorflow.kafka.write``); no
record enters Python. Python is the driver: what to write, from where, under which
limits and schema ids.

The driver reads each range from where the plan's span records say its writing stopped
(a retry of a plan reads only what is left); the task's writer reads the range's resume
position after fencing, so a zombie that committed meanwhile is accounted for. Each task
returns a row per range: its result (the fields listed in
:mod:`mirrorflow.source.write_task`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.errors import DataLossError, MirrorflowError, one_line, raised_within
from mirrorflow.kafka import clients
from mirrorflow.kafka.internal_topics import await_readable
from mirrorflow.kafka.watermarks import log_starts
from mirrorflow.lease import unfenced_reason
from mirrorflow.plain import plain
from mirrorflow.schema import mapping
from mirrorflow.schema.ids_in_ranges import (
    UNMAPPED,
    find_ids,
    refuse,
    rewrite_table,
    stored_table,
)
from mirrorflow.schema.transfer import IdMapper
from mirrorflow.source import ledger, topic_sync
from mirrorflow.source.history import merge_spans
from mirrorflow.source.plan_records import Plan
from mirrorflow.source.plan_store import PlanStore
from mirrorflow.source.write_task import RecordTooLargeError, WriteError, WriteTask
from mirrorflow.spark.kafka_source import kafka_options

log = logging.getLogger(__name__)

MIRROR_FORMAT = "mirrorflow-mirror"
# How long the mirror waits for its writers' committed records to become readable.
READABLE_TIMEOUT_S = 60.0


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
    # Each range is read from where the plan's spans say its writing stopped; the writer
    # reads its resume position after fencing (the Java client: librdkafka misreads the
    # progress group's offsets of many partitions that the Java client committed) and
    # skips what an earlier attempt committed past that.
    reads: dict[int, list[tuple[str, int, int, int]]] = {}
    pending = {}
    for task in tasks:
        start = max(task.start, task.written_until)
        if start < task.end:
            reads.setdefault(task.slot, []).append((task.topic, task.partition, start,
                                                    task.end))
            pending[(task.topic, task.partition)] = task
    attempt: list[dict] = []
    if reads:
        _check_topics_exist(source, {t for ranges in reads.values() for t, *_ in ranges})
        # The remote topics' limits now, not as planned: a plan a too large record left
        # pending goes on once the limit is raised. Raised to the source's at once where
        # the target refuses the flow's transactions: a refused record's chunk, written
        # at-least-once, cannot be taken back, and would be written twice on the retry.
        remote_of = {t.topic: t.remote_topic for t in pending.values()}
        limits = topic_sync.message_limits(config, flow, remote_of,
                                           raise_to_source=unfenced_reason() is not None)
        ledger.spans_store(target, flow.source, flow.get("replication.factor")).ensure()
        groups = [ranges for _, ranges in sorted(reads.items())]
        options = mirror_options(config, flow, _limited(pending, limits), groups)
        carried, scanned = _map_schema_ids(spark, config, flow, plan, groups, options,
                                           scan=False)
        try:
            rows = _write(spark, options)
        except RecordTooLargeError:
            # Raised to the source topic's limit where config sync would copy it, and
            # written on from where the refused attempt stopped (its transaction aborted:
            # nothing twice); else the refusal stands.
            raised = topic_sync.message_limits(config, flow, remote_of)
            if raised == limits:
                raise
            options["tasks"] = _tasks_option(_limited(pending, raised), groups)
            rows = _write(spark, options)
        except MirrorflowError as exc:
            if scanned or UNMAPPED not in str(exc):
                raise
            # The stored mappings lacked an id (or a record is not in the wire format):
            # scan, map or refuse by name, and write the plan again.
            log.info("%s; scanning the planned ranges for their schema ids", exc)
            carried, _ = _map_schema_ids(spark, config, flow, plan, groups, options, scan=True)
            rows = _write(spark, options)
        attempt = [json.loads(row["result"]) for row in rows]
        for done in attempt:  # the ids its records carry: the proof checks their mappings
            done["schema_ids"] = carried.get((done["topic"], done["partition"]), [])
        # A transaction's markers reach its partitions a moment after its commit returns
        # (the coordinator writes them once it has answered): the proof reads the remote
        # partitions read_committed to their ends, which stop short of a commit whose
        # markers are not there yet (a proof found a remote partition empty).
        await_readable(target, {(d["remote_topic"], d["partition"]): d["last_downstream"] + 1
                                for d in attempt if d.get("last_downstream") is not None},
                       READABLE_TIMEOUT_S)
    return plan_result(config, flow, plan, attempt)


def _limited(pending: dict[tuple[str, int], WriteTask], limits: dict[str, int]
             ) -> dict[tuple[str, int], WriteTask]:
    """``pending`` with each remote topic's ``max.message.bytes`` of ``limits`` (as
    planned where it has none)."""
    return {tp: replace(t, max_message_bytes=limits.get(t.remote_topic, t.max_message_bytes))
            for tp, t in pending.items()}


def _write(spark, options: dict[str, str]) -> list:
    """The rows of a ``mirrorflow-mirror`` read: one per range written."""
    try:
        return spark.read.format(MIRROR_FORMAT).options(**options).load().collect()
    except Exception as exc:
        raise worker_error(exc) from exc


def mirror_options(config: MirrorConfig, flow: FlowConfig,
                   pending: dict[tuple[str, int], WriteTask],
                   groups: list[list[tuple[str, int, int, int]]]) -> dict[str, str]:
    """The options of a ``mirrorflow-mirror`` read: each write slot's ranges (their write
    tasks, and where the read of each starts), both clusters' Java client settings, the
    writer's names."""
    transfer = flow.schema_transfer
    options = {f"source.{k}": v for k, v in kafka_options(config.cluster(flow.source)).items()}
    options.update({f"target.kafka.{k}": v for k, v in clients.java_client_config(
        config.cluster(flow.target), "producer").items()})
    options.update({"tasks": _tasks_option(pending, groups), "sourceAlias": flow.source,
                    "targetAlias": flow.target,
                    "digestHeaders": str(transfer is None or transfer.include_headers).lower()})
    return options


def _tasks_option(pending: dict[tuple[str, int], WriteTask],
                  groups: list[list[tuple[str, int, int, int]]]) -> str:
    """The ``tasks`` option: each write task, and where the read of its range starts."""
    starts = {(topic, partition): start
              for group in groups for topic, partition, start, _ in group}
    return json.dumps([{**plain(task), "read_start": starts[tp]}
                       for tp, task in pending.items()])


def _map_schema_ids(spark, config: MirrorConfig, flow: FlowConfig, plan: Plan,
                    groups: list[list[tuple[str, int, int, int]]],
                    options: dict[str, str], scan: bool
                    ) -> tuple[dict[tuple[str, int], list[tuple[str, int]]], bool]:
    """Under a schema registry transfer, the table of ids the writers rewrite, added to
    ``options``: the flow's stored mappings where they cover every topic of the plan
    (unless ``scan``), else the ids a scan of the ranges finds
    (:mod:`mirrorflow.schema.ids_in_ranges`), mapped on the driver and their new mappings
    stored with the plan. Returns the ids each source partition's records may carry (for
    the proof to check their mappings: without a scan, every id of its topic's table),
    and whether a writer's refusal is final: the ranges were scanned, or there is no
    transfer (nothing to scan for)."""
    transfer = flow.schema_transfer
    if transfer is None:
        return {}, True
    policy = flow.policy()
    store = PlanStore(config, flow)
    stored = mapping.stored(store.topic.read())
    remote_of = {r.topic: r.remote_topic for r in plan.ranges}
    options["dropHeaders"] = str(not transfer.include_headers).lower()
    partitions = [(t, p) for group in groups for t, p, *_ in group
                  if not policy.is_heartbeats_topic(t)]
    if not scan:
        table = stored_table(stored, {remote_of[t] for t, _ in partitions}, transfer.fields)
        if table is not None:
            options["schemaIds"] = json.dumps(table)
            return {(t, p): sorted((part, int(i)) for part, ids in table[remote_of[t]].items()
                                   for i in ids) for t, p in partitions}, False
    found = find_ids(spark, config.cluster(flow.source), groups, transfer,
                     policy.is_heartbeats_topic)
    refuse(found, transfer, flow.name)
    mapper = IdMapper(transfer, flow.name, config.cluster(flow.source),
                      config.cluster(flow.target), stored, policy.is_heartbeats_topic,
                      plan.plan_id)
    table = rewrite_table(mapper, found, remote_of)
    store.save_mappings(mapper.uncommitted)
    options["schemaIds"] = json.dumps(table)
    return {tp: sorted((part, i) for part, values in ids.ids.items() for i in values)
            for tp, ids in found.items()}, True


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
    starts = log_starts(source, late) if late else {}
    ranges = []
    for r in plan.ranges:
        tp = (r.topic, r.partition)
        mine = spans.get(tp, [])
        done = figures.get(tp, {})
        gaps = [tuple(g) for g in done.get("gaps", [])]
        first = mine[0].upstream_first if mine else r.end
        if tp in starts and starts[tp] > r.start and not any(g[0] == r.start
                                                                     for g in gaps):
            gap = (r.start, min(starts[tp], first))
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
