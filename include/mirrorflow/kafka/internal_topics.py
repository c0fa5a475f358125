"""Compacted internal topics used as key/value stores (offset store, plan store).

Keys are partitioned with murmur2, as the Java client does, so that records written by
mirrorflow and by MirrorMaker 2 for the same key land in the same partition and
compaction keeps only the newest.

Writes made while a flow's lease is held go through that lease's fence
(:class:`mirrorflow.state_fence.StateFence`, installed with :func:`fenced_by`): transactions of
the flow's own ``transactional.id``, so a holder that lost the flow can write nothing.
Within :func:`one_transaction`, the writes of several stores land in one such transaction.
Reads are ``read_committed``: a fenced holder's aborted records are never seen.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.kafka.watermarks import probe_watermarks

log = logging.getLogger(__name__)


class InternalTopicError(MirrorflowError):
    """An internal topic could not be created, read or written."""


# Settings of every producer of state records. A plan, its result and its proof are one
# record each, of about 150 bytes a range uncompressed: 10,000 ranges make megabytes of
# JSON, which librdkafka would refuse past its message.max.bytes (1,000,000) before
# sending. zstd makes them a tenth of that, which is what the broker holds against the
# topic's max.message.bytes (1 MiB by default).
STATE_PRODUCER = {"compression.type": "zstd", "message.max.bytes": 256 * 1024 * 1024}

Records = list[tuple[bytes, bytes | None]]
Headers = list[tuple[str, bytes]] | None
# One write: a topic, its records and their headers.
Write = tuple["CompactedTopic", Records, Headers]
# The held lease's fenced writer (writes, timeout), for this context: one transaction.
FenceWriter = Callable[[list[Write], float], None]
_FENCE: contextvars.ContextVar[FenceWriter | None] = contextvars.ContextVar("fence",
                                                                             default=None)
# The writes :func:`one_transaction` holds back until its end, for this context.
_HELD: contextvars.ContextVar[list[Write] | None] = contextvars.ContextVar("held",
                                                                          default=None)


def fenced_by(writer: FenceWriter | None) -> contextvars.Token:
    """Route this context's internal-topic writes through ``writer`` (the lease's fence);
    reset with the returned token."""
    return _FENCE.set(writer)


def unfenced(token: contextvars.Token) -> None:
    """Undo :func:`fenced_by`."""
    _FENCE.reset(token)


@contextlib.contextmanager
def one_transaction(timeout: float = 30.0) -> Iterator[None]:
    """Within this context, state writes are held back and, when it ends without an error,
    written together: through the held lease's fence, in one transaction, so that they land
    all or none (a run's commit writes its history, positions and plan mark this way: one
    commit of the flow's state producer where each was one). A failure inside drops them:
    nothing of the steps is written. Reads inside do not see the held writes, so a step
    inside must not read what an earlier one wrote. Nested contexts join the outer one."""
    if _HELD.get() is not None:
        yield
        return
    held: list[Write] = []
    token = _HELD.set(held)
    try:
        yield
    finally:
        _HELD.reset(token)
    if held:
        _write(held, timeout)


def _write(writes: list[Write], timeout: float) -> None:
    """``writes`` through this context's fence (one transaction), else one by one; their
    topics created first where missing (:func:`ensure`)."""
    ensure([topic for topic, _, _ in writes])
    fence = _FENCE.get()
    if fence is not None:
        fence(writes, timeout)
        return
    for topic, records, headers in writes:
        topic.write_unfenced(records, timeout, headers)


def ensure(topics: list[CompactedTopic]) -> None:
    """Create those of ``topics`` that are missing (:meth:`CompactedTopic.new_topic`),
    one describe request per cluster (and one create request for its missing): a write to
    a missing topic would wait for it until the producer gives up, or have the broker
    auto-create it without compaction. (A commit writes three topics, each of which asked
    on its own, about 18 ms a request on a local broker; a new flow's created them one by
    one.)"""
    by_cluster: dict[str, dict[str, CompactedTopic]] = {}
    for topic in topics:
        by_cluster.setdefault(topic.cluster.bootstrap_servers, {})[topic.topic] = topic
    for named in by_cluster.values():
        clients.ensure_topics(next(iter(named.values())).cluster,
                              [topic.new_topic() for topic in named.values()])


@dataclass(frozen=True)
class LogRecord:
    """One record of an internal topic, as stored."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass
class _ReadLog:
    """What reads of one topic in this context got: its records and, per partition, the
    offset they reach (the end that read saw)."""

    topic_id: str
    records: dict[int, list[LogRecord]] = field(default_factory=dict)
    reached: dict[int, int] = field(default_factory=dict)


_READS: contextvars.ContextVar[dict[tuple[str, str], _ReadLog] | None] = \
    contextvars.ContextVar("internal_reads", default=None)


@dataclass
class _Unsettled:
    """Committed transactions of this context whose ends a ``read_committed`` reader may
    not see yet, per cluster (:func:`readable_later`)."""

    clusters: dict[str, ClusterConfig] = field(default_factory=dict)
    ends: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)

    def add(self, cluster: ClusterConfig, ends: dict[tuple[str, int], int]) -> None:
        self.clusters[cluster.bootstrap_servers] = cluster
        found = self.ends.setdefault(cluster.bootstrap_servers, {})
        for tp, end in ends.items():
            found[tp] = max(found.get(tp, 0), end)

    def settle(self, cluster: ClusterConfig, topic: str | None, timeout: float) -> None:
        """Wait until ``topic``'s (every topic's, for None) are readable."""
        found = self.ends.get(cluster.bootstrap_servers, {})
        due = {tp: end for tp, end in found.items() if topic is None or tp[0] == topic}
        if due:
            await_readable(cluster, due, timeout)
            for tp in due:
                del found[tp]


_UNSETTLED: contextvars.ContextVar[_Unsettled | None] = contextvars.ContextVar(
    "internal_unsettled", default=None)


@contextlib.contextmanager
def incremental_reads(timeout: float = 30.0) -> Iterator[None]:
    """Within this context, :func:`read_log` fetches only what a topic gained since this
    context last read it (a run reads its state topics a dozen times: plans of 1,000
    ranges each were fetched and decoded again every time). What it returns is what a
    full read would: a topic deleted and created again (a new topic id) is read anew, and
    records below the log start (retention, deleted records) are dropped. Records that
    compaction removed meanwhile may still be returned, as a read just before compaction
    would have; every reader takes the newest record of a key.

    The context's committed state writes are waited for (:func:`readable_later`) where a
    read of their topic comes first, and all of them when it ends: whoever reads the state
    next (another task, another process) sees them. Nested contexts share the outer
    one's reads and waits."""
    if _READS.get() is not None:
        yield
        return
    token = _READS.set({})
    pending = _UNSETTLED.set(_Unsettled())
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        try:
            settle_writes(timeout)
        except MirrorflowError:
            if not failed:  # the context's own failure is the one reported
                raise
        finally:
            _UNSETTLED.reset(pending)
            _READS.reset(token)


def settle_writes(timeout: float = 30.0) -> None:
    """Wait until every state write of this context is readable, before another process
    reads them while the context goes on (a spark-submit job reading the plan)."""
    unsettled = _UNSETTLED.get()
    if unsettled is not None:
        for cluster in unsettled.clusters.values():
            unsettled.settle(cluster, None, timeout)


def readable_later(cluster: ClusterConfig, ends: dict[tuple[str, int], int],
                   timeout: float) -> None:
    """:func:`await_readable` for a committed transaction's ``ends``: at once outside
    :func:`incremental_reads`; within it, before the next read of one of their topics and
    at the context's end. The wait is some 8 ms after each commit (the markers the
    coordinator writes once it has answered), which a run's half dozen state writes paid
    one after the other, most of them never read back in the run."""
    unsettled = _UNSETTLED.get()
    if unsettled is None:
        await_readable(cluster, ends, timeout)
    else:
        unsettled.add(cluster, ends)


def read_log(cluster: ClusterConfig, topic: str, timeout: float = 60.0) -> list[LogRecord]:
    """Every record of a topic from log start to its end now, per partition in order
    (within :func:`incremental_reads`, only what is new is fetched).

    A missing topic reads as empty. Used for MM2's internal topics, which are small.
    """
    unsettled = _UNSETTLED.get()
    if unsettled is not None:
        unsettled.settle(cluster, topic, timeout)
    description = clients.describe_topics(cluster, [topic], 15).get(topic)
    if description is None:
        return []
    marks = probe_watermarks(cluster, [(topic, p.id) for p in description.partitions])
    reads = _READS.get()
    known = reads.get((cluster.bootstrap_servers, topic)) if reads is not None else None
    if known is None or known.topic_id != str(description.topic_id) or any(
            marks[(topic, p)].high < end for p, end in known.reached.items()
            if (topic, p) in marks):
        known = _ReadLog(str(description.topic_id))
    starts = {tp: max(m.low, known.reached.get(tp[1], 0)) for tp, m in marks.items()}
    for (_, partition), mark in marks.items():
        kept = known.records.get(partition, [])
        if kept and kept[0].offset < mark.low:
            known.records[partition] = [r for r in kept if r.offset >= mark.low]
    for record in _fetch(cluster, topic, {tp: (starts[tp], m.high) for tp, m in marks.items()
                                          if m.high > starts[tp]}, timeout):
        known.records.setdefault(record.partition, []).append(record)
    known.reached = {p: max(starts[(topic, p)], marks[(topic, p)].high)
                     for _, p in marks}
    if reads is not None:
        reads[(cluster.bootstrap_servers, topic)] = known
    return [r for p in sorted(known.records) for r in known.records[p]]


def await_readable(cluster: ClusterConfig, ends: dict[tuple[str, int], int],
                   timeout: float) -> None:
    """Return once a ``read_committed`` reader sees a committed transaction's records up to
    ``ends`` (per topic and partition). The coordinator answers the commit once it has
    logged it and writes the markers that end the transaction in each partition
    afterwards: a read just after the commit could stop short of it (a reset's dropped
    plan was read back as pending)."""
    deadline = time.monotonic() + timeout
    while ends:
        marks = probe_watermarks(cluster, list(ends), timeout=timeout)
        ends = {tp: end for tp, end in ends.items() if marks[tp].high < end}
        if ends:
            if time.monotonic() > deadline:
                raise InternalTopicError(
                    f"cluster {cluster.alias!r}: the committed write to "
                    f"{', '.join(f'{t}[{p}]' for t, p in sorted(ends))} is not readable "
                    f"after {timeout:.0f}s")
            time.sleep(0.005)


def _fetch(cluster: ClusterConfig, topic: str, bounds: dict[tuple[str, int], tuple[int, int]],
           timeout: float) -> list[LogRecord]:
    """The records of ``topic``'s partitions from each one's start to its end (the
    ``read_committed`` end a probe saw), per partition in order."""
    from confluent_kafka import KafkaError, TopicPartition

    records: list[LogRecord] = []
    pending = {tp: end for tp, (_, end) in bounds.items()}
    if not pending:
        return records
    # The shortest fetch wait: the read ends at the partition's end, which it learns from an
    # empty fetch there (EOF) wherever transaction markers, never delivered, end the log, as
    # every fenced state write does; the broker holds that fetch for the whole wait
    # (librdkafka's default 500 ms). At 10 ms it was 11 to 16 ms of every read after a
    # commit, some 0.1 s of a run's state reads; at 1 ms, 1 to 3.
    consumer = clients.consumer(cluster, **{"group.id": "mirrorflow-internal",
                                            "enable.partition.eof": True,
                                            "isolation.level": "read_committed",
                                            "fetch.wait.max.ms": 1})
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in bounds.items()])
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise InternalTopicError(f"cluster {cluster.alias!r}: reading {topic} did not "
                                         f"reach its end within {timeout:.0f}s")
            for msg in clients.take(consumer, 0.05):
                tp = (msg.topic(), msg.partition())
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise InternalTopicError(
                        f"cluster {cluster.alias!r}: reading {topic}: {err.str()}")
                if err is None:
                    records.append(LogRecord(msg.partition(), msg.offset(), msg.key(),
                                             msg.value(), msg.timestamp()[1],
                                             tuple(msg.headers() or ())))
                # The last offsets may be transaction markers, which are never delivered:
                # the end is reached at EOF, or at the last offset the probe saw.
                if tp in pending and msg.offset() >= pending[tp] - (0 if err else 1):
                    del pending[tp]
                    consumer.incremental_unassign([TopicPartition(*tp)])
    finally:
        consumer.close()
    return records


# Every internal topic mirrorflow creates gets records every run: its own state topics
# (plans, spans, history; and the leases' log, which is time-bounded) and MM2's (the offset
# store, offset syncs, checkpoints, heartbeats), and each run's tasks are processes of their
# own that read a topic from its log start once. The log cleaner compacts (and retention
# deletes) only rolled segments, which Kafka rolls after 7 days (or 1 GiB) by default: until
# then each read fetched every record written there since (for a flow of 80 partitions on
# a 1-minute schedule, a position per partition a run in MM2's offset store: some 800,000
# records by the seventh day, read by several tasks of every run). Rolled every 10 minutes,
# a topic holds about its live keys plus 10 minutes of runs. (MM2 creates its topics
# compacted with the broker's default segments, and reads them once per worker's life.)
# Not the heartbeats topics: flows mirror them, and a source record the cleaner removes
# between a run's mirror and its proof fails that proof on every retry of the plan (the
# proof reads a range with transaction markers in it from the source again): see
# :attr:`CompactedTopic.rolls_segments`.
STATE_SEGMENT_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class CompactedTopic:
    """A compacted topic read as a map: the newest value of every key, tombstones removed.
    Created (where missing) with :data:`STATE_SEGMENT_MS` unless ``rolls_segments`` is off
    (a topic flows mirror: the heartbeats); a topic that exists keeps its own settings."""

    cluster: ClusterConfig
    topic: str
    partitions: int = 1
    replication_factor: int = 1
    rolls_segments: bool = True

    def ensure(self) -> None:
        """Create the topic (:meth:`new_topic`) unless it exists."""
        clients.ensure_topics(self.cluster, [self.new_topic()])

    def new_topic(self):
        """The topic as created where missing: compacted, with 10-minute segments where
        it rolls them."""
        from confluent_kafka.admin import NewTopic

        config = {"cleanup.policy": "compact"}
        if self.rolls_segments:
            config["segment.ms"] = str(STATE_SEGMENT_MS)
        return NewTopic(self.topic, num_partitions=self.partitions,
                        replication_factor=self.replication_factor, config=config)

    def read(self) -> dict[bytes, bytes]:
        """Every key's newest value. A missing topic reads as empty."""
        return {k: r.value for k, r in self.read_records().items()}

    def read_records(self) -> dict[bytes, LogRecord]:
        """Every key's newest record (headers included), tombstones removed."""
        latest: dict[bytes, LogRecord] = {}
        for record in read_log(self.cluster, self.topic):
            if record.key is None:
                log.warning("%s[%d]@%d has no key; skipped", self.topic, record.partition,
                            record.offset)
            else:
                latest[record.key] = record
        return {k: r for k, r in latest.items() if r.value is not None}

    def write(self, records: Records, timeout: float = 30.0, headers: Headers = None) -> None:
        """Write records (None value = tombstone), each with ``headers``, and wait until
        every one is acknowledged: through the held lease's fence when this context holds
        one (at the end of :func:`one_transaction`, within one)."""
        if not records:
            return
        # Created when written where missing (ensure; the stores leave it to this).
        held = _HELD.get()
        if held is not None:
            held.append((self, records, headers))
        else:
            _write([(self, records, headers)], timeout)

    def write_unfenced(self, records: Records, timeout: float = 30.0,
                       headers: Headers = None) -> None:
        """Write records outside any transaction (the lease's own records, and writes
        made without a lease), and wait until every one is acknowledged."""
        if not records:
            return
        errors: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(err.str())

        # In order and acknowledged by all replicas; not idempotent, so that the shared
        # producer survives a deleted and recreated internal topic (a compacted store
        # keeps the newest value of a key, which a retried duplicate does not change).
        producer = clients.producer(self.cluster, **{
            **STATE_PRODUCER, "acks": "all", "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1, "linger.ms": 0,
            "partitioner": "murmur2_random"})
        for key, value in records:
            producer.produce(self.topic, key=key, value=value, headers=headers,
                             on_delivery=on_delivery)
        remaining = producer.flush(timeout)
        if remaining or errors:
            raise InternalTopicError(
                f"cluster {self.cluster.alias!r}: writing {self.topic} failed: "
                f"{errors[0] if errors else f'{remaining} records unacknowledged'}")
