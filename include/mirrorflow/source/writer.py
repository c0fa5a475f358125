"""Writing the planned ranges of one write slot to their remote partitions, exactly once.

A plan deals its ranges out to ``mirrorflow.write.tasks`` slots (``Range.slot``, the same
in every attempt of the plan). One Spark task reads a slot's ranges one after another
(:mod:`mirrorflow.spark.mirror`): the records enter Python once, as Arrow batches, and
leave through one librdkafka producer, whose transactions span all of the slot's ranges.
So a run's cost follows its records and slots, not its partitions: a thousand partitions
with a trickle each cost a few transactions, not a thousand.

1. **Fence**: the producer's ``transactional.id`` is fixed per flow and slot
   (``mirrorflow|<flow>|write-<slot>``), so ``init_transactions`` aborts the open
   transaction of any earlier writer of the same ranges (a zombie of an earlier attempt
   of the plan) and stops it writing. A zombie of an earlier plan had its ranges' slot
   fenced by the attempt that completed that plan, before it could commit.
2. **Resume**: each remote partition's resume position (:mod:`mirrorflow.source.ledger`),
   read for all of the slot's ranges in one request after fencing, says which upstream
   offset this plan's writing reached; records below it are already on the target and
   are skipped. Kafka deletes a member-less group's
   offsets ``offsets.retention.minutes`` (7 days) after their last commit, so a plan
   left pending longer has none: then the plan's span records (compacted, never expired,
   read by the driver: ``WriteTask.written_until``) say where its writing stopped.
3. **Write** the rest in source order (key, value, headers, timestamp: one at or before
   the epoch is written as the plan's time, see :func:`digests.restamp`), a transaction
   per ``chunk_records`` records or ``chunk_bytes`` bytes, whichever ranges they belong
   to. Each transaction also carries the span records and the new resume position of
   every range it wrote to, so data and positions commit together.

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
writer falls back to an idempotent producer and commits spans and positions after each
chunk: at-least-once (a crash between a chunk and its position writes the chunk again,
which the completeness check then reports as duplicates); ``required`` fails instead.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import DataLossError, MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.plain import plain
from mirrorflow.quality.digests import RangeDigest, restamp
from mirrorflow.quality.sync_check import shifted
from mirrorflow.source import ledger
from mirrorflow.source.plan_store import plans_topic
from mirrorflow.source.write_stats import AgeStats, TimestampStats

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
TIMEOUT_S = 60.0
TRANSACTION_TIMEOUT_MS = 120_000
TRANSACTION_ATTEMPTS = 3
_PRODUCER_DEFAULTS = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 65_536,  # bounds what a write task holds in flight
    "message.max.bytes": 16_777_216,
    "compression.type": "lz4",
    "acks": "all",
}


class _Abortable(Exception):
    """The open transaction must be aborted for a cause that may pass (a record timed
    out, a broker went away): it is written again, up to ``TRANSACTION_ATTEMPTS`` times."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
    slot: int = 0  # the plan's write slot for the range (Range.slot)

    @property
    def source_alias(self) -> str:
        return self.flow.split("->", 1)[0]


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
    write_seconds: float = 0.0  # its write slot's writer was open (its ranges are written together)
    # The span records this attempt committed (their JSON): the driver need not wait for
    # the transaction markers to reach the spans topic before it reads it.
    spans: list[str] = field(default_factory=list)
    # The proof's source-side aggregates, when this attempt wrote the whole range from
    # contiguous offsets (digests.RangeDigest.summary).
    source_digest: dict | None = None
    # (record part, source schema id) of the records it wrote, under a schema transfer.
    schema_ids: list[tuple[str, int]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return plain(self)


def transactional_id(flow_name: str, slot: int) -> str:
    """Fixed per flow and write slot: a plan deals each range to the same slot in every
    attempt, so a new writer of a range fences every earlier one."""
    return f"mirrorflow|{flow_name}|write-{slot}"


class _Range:
    """One range's state inside a :class:`SlotWriter`."""

    def __init__(self, task: WriteTask) -> None:
        self.task = task
        self.result = RangeResult(task.topic, task.partition, task.remote_topic, task.start,
                                  task.end)
        self.next = task.start  # the next upstream offset to write
        self.start_checked = False
        self.seen = False  # records of it reached the writer
        self.txn: list[_Slice] = []  # its slices in the open transaction, in order
        # Metrics: a record's age when the writer gets it, and when its write is committed.
        self.age = AgeStats()
        self.latency = AgeStats()
        self.uncommitted = TimestampStats()
        self.digest = RangeDigest(task.start)
        self.schema_ids: set[tuple[str, int]] = set()

    @property
    def where(self) -> str:
        return (f"{self.task.topic}[{self.task.partition}] -> "
                f"{self.task.remote_topic}[{self.task.partition}]")


class SlotWriter:
    """Writes the ranges of one write slot (see the module's note) with one producer.
    Use: open(), write_batch()..., close()."""

    def __init__(self, tasks: list[WriteTask], target: ClusterConfig, source: ClusterConfig,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, mapper: Any = None,
                 drop_headers: bool = False):
        if not tasks or len({(t.flow, t.slot) for t in tasks}) != 1:
            raise MirrorflowError("a slot writer takes the ranges of one flow's one slot")
        self.tasks = tasks
        self.target = target
        self.source = source
        self.chunk_records = tasks[0].chunk_records
        self.chunk_bytes = chunk_bytes
        self.ranges = {(t.topic, t.partition): _Range(t) for t in tasks}
        self.transactional = False
        self.at_least_once: str | None = None  # why the slot writes without transactions
        self.careful = False  # a callback per record, once another producer interleaved
        self._producer = None
        self._group = None
        self._txn_records = 0
        self._txn_bytes = 0
        self._spans_topic = ledger.spans_topic(tasks[0].source_alias)
        self._plans_topic = plans_topic(tasks[0].source_alias)
        self._opened = 0.0
        self._fatal = None  # librdkafka's fatal error (a newer writer fenced this one)
        self._pending: list[tuple[_Range, list[Any]]] | None = None  # slices to write again
        self._aborts = 0  # of the open transaction, for a passing cause
        self._delivery_timeout_s = TIMEOUT_S
        # The schema registry transfer (schema.transfer.IdMapper), and whether it drops
        # headers (include.message.headers = false).
        self.mapper, self.drop_headers = mapper, drop_headers

    @property
    def where(self) -> str:
        first = next(iter(self.ranges.values())).where
        more = len(self.ranges) - 1
        return first + (f" (and {more} more ranges of write slot {self.tasks[0].slot})"
                        if more else "")

    # -- lifecycle
    def open(self) -> None:
        """Fence earlier writers of the slot, then find where the plan's writing of each
        range stopped (one request for all of them)."""
        from confluent_kafka import KafkaException, Producer

        self._opened = time.monotonic()
        task = self.tasks[0]
        settings = {**_PRODUCER_DEFAULTS,
                    **clients.client_config(self.target, "producer"), "enable.idempotence": True}
        limits = [t.max_message_bytes for t in self.tasks if t.max_message_bytes]
        if limits:
            # The remote topics' limit on a record batch is the producer's on a message set.
            settings["message.max.bytes"] = min(int(settings["message.max.bytes"]), *limits)
        txn_id = transactional_id(task.flow, task.slot)
        self._delivery_timeout_s = min(TIMEOUT_S, int(settings.get(
            "delivery.timeout.ms", TIMEOUT_S * 1000)) / 1000)
        where = f"cluster {self.target.alias!r}, writing {self.where}"
        producer = clients.new_client(Producer, {
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, **settings,
            "transactional.id": txn_id, "error_cb": self._on_error}, where)
        try:
            producer.init_transactions(TIMEOUT_S)
            self.transactional = True
        except KafkaException as exc:
            if not clients.refuses_transactions(exc.args[0]):
                raise WriteError(f"{where}: cannot start transactions: "
                                 f"{exc.args[0].str()}") from None
            if task.exactly_once == "required":
                raise WriteError(
                    f"exactly.once.support = required, but cluster {self.target.alias!r} "
                    f"refuses transactions ({txn_id}) for {self.where}: "
                    f"{exc.args[0].str()}") from None
            log.warning("transactions unavailable for %s (%s); writing at-least-once with an "
                        "idempotent producer", where, exc.args[0].str())
            self.at_least_once = (f"cluster {self.target.alias!r} refuses "
                                  f"transactions: {exc.args[0].str()}")
            producer = clients.new_client(Producer, settings, where)
        self._producer = producer
        consumer = ledger.progress_consumer(self.target, task.source_alias)
        try:
            self._group = consumer.consumer_group_metadata()
            resume = ledger.committed_resume(
                consumer, self.target, [(t.remote_topic, t.partition) for t in self.tasks])
        finally:
            consumer.close()
        for state in self.ranges.values():
            t = state.task
            state.next = max(t.written_until, t.start)
            position = resume.get((t.remote_topic, t.partition))
            if position is not None and position.plan_id == t.plan_id:
                state.next = max(position.next_upstream, state.next)
            state.result.resumed_from = state.next
            state.result.transactional = self.transactional
            state.result.at_least_once = self.at_least_once
            if state.next > t.start:
                log.info("%s: resuming at upstream offset %d (earlier attempts wrote %d..%d)",
                         state.where, state.next, t.start, state.next - 1)
        self._begin()

    def write_batch(self, batch) -> None:
        """Write the records of one Arrow batch (Spark's Kafka source schema; the ranges of
        the slot one after another) that are at or past each range's resume position."""
        import numpy as np
        import pyarrow.compute as pc

        partitions = batch.column("partition").to_numpy()
        topics = batch.column("topic")
        cuts = np.flatnonzero(np.diff(partitions)) + 1
        if len(pc.unique(topics)) > 1:
            same = pc.equal(topics.slice(1), topics.slice(0, len(topics) - 1))
            cuts = np.union1d(cuts, np.flatnonzero(~same.to_numpy(zero_copy_only=False)) + 1)
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), batch.num_rows], strict=True):
            run = batch.slice(lo, hi - lo)
            tp = (topics[lo].as_py(), int(partitions[lo]))
            state = self.ranges.get(tp)
            if state is None:
                raise MirrorflowError(f"write slot {self.tasks[0].slot} got records of "
                                      f"{tp[0]}[{tp[1]}], which the plan dealt elsewhere")
            self._write_range(state, run)
        self._producer.poll(0)

    def close(self) -> list[RangeResult]:
        """Commit what is left and return this attempt's figures of each range it got
        records of."""
        self._commit()
        seconds = round(time.monotonic() - self._opened, 3)
        out = []
        for state in self.ranges.values():
            if not state.seen:
                continue
            state.result.record_age_ms = state.age.summary()
            state.result.replication_latency_ms = state.latency.summary()
            state.result.write_seconds = seconds
            state.result.source_digest = state.digest.summary(state.task.end)
            state.result.schema_ids = sorted(state.schema_ids)
            out.append(state.result)
        return out

    def abort(self) -> None:
        """Best effort after a failure: abort the open transaction."""
        if self._producer is not None and self.transactional:
            try:
                self._producer.abort_transaction(10)
            except Exception as exc:  # the failure that brought us here matters more
                log.warning("abort of %s failed: %s", self.where, exc)

    def release(self) -> None:
        """Purge what a failed attempt left queued and drop the producer: the Spark worker
        process outlives the task, and a producer left to the garbage collector goes on
        sending until it is collected. (``Producer.close`` would first abort the open
        transaction with no time limit: it hangs while the target is down.)"""
        if self._producer is not None:
            self._producer.purge()
            self._producer = None

    # -- one range's records
    def _write_range(self, state: _Range, batch) -> None:
        import numpy as np

        state.seen = True
        offsets = batch.column("offset").to_numpy()
        first = int(np.searchsorted(offsets, state.next))
        if first == batch.num_rows:
            return
        batch, restamped = restamp(batch.slice(first), state.task.restamp_ms)
        state.result.restamped += restamped
        if self.mapper is not None:
            batch, used = self.mapper.apply(batch, state.task.topic, state.task.remote_topic)
            state.schema_ids |= used
        if not state.start_checked:
            self._check_start(state, int(batch.column("offset")[0].as_py()))
        received = TimestampStats()
        received.add_column(batch.column("timestamp"))
        state.age.add(time.time() * 1000, received)
        state.uncommitted = state.uncommitted.merged(received)
        done = 0
        while done < batch.num_rows:
            room = max(1, self.chunk_records - self._txn_records)
            piece = batch.slice(done, room)
            try:
                self._produce(state, piece)
            except _Abortable as exc:  # the piece is in the transaction written again
                self._write_again(exc.reason)
            done += piece.num_rows
            if self._txn_records >= self.chunk_records or self._txn_bytes >= self.chunk_bytes:
                self._commit()
                self._begin()
        state.next = int(offsets[-1]) + 1

    def _check_start(self, state: _Range, first_offset: int) -> None:
        """A first record beyond the expected offset: retention, or compaction?"""
        state.start_checked = True
        if first_offset <= state.next:
            return
        from mirrorflow.kafka.watermarks import probe_watermarks

        task = state.task
        log_start = probe_watermarks(self.source, [(task.topic, task.partition)],
                                     self.source.isolation_level())[
            (task.topic, task.partition)].low
        if log_start <= state.next:
            return  # compacted away, or transaction markers: nothing was lost
        gap = (state.next, min(log_start, first_offset))
        if task.fail_on_data_loss:
            raise DataLossError(
                f"source {task.topic}[{task.partition}]: offsets {gap[0]}.."
                f"{gap[1] - 1} of the planned range {task.start}..{task.end - 1} "
                f"were removed by retention before they were mirrored; nothing after them "
                f"was written. Set {task.flow}.failOnDataLoss = false to skip them")
        log.warning("data loss on %s: offsets %d..%d skipped", state.where, gap[0], gap[1] - 1)
        state.result.gaps.append(gap)

    # -- producing
    def _produce(self, state: _Range, batch) -> None:
        """Produce one slice of a range inside the open transaction and keep it for the
        spans."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from confluent_kafka import KafkaError, KafkaException

        careful = self.careful
        n = batch.num_rows
        upstream = batch.column("offset").to_numpy()
        piece = _Slice(batch, upstream, careful, _payload_bytes(batch))
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        stamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
        headers = None if self.drop_headers else _header_lists(batch.column("headers"))
        every = careful or not self.transactional
        produce, poll = self._producer.produce, self._producer.poll
        topic, partition, last = state.task.remote_topic, state.task.partition, n - 1
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
                    # The slice is part of the failed transaction: named, or written again
                    # whole.
                    state.txn.append(piece)
                    if exc.args[0].code() == KafkaError._FATAL:  # e.g. fenced: learn why
                        self._serve_fatal()
                        raise self._transaction_failed(exc.args[0].str()) from None
                    abortable = self._abortable(exc.args[0])
                    if abortable is not None:
                        raise abortable from None
                    raise WriteError(f"cannot write {state.task.topic}[{partition}] offset "
                                     f"{upstream[i]} to {topic}: {exc.args[0].str()}"
                                     f"{self._size_hint(state, exc.args[0])}") from None
        state.txn.append(piece)
        self._txn_records += n
        self._txn_bytes += piece.bytes

    @staticmethod
    def _size_hint(state: _Range, error) -> str:
        from confluent_kafka import KafkaError

        if error.code() != KafkaError.MSG_SIZE_TOO_LARGE:
            return ""
        limit, remote = state.task.max_message_bytes, state.task.remote_topic
        return (f" (the record is larger than {remote}'s max.message.bytes = "
                f"{limit} on the target; raise it there, then rerun)" if limit else
                " (raise the target producer's message.max.bytes, then rerun)")

    # -- transactions
    def _open_ranges(self) -> list[_Range]:
        return [state for state in self.ranges.values() if state.txn]

    def _begin(self) -> None:
        if self.transactional:
            self._producer.begin_transaction()
        for state in self.ranges.values():
            state.txn = []
        self._txn_records, self._txn_bytes = 0, 0

    def _commit(self) -> None:
        """Wait for the transaction's records, then write the spans and resume position of
        every range in it into it and commit: data, spans and positions land together."""
        touched = self._open_ranges()
        if not touched:
            if self.transactional:
                self._producer.abort_transaction(TIMEOUT_S)
            return
        while True:
            try:
                spans = self._commit_once(touched)
                break
            except _Abortable as exc:
                self._write_again(exc.reason)
        self._aborts = 0
        if self.mapper is not None:
            self.mapper.committed()
        self._committed(touched, spans)

    def _commit_once(self, touched: list[_Range]) -> dict[int, list[ledger.Span]]:
        """One attempt at committing the open transaction; its spans per range."""
        from confluent_kafka import KafkaException, TopicPartition

        spans = self._settle(touched)
        if spans is None:  # another producer interleaved: write this transaction again
            log.warning("%s: another producer writes to a remote partition of this slot; "
                        "writing with a delivery callback per record from now on",
                        self.where)
            self.careful = True
            self._rewrite()
            spans = self._settle(touched)
            if spans is None:
                raise WriteError(f"{self.where}: remote offsets of one record are not "
                                 "contiguous with themselves")  # never with a callback each
        failed = self._produce_state(
            [(self._spans_topic, span.value(), span.key())
             for state in touched for span in spans[id(state)]]
            + [(self._plans_topic, m.value(), m.key())
               for m in (self.mapper.uncommitted if self.mapper else [])])
        positions = [TopicPartition(state.task.remote_topic, state.task.partition,
                                    int(state.txn[-1].upstream[-1]) + 1,
                                    metadata=state.task.plan_id) for state in touched]
        try:
            if self.transactional:
                self._producer.send_offsets_to_transaction(positions, self._group, TIMEOUT_S)
                self._producer.commit_transaction(TIMEOUT_S)
            else:
                self._flush(touched)
                self._commit_positions_without_transaction(positions)
        except KafkaException as exc:
            error = exc.args[0]
            lasting = [e for e in failed if not _passing(e)]
            if lasting:
                raise self._spans_failed(lasting[0]) from None
            if self.transactional and error.txn_requires_abort() and not error.fatal():
                raise _Abortable(error.str()) from None
            raise self._transaction_failed(error.str()) from None
        return spans

    def _produce_state(self, records: list[tuple[str, bytes, bytes]]) -> list:
        """Produce the span records (and new schema mappings) into the transaction; the
        returned list fills with their delivery errors."""
        from confluent_kafka import KafkaException

        failed: list = []

        def delivered(err, _msg) -> None:
            if err is not None:
                failed.append(err)

        for topic, value, key in records:
            try:
                self._producer.produce(topic, value, key, on_delivery=delivered)
            except KafkaException as exc:
                raise self._abortable(exc.args[0]) or self._spans_failed(exc.args[0]) from None
        return failed

    def _spans_failed(self, error) -> WriteError:
        return WriteError(f"writing {self.where}: cannot write its span records to "
                          f"{self._spans_topic} on cluster {self.target.alias!r}: "
                          f"{error.str()}; nothing of the transaction was committed")

    def _committed(self, touched: list[_Range], spans: dict[int, list[ledger.Span]]) -> None:
        """Account a committed transaction to its ranges."""
        at = time.time() * 1000
        for state in touched:
            mine = spans[id(state)]
            # The proof's digests place each record where its span's syncs say, so a wrong
            # sync fails the proof instead of sending a consumer astray after failover.
            syncs = [pair for span in mine for pair in span.syncs]
            for piece in state.txn:
                state.digest.add(piece.upstream, shifted(syncs, piece.upstream), piece.batch)
            result = state.result
            for span in mine:
                result.spans.append(span.value().decode())
                result.records_written += span.records
                if result.first_downstream is None:
                    result.first_downstream = span.downstream_first
                result.last_downstream = span.downstream_last
            result.bytes_written += sum(p.bytes for p in state.txn)
            # Records of a batch that straddles a commit count at the next one: an upper
            # bound.
            state.latency.add(at, state.uncommitted)
            state.uncommitted = TimestampStats()
            state.txn = []

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

    def _transaction_failed(self, reason: str) -> WriteError:
        """The open transaction failed: name its ranges' upstream offsets and the cause
        (the fatal error behind a generic one, e.g. the fencing by a newer writer)."""
        cause = self._fatal.str() if self._fatal is not None else reason
        touched = self._open_ranges()
        state = touched[0]
        more = (f" (and of {len(touched) - 1} more ranges of write slot "
                f"{self.tasks[0].slot})" if len(touched) > 1 else "")
        return WriteError(
            f"writing {state.where}: the transaction of upstream offsets "
            f"{state.txn[0].upstream[0]}..{state.txn[-1].upstream[-1]}{more} failed: "
            f"{cause}")

    def _flush(self, touched: list[_Range]) -> None:
        from confluent_kafka import KafkaException

        try:
            remaining = self._producer.flush(TIMEOUT_S)
        except SystemError:
            # confluent-kafka raises this from flush() when the producer has hit a fatal
            # error (fenced by a newer writer); the transaction's own call names the error.
            try:
                self._producer.commit_transaction(1)
            except KafkaException as exc:
                raise self._transaction_failed(exc.args[0].str()) from None
            raise
        if remaining:
            raise WriteError(f"writing {self.where}: {remaining} records unacknowledged after "
                             f"{TIMEOUT_S:.0f}s")
        for state in touched:
            for piece in state.txn:
                if piece.error is None:
                    continue
                if self.transactional and piece.passing:
                    raise _Abortable(f"{state.where} {piece.error}")
                raise WriteError(f"writing {state.where}: {piece.error}")

    def _abortable(self, error) -> _Abortable | None:
        """A produce refused because the open transaction already failed (``_STATE``):
        abortable, for the cause its delivery reports name."""
        from confluent_kafka import KafkaError

        if error.code() != KafkaError._STATE or not self.transactional:
            return None
        self._producer.poll(0)  # serves the delivery reports
        return _Abortable(next((f"{state.where} {piece.error}"
                                for state in self._open_ranges() for piece in state.txn
                                if piece.error is not None), error.str()))

    def _settle(self, touched: list[_Range]) -> dict[int, list[ledger.Span]] | None:
        """Per range of the transaction (by ``id``), its spans (runs of contiguous remote
        offsets); None when a slice written with callbacks at its ends only was
        interleaved."""
        import numpy as np

        self._flush(touched)
        out = {}
        for state in touched:
            runs: list[tuple[Any, Any]] = []  # (upstream offsets, downstream offsets)
            for piece in state.txn:
                downstream = piece.downstream()
                if downstream is None:
                    return None
                breaks = np.flatnonzero(np.diff(downstream) != 1) + 1
                for up, down in zip(np.split(piece.upstream, breaks),
                                    np.split(downstream, breaks), strict=True):
                    if runs and runs[-1][1][-1] + 1 == down[0]:
                        runs[-1] = (np.concatenate((runs[-1][0], up)),
                                    np.concatenate((runs[-1][1], down)))
                    else:
                        runs.append((up, down))
            out[id(state)] = [_span(state.task, up, down) for up, down in runs]
        return out

    def _write_again(self, reason: str) -> None:
        """A passing failure (a record timed out while a broker restarted) made the open
        transaction abortable: abort it and write its slices again, in a new one, unless
        it failed ``TRANSACTION_ATTEMPTS`` times."""
        while True:
            self._aborts += 1
            if self._aborts >= TRANSACTION_ATTEMPTS:
                raise self._transaction_failed(reason)
            log.warning("%s: transaction attempt %d of %d aborted (%s); writing it again",
                        self.where, self._aborts, TRANSACTION_ATTEMPTS, reason)
            try:
                self._rewrite()
                return
            except _Abortable as exc:
                reason = exc.reason

    def _rewrite(self) -> None:
        """Abort the open transaction and produce its slices again in a new one (kept
        until they are: a failure midway rewrites all of them again)."""
        from confluent_kafka import KafkaException

        if self._pending is None:
            self._pending = [(state, [piece.batch for piece in state.txn])
                             for state in self._open_ranges()]
        try:  # no longer than a record may take: a target down that long fails the write
            self._producer.abort_transaction(self._delivery_timeout_s)
        except KafkaException as exc:
            raise self._transaction_failed(exc.args[0].str()) from None
        self._begin()
        for state, batches in self._pending:
            for batch in batches:
                self._produce(state, batch)
        self._pending = None

    def _commit_positions_without_transaction(self, positions) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions

        group = ledger.progress_group(self.tasks[0].source_alias)
        admin = clients.admin_client(self.target)
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, positions)],
                                           request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)


def _span(task: WriteTask, upstream, downstream) -> ledger.Span:
    import numpy as np

    delta = downstream - upstream
    changes = np.concatenate(([0], np.flatnonzero(np.diff(delta)) + 1))
    return ledger.Span(task.plan_id, task.topic, task.partition, task.remote_topic,
                       int(upstream[0]), int(upstream[-1]), int(downstream[0]),
                       int(downstream[-1]), len(upstream),
                       tuple((int(upstream[i]), int(downstream[i])) for i in changes))


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
    passing: bool = False  # the error may not recur: a timeout, a broker going away

    def delivered(self, index: int, err, msg) -> None:
        if err is not None:
            if self.error is None:
                self.error = f"offset {self.upstream[index]}: {err.str()}"
                self.passing = _passing(err)
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


def _passing(error) -> bool:
    """Whether a failed delivery may succeed when written again: a timeout, a broker
    gone for a while, or what Kafka marks retriable."""
    from confluent_kafka import KafkaError

    return error.retriable() or error.code() in (
        KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT)


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
