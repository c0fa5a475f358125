"""Writing one planned range to its remote partition, exactly once.

A writer runs in the Spark task that reads its range (:mod:`mirrorflow.spark.mirror`):
the records enter Python once, as Arrow batches, and leave through a librdkafka producer.

1. **Fence**: the producer's ``transactional.id`` is fixed per remote partition and flow,
   so ``init_transactions`` aborts a zombie's open transaction and stops it writing.
2. **Resume**: the remote partition's resume position (:mod:`mirrorflow.source.ledger`), read
   after fencing, says which upstream offset this plan's writing reached; records below
   it are already on the target and are skipped. Kafka deletes a member-less group's
   offsets ``offsets.retention.minutes`` (7 days) after their last commit, so a plan
   left pending longer has none: then the plan's span records (compacted, never expired,
   read by the driver: ``WriteTask.written_until``) say where its writing stopped.
3. **Write** the rest in source order (key, value, headers, timestamp: one at or before
   the epoch is written as the plan's time, see :func:`digests.restamp`), a transaction
   per ``chunk_records`` records or ``chunk_bytes`` bytes. Each transaction also carries
   its span records and the new resume position, so data and position commit together.

Records are produced straight from the Arrow batch. Normally only the first and last
record of each produced slice carry a delivery callback: a slice's remote offsets are
contiguous unless another producer's batch landed inside it (a second flow writing the
same remote partition, or anything else). When that happens the transaction is aborted
and written again with a callback on every record, and the writer stays that careful:
the span records then say exactly which remote offsets hold this flow's records.

A first upstream offset beyond where the range (or its resume position) starts means the
source lost records; the source's log start tells retention from compaction, and
retention either fails the write, naming the offsets (``failOnDataLoss = true``), or is
recorded as a gap of the range's result.

Where the target refuses transactions and ``exactly.once.support = requested``, the
writer falls back to an idempotent producer and commits spans and position after each
chunk: at-least-once (a crash between a chunk and its position writes the chunk again,
which the completeness check then reports as duplicates); ``required`` fails instead.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import DataLossError, MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.quality.digests import RangeDigest, restamp
from mirrorflow.quality.sync_check import shifted
from mirrorflow.source import ledger

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
TIMEOUT_S = 60.0
TRANSACTION_TIMEOUT_MS = 120_000
_PRODUCER_DEFAULTS = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 65_536,  # bounds what a write task holds in flight
    "message.max.bytes": 16_777_216,
    "compression.type": "lz4",
    "acks": "all",
}


class WriteError(MirrorflowError):
    """A range could not be written; the message names topic, partition and offset."""


@dataclass(frozen=True)
class WriteTask:
    """One planned range, as the Spark task that writes it sees it."""

    flow: str
    plan_id: str
    topic: str
    partition: int
    remote_topic: str
    start: int
    end: int
    max_message_bytes: int | None = None
    fail_on_data_loss: bool = True
    exactly_once: str = "requested"
    chunk_records: int = 100_000
    written_until: int = 0  # the plan's spans: the next upstream offset earlier attempts left
    restamp_ms: int = 0  # the plan's time: what a timestamp at or before the epoch becomes

    @property
    def source_alias(self) -> str:
        return self.flow.split("->", 1)[0]


@dataclass
class TimestampStats:
    """Record timestamps (ms) of records not yet measured: count, min, max, sum."""

    count: int = 0
    min: float = float("inf")
    max: float = float("-inf")
    total: float = 0.0

    def add_column(self, column) -> None:
        """Fold an Arrow timestamp column in (nulls skipped)."""
        import pyarrow.compute as pc

        micros = column.cast("int64")
        n = len(micros) - micros.null_count
        if not n:
            return
        bounds = pc.min_max(micros).as_py()
        self.count += n
        self.min = min(self.min, bounds["min"] / 1000)
        self.max = max(self.max, bounds["max"] / 1000)
        self.total += pc.sum(micros).as_py() / 1000

    def merged(self, other: TimestampStats) -> TimestampStats:
        return TimestampStats(self.count + other.count, min(self.min, other.min),
                              max(self.max, other.max), self.total + other.total)


@dataclass
class AgeStats:
    """min, max and sum of (a moment - record timestamp) in ms, folded batch by batch from
    each batch's timestamp min, max and sum (no per-record Python work)."""

    count: int = 0
    min: float | None = None
    max: float | None = None
    total: float = 0.0

    def add(self, at_ms: float, ts: TimestampStats) -> None:
        if not ts.count:
            return
        young, old = at_ms - ts.max, at_ms - ts.min
        self.min = young if self.min is None else min(self.min, young)
        self.max = old if self.max is None else max(self.max, old)
        self.total += ts.count * at_ms - ts.total
        self.count += ts.count

    def summary(self) -> dict[str, float] | None:
        if not self.count:
            return None
        return {"min": round(self.min, 1), "max": round(self.max, 1),
                "avg": round(self.total / self.count, 1)}


@dataclass
class RangeResult:
    """What one attempt's writer did for one range (the ledger holds what every attempt
    wrote; this holds this attempt's figures and findings)."""

    topic: str
    partition: int
    remote_topic: str
    start: int
    end: int
    resumed_from: int = 0
    records_written: int = 0
    bytes_written: int = 0
    first_downstream: int | None = None
    last_downstream: int | None = None
    transactional: bool = False
    at_least_once: str | None = None  # why this range was written without transactions
    restamped: int = 0  # records whose timestamp (<= 0) was written as the plan's time
    gaps: list[tuple[int, int]] = field(default_factory=list)
    record_age_ms: dict[str, float] | None = None
    replication_latency_ms: dict[str, float] | None = None
    write_seconds: float = 0.0
    # The span records this attempt committed (their JSON): the driver need not wait for
    # the transaction markers to reach the spans topic before it reads it.
    spans: list[str] = field(default_factory=list)
    # The proof's source-side aggregates, when this attempt wrote the whole range from
    # contiguous offsets (digests.RangeDigest.summary).
    source_digest: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def transactional_id(flow_name: str, remote_topic: str, partition: int) -> str:
    """Fixed per flow and remote partition: a new writer fences every earlier one."""
    return f"mirrorflow|{flow_name}|{remote_topic}|{partition}"


class PartitionWriter:
    """Writes one range (see the module's note). Use: open(), write_batch()..., close()."""

    def __init__(self, task: WriteTask, target: ClusterConfig, source: ClusterConfig,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.task = task
        self.target = target
        self.source = source
        self.chunk_records = task.chunk_records
        self.chunk_bytes = chunk_bytes
        self.result = RangeResult(task.topic, task.partition, task.remote_topic, task.start,
                                  task.end)
        self.careful = False  # a callback per record, once another producer interleaved
        self._producer = None
        self._group = None
        self._next = task.start  # the next upstream offset to write
        self._start_checked = False
        self._txn: list[_Slice] = []  # this transaction's slices, in order
        self._txn_records = 0
        self._txn_bytes = 0
        self._spans_topic = ledger.spans_topic(task.source_alias)
        # Metrics: a record's age when the writer gets it, and when its write is committed.
        self._age = AgeStats()
        self._latency = AgeStats()
        self._uncommitted = TimestampStats()
        self._opened = 0.0
        self._fatal = None  # librdkafka's fatal error (a newer writer fenced this one)
        self._digest = RangeDigest(task.start)

    @property
    def where(self) -> str:
        return (f"{self.task.topic}[{self.task.partition}] -> "
                f"{self.task.remote_topic}[{self.task.partition}]")

    # -- lifecycle
    def open(self) -> None:
        """Fence earlier writers, then find where this plan's writing stopped."""
        from confluent_kafka import KafkaException, Producer

        self._opened = time.monotonic()
        settings = {**_PRODUCER_DEFAULTS,
                    **clients.client_config(self.target, "producer"), "enable.idempotence": True}
        if self.task.max_message_bytes:
            # The remote topic's limit on a record batch is the producer's on a message set.
            settings["message.max.bytes"] = min(int(settings["message.max.bytes"]),
                                                self.task.max_message_bytes)
        txn_id = transactional_id(self.task.flow, self.task.remote_topic, self.task.partition)
        where = f"cluster {self.target.alias!r}, writing {self.task.remote_topic}" \
                f"[{self.task.partition}]"
        producer = clients.new_client(Producer, {
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, **settings,
            "transactional.id": txn_id, "error_cb": self._on_error}, where)
        try:
            producer.init_transactions(TIMEOUT_S)
            self.result.transactional = True
        except KafkaException as exc:
            if not clients.refuses_transactions(exc.args[0]):
                raise WriteError(f"{where}: cannot start transactions: "
                                 f"{exc.args[0].str()}") from None
            if self.task.exactly_once == "required":
                raise WriteError(
                    f"exactly.once.support = required, but cluster {self.target.alias!r} "
                    f"refuses transactions for {self.task.remote_topic}[{self.task.partition}]"
                    f": {exc.args[0].str()}") from None
            log.warning("transactions unavailable for %s (%s); writing at-least-once with an "
                        "idempotent producer", where, exc.args[0].str())
            self.result.at_least_once = (f"cluster {self.target.alias!r} refuses "
                                         f"transactions: {exc.args[0].str()}")
            producer = clients.new_client(Producer, settings, where)
        self._producer = producer
        consumer = ledger.progress_consumer(self.target, self.task.source_alias)
        try:
            self._group = consumer.consumer_group_metadata()
            remote = (self.task.remote_topic, self.task.partition)
            resume = ledger.committed_resume(consumer, self.target, [remote]).get(remote)
        finally:
            consumer.close()
        self._next = max(self.task.written_until, self.task.start)
        if resume is not None and resume.plan_id == self.task.plan_id:
            self._next = max(resume.next_upstream, self._next)
        self.result.resumed_from = self._next
        if self._next > self.task.start:
            log.info("%s: resuming at upstream offset %d (earlier attempts wrote %d..%d)",
                     self.where, self._next, self.task.start, self._next - 1)
        self._begin()

    @property
    def complete(self) -> bool:
        """Every offset of the range is written (or was, by an earlier attempt)."""
        return self._next >= self.task.end

    def write_batch(self, batch) -> None:
        """Write the records of one Arrow batch (Spark's Kafka source schema) that are at
        or past the resume position, in order."""
        import numpy as np

        offsets = batch.column("offset").to_numpy()
        first = int(np.searchsorted(offsets, self._next))
        if first == batch.num_rows:
            return
        batch, restamped = restamp(batch.slice(first), self.task.restamp_ms)
        self.result.restamped += restamped
        if not self._start_checked:
            self._check_start(int(batch.column("offset")[0].as_py()))
        received = TimestampStats()
        received.add_column(batch.column("timestamp"))
        self._age.add(time.time() * 1000, received)
        self._uncommitted = self._uncommitted.merged(received)
        done = 0
        while done < batch.num_rows:
            room = max(1, self.chunk_records - self._txn_records)
            piece = batch.slice(done, room)
            self._produce(piece)
            done += piece.num_rows
            if self._txn_records >= self.chunk_records or self._txn_bytes >= self.chunk_bytes:
                self._commit()
                self._begin()
        self._next = int(offsets[-1]) + 1
        self._producer.poll(0)

    def close(self) -> RangeResult:
        """Commit what is left and return this attempt's figures."""
        self._commit()
        self.result.record_age_ms = self._age.summary()
        self.result.replication_latency_ms = self._latency.summary()
        self.result.write_seconds = round(time.monotonic() - self._opened, 3)
        self.result.source_digest = self._digest.summary(self.task.end)
        return self.result

    def abort(self) -> None:
        """Best effort after a failure: abort the open transaction."""
        if self._producer is not None and self.result.transactional:
            try:
                self._producer.abort_transaction(10)
            except Exception as exc:  # the failure that brought us here matters more
                log.warning("abort of %s failed: %s", self.where, exc)

    # -- the source's start
    def _check_start(self, first_offset: int) -> None:
        """A first record beyond the expected offset: retention, or compaction?"""
        self._start_checked = True
        if first_offset <= self._next:
            return
        from mirrorflow.kafka.watermarks import probe_watermarks

        log_start = probe_watermarks(self.source, [(self.task.topic, self.task.partition)],
                                     self.source.isolation_level())[
            (self.task.topic, self.task.partition)].low
        if log_start <= self._next:
            return  # compacted away, or transaction markers: nothing was lost
        gap = (self._next, min(log_start, first_offset))
        if self.task.fail_on_data_loss:
            raise DataLossError(
                f"source {self.task.topic}[{self.task.partition}]: offsets {gap[0]}.."
                f"{gap[1] - 1} of the planned range {self.task.start}..{self.task.end - 1} "
                f"were removed by retention before they were mirrored; nothing after them "
                f"was written. Set {self.task.flow}.failOnDataLoss = false to skip them")
        log.warning("data loss on %s: offsets %d..%d skipped", self.where, gap[0], gap[1] - 1)
        self.result.gaps.append(gap)

    # -- producing
    def _produce(self, batch, careful: bool | None = None) -> None:
        """Produce one slice inside the open transaction and keep it for the spans."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from confluent_kafka import KafkaError, KafkaException

        careful = self.careful if careful is None else careful
        n = batch.num_rows
        upstream = batch.column("offset").to_numpy()
        piece = _Slice(batch, upstream, careful, _payload_bytes(batch))
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        stamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
        headers = _header_lists(batch.column("headers"))
        every = careful or not self.result.transactional
        produce, poll = self._producer.produce, self._producer.poll
        topic, partition, last = self.task.remote_topic, self.task.partition, n - 1
        for i in range(n):
            callback = (functools.partial(piece.delivered, i)
                        if every or i == 0 or i == last else None)
            while True:
                try:
                    # Positional (topic, value, key, partition, on_delivery, its alias
                    # callback, timestamp, headers): parsing keywords cost 0.5 µs a record.
                    produce(topic, values[i], keys[i], partition, callback, None, stamps[i],
                            headers[i] if headers else None)
                    break
                except BufferError:
                    poll(0.05)
                except KafkaException as exc:
                    if exc.args[0].code() == KafkaError._FATAL:  # e.g. fenced: the
                        self._txn.append(piece)  # transaction failed; learn why
                        self._serve_fatal()
                        raise self._transaction_failed(exc.args[0]) from None
                    raise WriteError(f"cannot write {self.task.topic}[{partition}] offset "
                                     f"{upstream[i]} to {topic}: {exc.args[0].str()}"
                                     f"{self._size_hint(exc.args[0])}") from None
        self._txn.append(piece)
        self._txn_records += n
        self._txn_bytes += piece.bytes

    def _size_hint(self, error) -> str:
        from confluent_kafka import KafkaError

        if error.code() != KafkaError.MSG_SIZE_TOO_LARGE:
            return ""
        limit = self.task.max_message_bytes
        return (f" (the record is larger than {self.task.remote_topic}'s max.message.bytes = "
                f"{limit} on the target; raise it there, then rerun)" if limit else
                " (raise the target producer's message.max.bytes, then rerun)")

    # -- transactions
    def _begin(self) -> None:
        if self.result.transactional:
            self._producer.begin_transaction()
        self._txn, self._txn_records, self._txn_bytes = [], 0, 0

    def _commit(self) -> None:
        """Wait for the transaction's records, then write its spans and the resume
        position into it and commit: data, spans and position land together."""
        from confluent_kafka import KafkaException, TopicPartition

        if not self._txn:
            if self.result.transactional:
                self._producer.abort_transaction(TIMEOUT_S)
            return
        spans = self._settle()
        if spans is None:  # another producer interleaved: write this transaction again
            self._redo_carefully()
            spans = self._settle()
            if spans is None:
                raise WriteError(f"{self.where}: remote offsets of one record are not "
                                 "contiguous with themselves")  # never with a callback each
        upstream_next = int(self._txn[-1].upstream[-1]) + 1
        for span in spans:
            self._producer.produce(self._spans_topic, span.value(), span.key())
        position = TopicPartition(self.task.remote_topic, self.task.partition, upstream_next,
                                  metadata=self.task.plan_id)
        try:
            if self.result.transactional:
                self._producer.send_offsets_to_transaction([position], self._group, TIMEOUT_S)
                self._producer.commit_transaction(TIMEOUT_S)
            else:
                self._flush()
                self._commit_position_without_transaction(position)
        except KafkaException as exc:
            raise self._transaction_failed(exc.args[0]) from None
        # The proof's digests place each record where its span's syncs say, so a wrong
        # sync fails the proof instead of sending a consumer astray after failover.
        syncs = [pair for span in spans for pair in span.syncs]
        for piece in self._txn:
            self._digest.add(piece.upstream, shifted(syncs, piece.upstream), piece.batch)
        for span in spans:
            self.result.spans.append(span.value().decode())
            self.result.records_written += span.records
            if self.result.first_downstream is None:
                self.result.first_downstream = span.downstream_first
            self.result.last_downstream = span.downstream_last
        self.result.bytes_written += sum(p.bytes for p in self._txn)
        # Records of a batch that straddles a commit count at the next one: an upper bound.
        self._latency.add(time.time() * 1000, self._uncommitted)
        self._uncommitted = TimestampStats()
        self._txn = []

    def _on_error(self, error) -> None:
        """librdkafka's error callback: keep a fatal error, which later calls only report
        as "Local: Fatal error"."""
        if error.fatal():
            self._fatal = error

    def _serve_fatal(self) -> None:
        """Serve the callbacks that name a fatal error; confluent-kafka raises that error
        from poll() as well."""
        from confluent_kafka import KafkaException

        try:
            self._producer.poll(0)
        except KafkaException as exc:
            self._fatal = self._fatal or exc.args[0]

    def _transaction_failed(self, error) -> WriteError:
        """The open transaction failed: name its upstream offsets and the cause (the fatal
        error behind a generic one, e.g. the fencing by a newer writer)."""
        cause = self._fatal if self._fatal is not None else error
        return WriteError(
            f"writing {self.where}: the transaction of upstream offsets "
            f"{self._txn[0].upstream[0]}..{self._txn[-1].upstream[-1]} failed: "
            f"{cause.str()}")

    def _flush(self) -> None:
        from confluent_kafka import KafkaException

        try:
            remaining = self._producer.flush(TIMEOUT_S)
        except SystemError:
            # confluent-kafka raises this from flush() when the producer has hit a fatal
            # error (fenced by a newer writer); the transaction's own call names the error.
            try:
                self._producer.commit_transaction(1)
            except KafkaException as exc:
                raise self._transaction_failed(exc.args[0]) from None
            raise
        if remaining:
            raise WriteError(f"writing {self.where}: {remaining} records unacknowledged after "
                             f"{TIMEOUT_S:.0f}s")
        for piece in self._txn:
            if piece.error is not None:
                raise WriteError(f"writing {self.where}: {piece.error}")

    def _settle(self) -> list[ledger.Span] | None:
        """The transaction's spans (runs of contiguous remote offsets), or None when a
        slice written with callbacks at its ends only was interleaved."""
        import numpy as np

        self._flush()
        runs: list[tuple[Any, Any]] = []  # (upstream offsets, downstream offsets)
        for piece in self._txn:
            downstream = piece.downstream()
            if downstream is None:
                return None
            breaks = np.flatnonzero(np.diff(downstream) != 1) + 1
            for up, down in zip(np.split(piece.upstream, breaks), np.split(downstream, breaks),
                                strict=True):
                if runs and runs[-1][1][-1] + 1 == down[0]:
                    runs[-1] = (np.concatenate((runs[-1][0], up)),
                                np.concatenate((runs[-1][1], down)))
                else:
                    runs.append((up, down))
        return [self._span(up, down) for up, down in runs]

    def _span(self, upstream, downstream) -> ledger.Span:
        import numpy as np

        delta = downstream - upstream
        changes = np.concatenate(([0], np.flatnonzero(np.diff(delta)) + 1))
        return ledger.Span(self.task.plan_id, self.task.topic, self.task.partition,
                           self.task.remote_topic, int(upstream[0]), int(upstream[-1]),
                           int(downstream[0]), int(downstream[-1]), len(upstream),
                           tuple((int(upstream[i]), int(downstream[i])) for i in changes))

    def _redo_carefully(self) -> None:
        """Abort the transaction and write its slices again, a callback per record."""
        log.warning("%s: another producer writes to this remote partition; writing with a "
                    "delivery callback per record from now on", self.where)
        self.careful = True
        pieces = self._txn
        self._producer.abort_transaction(TIMEOUT_S)
        self._begin()
        for piece in pieces:
            self._produce(piece.batch, careful=True)

    def _commit_position_without_transaction(self, position) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions

        group = ledger.progress_group(self.task.source_alias)
        admin = clients.admin_client(self.target)
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [position])],
                                           request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)


@dataclass
class _Slice:
    """Records produced inside one transaction, waiting for their remote offsets: the
    first and last (or, careful, every) record carry a delivery callback."""

    batch: Any
    upstream: Any  # numpy int64 array of the records' source offsets
    careful: bool
    bytes: int
    offsets: dict[int, int] = field(default_factory=dict)
    error: str | None = None

    def delivered(self, index: int, err, msg) -> None:
        if err is not None:
            self.error = self.error or f"offset {self.upstream[index]}: {err.str()}"
        else:
            self.offsets[index] = msg.offset()

    def downstream(self):
        """Every record's remote offset, or None when the ends alone cannot tell them."""
        import numpy as np

        n = len(self.upstream)
        if self.careful or len(self.offsets) == n:
            return np.array([self.offsets[i] for i in range(n)], dtype=np.int64)
        first, last = self.offsets[0], self.offsets[n - 1]
        if last - first != n - 1:
            return None
        return np.arange(first, last + 1, dtype=np.int64)


def _payload_bytes(batch) -> int:
    """Key and value bytes of a batch (what MM2's byte-count metric counts)."""
    import pyarrow.compute as pc

    return sum(pc.sum(pc.binary_length(batch.column(c))).as_py() or 0 for c in ("key", "value"))


def _header_lists(column) -> list | None:
    """Per record ``[(key, value), ...]`` or None, from the JSON of
    :func:`mirrorflow.spark.kafka_source.for_writer`; None for the whole batch when no
    record has headers (the common case costs no per-record work)."""
    import base64
    import json

    if column.null_count == len(column):
        return None
    return [[(h["key"], base64.b64decode(h["value"]) if "value" in h else None)
             for h in json.loads(text)] if text else None for text in column.to_pylist()]
