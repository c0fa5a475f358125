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

import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from mirrorflow.config.model import ClusterConfig, FlowConfig, MirrorConfig
from mirrorflow.config.offset_reset import OffsetReset
from mirrorflow.errors import DataLossError, MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.kafka.internal_topics import STATE_SEGMENT_MS, CompactedTopic
from mirrorflow.kafka.watermarks import probe_watermarks
from mirrorflow.lease import check_held
from mirrorflow.plain import plain
from mirrorflow.source import topic_sync
from mirrorflow.source.history import Chain, HistoryStore
from mirrorflow.source.offsets import OffsetStore

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]
PENDING_KEY = b"pending"
KEEP_PLANS = 20


class PlanError(MirrorflowError):
    """The run cannot be planned; the message names the topic, partition or cluster."""


class PlanNotPendingError(MirrorflowError):
    """A step was asked to work on a plan that is no longer the flow's pending plan (a
    cleared or re-run task of an older run): nothing is done, and the message says who
    committed or superseded it."""


@dataclass(frozen=True)
class Range:
    """Upstream offsets [start, end) of one source partition, and where they go."""

    topic: str
    partition: int
    start: int
    end: int
    remote_topic: str
    target_start: int
    max_message_bytes: int | None = None  # the remote topic's max.message.bytes
    slot: int = 0  # the write task (and transactional id) that writes it in every attempt

    @property
    def size(self) -> int:
        """Offsets in the range (records, plus any gaps of compaction or markers)."""
        return self.end - self.start


def deal(ranges: list[Range], slots: int) -> list[Range]:
    """The ranges dealt out to ``slots`` write slots, largest first to the least loaded
    (so a few large ranges get a task each, and many small ones share few). A slot keeps
    to remote topics of one ``max.message.bytes`` while there is room (its producer
    batches at the smallest of its topics' limits)."""
    unset = object()
    loads, limits = [0] * slots, [unset] * slots
    out = list(ranges)
    for i in sorted(range(len(out)), key=lambda i: (-out[i].size, i)):
        limit = out[i].max_message_bytes
        fits = [s for s in range(slots) if limits[s] is unset or limits[s] == limit]
        slot = min(fits or range(slots), key=lambda s: (loads[s], s))
        limits[slot] = limit if limits[slot] is unset else limits[slot]
        loads[slot] += out[i].size
        out[i] = replace(out[i], slot=slot)
    return out


@dataclass(frozen=True)
class Gap:
    """Offsets [start, end) that retention removed before they were mirrored."""

    topic: str
    partition: int
    start: int
    end: int


BREAK_CAUSES = ("new", "recreated", "retention", "reset", "outside")


@dataclass(frozen=True)
class Break:
    """A named break in a source partition's chain: the chain goes on at offset ``end``
    of incarnation ``topic_id``; offsets ``[start, end)`` (none when equal) were not
    mirrored, because of ``cause`` (:data:`BREAK_CAUSES`), which ``detail`` explains."""

    topic: str
    partition: int
    cause: str
    start: int
    end: int
    topic_id: str
    detail: str
    at_ms: int = 0  # when it was named: a reset or recreation supersedes older checkpoints


@dataclass(frozen=True)
class Plan:
    """One run's ranges, stored before any record moves, with the topic id of every
    source topic it covers and the named breaks of their chains."""

    plan_id: str
    flow: str
    run_id: str
    created_ms: int
    ranges: tuple[Range, ...]
    gaps: tuple[Gap, ...] = field(default_factory=tuple)
    topic_ids: dict[str, str] = field(default_factory=dict)
    breaks: tuple[Break, ...] = field(default_factory=tuple)
    # How the source was read: its ends are the last stable offsets under read_committed.
    isolation: str = "read_committed"

    def to_json(self) -> str:
        return json.dumps(plain(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        doc = json.loads(text)
        return cls(
            plan_id=doc["plan_id"], flow=doc["flow"], run_id=doc["run_id"],
            created_ms=doc["created_ms"],
            ranges=tuple(Range(**r) for r in doc["ranges"]),
            gaps=tuple(Gap(**g) for g in doc.get("gaps", ())),
            topic_ids=dict(doc.get("topic_ids", {})),
            breaks=tuple(Break(**b) for b in doc.get("breaks", ())),
            isolation=doc.get("isolation", "read_uncommitted"),
        )

    @property
    def all_breaks(self) -> list[Break]:
        """The plan's breaks, retention gaps included, in partition order."""
        gaps = [Break(g.topic, g.partition, "retention", g.start, g.end,
                      self.topic_ids.get(g.topic, ""),
                      "removed by retention or DeleteRecords before they were read")
                for g in self.gaps]
        return sorted([*self.breaks, *gaps], key=lambda b: (b.topic, b.partition, b.end))

    def chains_after(self, chains: dict[TopicPart, Chain]) -> dict[TopicPart, Chain]:
        """The chains of the partitions this plan reads, gaps or breaks, once it is
        committed: each goes on where the plan leaves it, with the plan's breaks."""
        ends: dict[TopicPart, tuple[int, str]] = {}
        found: dict[TopicPart, list[dict]] = {}
        for b in self.all_breaks:
            ends[(b.topic, b.partition)] = (b.end, b.topic_id)
            found.setdefault((b.topic, b.partition), []).append(plain(b))
        for r in self.ranges:
            ends[(r.topic, r.partition)] = (r.end, self.topic_ids.get(r.topic, ""))
        out = {}
        for tp, (end, topic_id) in ends.items():
            known = chains.get(tp)
            out[tp] = Chain(topic_id or (known.topic_id if known else ""), end,
                            (known.breaks if known else []) + found.get(tp, []))
        return out

    def restarts(self, tp: TopicPart) -> bool:
        """Whether the plan restarts the partition's chain (may move it backward)."""
        return any((b.topic, b.partition) == tp and b.cause in ("recreated", "reset",
                                                                 "outside")
                   for b in self.breaks)

    @property
    def offsets(self) -> int:
        """Offsets the ranges span (records, plus any compaction holes or markers)."""
        return sum(r.size for r in self.ranges)

    @property
    def positions(self) -> dict[TopicPart, int]:
        """Positions to commit once the plan is mirrored: the last offset of every range,
        or the last offset of a recorded gap where nothing was left to mirror after it."""
        positions = {(b.topic, b.partition): b.end - 1 for b in self.breaks
                     if b.cause == "recreated"}  # the old incarnation's position is void
        positions.update({(g.topic, g.partition): g.end - 1 for g in self.gaps})
        positions.update({(r.topic, r.partition): r.end - 1 for r in self.ranges})
        return positions


def plans_topic(source_alias: str) -> str:
    return f"mirrorflow-plans.{source_alias}.internal"


class PlanStore:
    """Plans and their results, on the target cluster, per source cluster."""

    def __init__(self, config: MirrorConfig, flow: FlowConfig):
        self.flow = flow.name
        self.topic = CompactedTopic(config.cluster(flow.target), plans_topic(flow.source), 1,
                                    flow.get("replication.factor"), STATE_SEGMENT_MS)

    def require_pending(self, plan_id: str) -> None:
        """Raise :class:`PlanNotPendingError` unless ``plan_id`` is the pending plan, naming
        the run that committed it or the plan that superseded it."""
        entries = self.topic.read()
        pending = entries.get(PENDING_KEY)
        if pending == plan_id.encode():
            return
        committed = entries.get(b"committed/" + plan_id.encode())
        if committed is not None:
            by = json.loads(committed).get("run_id", "?")
            why = f"it was already committed by run {by}"
        elif pending is not None:
            newer = entries.get(b"plan/" + pending)
            made_by = json.loads(newer).get("run_id", "?") if newer else "?"
            why = f"it was superseded by plan {pending.decode()} (pending, made by run {made_by})"
        else:
            why = "it was dropped (a reset, or the plan store was cleared) and nothing is pending"
        raise PlanNotPendingError(f"plan {plan_id} of flow {self.flow} is not pending: {why}; "
                                  "nothing was done")

    def pending(self) -> Plan | None:
        entries = self.topic.read()
        plan_id = entries.get(PENDING_KEY)
        if plan_id is None:
            return None
        text = entries.get(b"plan/" + plan_id)
        if text is None:
            log.warning("%s: pending plan %s has no record; planning anew",
                        self.topic.topic, plan_id.decode())
            return None
        return self._parse(plan_id.decode(), text)

    def _parse(self, plan_id: str, text: bytes) -> Plan:
        """A stored plan; a malformed one is an error naming it, not a traceback: which
        records its attempt wrote is unknown, so planning anew could write them twice."""
        try:
            return Plan.from_json(text)
        except (ValueError, KeyError, TypeError) as exc:
            raise PlanError(
                f"plan {plan_id!r} in {self.topic.topic} on cluster "
                f"{self.topic.cluster.alias!r} is malformed ({type(exc).__name__}: {exc}); "
                f"check the remote topics against the source, then reset the flow's "
                f"positions (mirrorflow reset) to continue") from None

    def save(self, plan: Plan) -> None:
        """Store the plan and mark it pending, in that order."""
        check_held()
        self.topic.write([(b"plan/" + plan.plan_id.encode(), plan.to_json().encode()),
                          (PENDING_KEY, plan.plan_id.encode())])

    def load(self, plan_id: str) -> Plan:
        text = self.topic.read().get(b"plan/" + plan_id.encode())
        if text is None:
            raise PlanError(f"plan {plan_id!r} is not in {self.topic.topic} on cluster "
                            f"{self.topic.cluster.alias!r}")
        return self._parse(plan_id, text)

    def save_result(self, plan_id: str, result: dict) -> None:
        check_held()
        self.topic.write([(b"result/" + plan_id.encode(), json.dumps(result).encode())])

    def save_empty_result(self, plan_id: str) -> None:
        """The result of a plan with no ranges, stored where no Spark job runs for it."""
        self.save_result(plan_id, {"plan_id": plan_id, "ranges": []})

    def result(self, plan_id: str) -> dict | None:
        text = self.topic.read().get(b"result/" + plan_id.encode())
        return json.loads(text) if text is not None else None

    def save_validation(self, plan_id: str, validation: dict) -> None:
        self.topic.write([(b"validation/" + plan_id.encode(),
                           json.dumps(validation).encode())])

    def validation(self, plan_id: str) -> dict | None:
        text = self.topic.read().get(b"validation/" + plan_id.encode())
        return json.loads(text) if text is not None else None

    def last_synced(self, kind: str) -> int | None:
        """When metadata of ``kind`` (configs, acls) was last synced, epoch ms."""
        text = self.topic.read().get(b"synced/" + kind.encode())
        return int(text) if text is not None and text.isdigit() else None

    def mark_synced(self, kind: str, at_ms: int) -> None:
        self.topic.write([(b"synced/" + kind.encode(), str(at_ms).encode())])

    def mark_committed(self, plan: Plan, run_id: str) -> None:
        """Clear the pending mark (if it is still this plan's), record which run committed
        the plan, and drop all but the newest plans and results; malformed stored plans
        are dropped with a warning."""
        check_held()
        entries = self.topic.read()
        stored, malformed = [], []
        for key, value in entries.items():
            if key.startswith(b"plan/"):
                try:
                    stored.append(Plan.from_json(value))
                except (ValueError, KeyError, TypeError):
                    log.warning("%s: malformed record %s dropped", self.topic.topic, key)
                    malformed.append(key[len(b"plan/"):])
        stored.sort(key=lambda p: p.created_ms)
        old = [p.plan_id.encode() for p in stored[:-KEEP_PLANS]] + malformed
        pending = [(PENDING_KEY, None)] if entries.get(PENDING_KEY) == plan.plan_id.encode() \
            else []
        done = json.dumps({"run_id": run_id, "at_ms": int(time.time() * 1000)}).encode()
        self.topic.write(pending
                         + [(b"committed/" + plan.plan_id.encode(), done)]
                         + [(b"plan/" + i, None) for i in old]
                         + [(prefix + i, None) for i in old
                            for prefix in (b"result/", b"validation/", b"committed/")])


# --------------------------------------------------------------------------- planning


def _source_metadata(config: MirrorConfig, flow: FlowConfig):
    source = config.cluster(flow.source)
    try:
        return clients.admin_client(source).list_topics(timeout=10)
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
                         create: bool = True) -> dict[str, str]:
    """Create missing remote topics (same partition count, the source's configs) and grow
    remote topics with fewer partitions than their source, as MM2 does; source topic ->
    remote topic. With ``create=False`` (a dry run) nothing is created or grown."""
    from confluent_kafka.admin import NewTopic

    policy = flow.policy()
    remote = {t: policy.format_remote_topic(flow.source, t) for t in topics}
    target = config.cluster(flow.target)
    admin = clients.admin_client(target)
    existing = admin.list_topics(timeout=20).topics
    current = {name: len(existing[name].partitions) for name in remote.values()
               if name in existing}
    grow = topic_sync.partition_increases(topics, current, remote)
    if grow and not create:
        log.info("a run would grow %s", ", ".join(f"{t} to {n} partitions"
                                                 for t, n in grow.items()))
    elif grow:
        try:
            topic_sync.add_partitions(target, grow, current)
        except topic_sync.MetadataSyncError as exc:
            raise PlanError(str(exc)) from None
    missing = [t for t in topics if remote[t] not in existing]
    if not missing or not create:
        return remote
    configs = (topic_sync.source_topic_configs(config, flow, missing)
               if flow.get("sync.topic.configs.enabled") else {})
    new = [NewTopic(remote[t], num_partitions=topics[t],
                    replication_factor=flow.get("replication.factor"),
                    config=configs.get(t, {})) for t in missing]
    check_held()
    for request in clients.metadata_requests(
            new, lambda t: 1 + t.num_partitions + len(t.config or {})):
        for name, future in admin.create_topics(request, operation_timeout=30).items():
            try:
                future.result(timeout=30)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise PlanError(f"cannot create remote topic {name!r} on cluster "
                                    f"{flow.target!r}: {exc}") from None
    log.info("created remote topics on %s: %s", flow.target, ", ".join(remote[t] for t in missing))
    return remote


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
               starts: Mapping[TopicPart, int] | None = None) -> Plan:
    """Plan every source partition from its committed position to its end (for the
    source's isolation level); ``only_topics`` narrows the flow's topics (its heartbeat
    topics always stay in). A dry run writes nothing: no remote topic is created.
    ``starts`` (a dry run of a reset) plans those partitions from the offsets given."""
    topics = discover_topics(config, flow)
    policy = flow.policy()
    if only_topics is not None:
        # Heartbeat topics stay in, as MM2 always replicates them: the run's sensor waits
        # for the heartbeat this very plan carries.
        wanted = set(only_topics)
        topics = {t: n for t, n in topics.items()
                  if t in wanted or policy.is_heartbeats_topic(t)}
    remote = ensure_remote_topics(config, flow, topics, create=not dry_run)
    cap = min(max_records or flow.get("mirrorflow.max.records.per.partition"),
              flow.get("mirrorflow.max.records.per.partition"))
    source_parts = [(t, p) for t, n in topics.items() for p in range(n)]
    source = config.cluster(flow.source)
    source_marks = probe_watermarks(source, source_parts, source.isolation_level())
    target = config.cluster(flow.target)
    existing = set(clients.admin_client(target).list_topics(timeout=10).topics)
    target_marks = probe_watermarks(target, [(remote[t], p) for t, p in source_parts
                                             if remote[t] in existing])
    limits = _max_message_bytes(target, [remote[t] for t in topics if remote[t] in existing])
    committed, outside = OffsetStore(config.cluster(flow.target), flow.source,
                                     flow.get("replication.factor")).read()
    chains = HistoryStore(target, flow.source).read_all().chains
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
            target_end = target_marks.get((remote[topic], partition))
            ranges.append(Range(topic, partition, start, end, remote[topic],
                                target_end.high if target_end else 0,
                                limits.get(remote[topic])))
    for found in breaks:
        log.warning("%s[%d]: chain break (%s) at offset %d: %s", found.topic,
                    found.partition, found.cause, found.end, found.detail)
    return Plan(
        plan_id=f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}",
        flow=flow.name, run_id=run_id, created_ms=int(time.time() * 1000),
        ranges=tuple(deal(ranges, flow.get("mirrorflow.write.tasks"))), gaps=tuple(gaps),
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
    lows = probe_watermarks(source, [(r.topic, r.partition) for r in plan.ranges
                                     if r.topic in recreated], source.isolation_level())
    breaks = [Break(r.topic, r.partition, "recreated", lows[(r.topic, r.partition)].low,
                    lows[(r.topic, r.partition)].low, ids[r.topic],
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
