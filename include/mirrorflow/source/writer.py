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
from typing import Any

import numpy as np

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import DataLossError, MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.quality.digests import restamp
from mirrorflow.source import ledger, record_size
from mirrorflow.source.plan_store import plans_topic
from mirrorflow.source.transaction import (
    TIMEOUT_S,
    Abortable,
    RangeState,
    Slice,
    SlotTransactions,
)
from mirrorflow.source.write_stats import TimestampStats
from mirrorflow.source.write_task import RangeResult, WriteError, WriteTask, transactional_id

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
# librdkafka bounds a record at produce() by an estimate of its size above the exact one
# (record_size.batch_size), which the per-record check already held to its topic's limit.
MESSAGE_MARGIN = 1024
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


class SlotWriter(SlotTransactions):
    """Writes the ranges of one write slot (see the module's note) with one producer.
    Use: open(), write_batch()..., close()."""

    def __init__(self, tasks: list[WriteTask], target: ClusterConfig, source: ClusterConfig,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, mapper: Any = None,
                 drop_headers: bool = False):
        if not tasks or len({(t.flow, t.slot) for t in tasks}) != 1:
            raise MirrorflowError("a slot writer takes the ranges of one flow's one slot")
        super().__init__()
        self.tasks = tasks
        self.target = target
        self.source = source
        self.chunk_records = tasks[0].chunk_records
        self.chunk_bytes = chunk_bytes
        self.ranges = {(t.topic, t.partition): RangeState(t) for t in tasks}
        self.at_least_once: str | None = None  # why the slot writes without transactions
        self._spans_topic = ledger.spans_topic(tasks[0].source_alias)
        self._plans_topic = plans_topic(tasks[0].source_alias)
        self._opened = 0.0
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
            # The broker refuses a record batch past its topic's max.message.bytes.
            # librdkafka closes a batch at min(batch.size, message.max.bytes) but always
            # takes its first record: batches of several records stay within the smallest
            # limit of the slot's topics, and a larger record goes alone, within its own
            # topic's limit (checked per record: _check_sizes). message.max.bytes, also
            # librdkafka's per-record bound, need only admit the largest limit.
            settings["batch.size"] = min(int(settings["batch.size"]), *limits)
            settings["message.max.bytes"] = min(int(settings["message.max.bytes"]),
                                                max(limits) + MESSAGE_MARGIN)
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
        """Write the records of one Arrow batch (Spark's Kafka schema; the ranges of
        the slot one after another) that are at or past each range's resume position."""
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
    def _write_range(self, state: RangeState, batch) -> None:
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
            except Abortable as exc:  # the piece is in the transaction written again
                self._write_again(exc.reason)
            done += piece.num_rows
            if self._txn_records >= self.chunk_records or self._txn_bytes >= self.chunk_bytes:
                self._commit()
                self._begin()
        state.next = int(offsets[-1]) + 1

    def _check_start(self, state: RangeState, first_offset: int) -> None:
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
    def _produce(self, state: RangeState, batch) -> None:
        """Produce one slice of a range inside the open transaction and keep it for the
        spans."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from confluent_kafka import KafkaError, KafkaException

        careful = self.careful
        n = batch.num_rows
        upstream = batch.column("offset").to_numpy()
        self._check_sizes(state, batch, upstream)
        piece = Slice(batch, upstream, careful, _payload_bytes(batch))
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
                                     f"{self._size_hint(exc.args[0])}") from None
        state.txn.append(piece)
        self._txn_records += n
        self._txn_bytes += piece.bytes

    def _check_sizes(self, state: RangeState, batch, upstream) -> None:
        """Fail, before any of it is produced, on a record that its remote topic would
        refuse (:mod:`record_size`), naming its offset, its size and the limit."""
        limit = state.task.max_message_bytes
        if not limit:
            return
        for i in np.flatnonzero(record_size.upper_bounds(batch) > limit).tolist():
            headers = None if self.drop_headers else _header_lists(
                batch.column("headers").slice(i, 1))
            size = record_size.batch_size(batch.column("key")[i].as_py(),
                                          batch.column("value")[i].as_py(),
                                          headers[0] if headers else None)
            if size > limit:
                task = state.task
                raise WriteError(
                    f"cannot write {task.topic}[{task.partition}] offset {upstream[i]} to "
                    f"{task.remote_topic}: the record is {size} bytes as a record batch, "
                    f"larger than {task.remote_topic}'s max.message.bytes = {limit} on "
                    f"cluster {self.target.alias!r}; raise it there (config sync copies the "
                    f"source topic's), then rerun")

    def _size_hint(self, error) -> str:
        from confluent_kafka import KafkaError

        if error.code() != KafkaError.MSG_SIZE_TOO_LARGE:
            return ""
        return (f" (the producer's message.max.bytes on cluster {self.target.alias!r} is "
                f"below the record: raise {self.target.alias}.producer.max.request.size, then "
                f"rerun)")


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
