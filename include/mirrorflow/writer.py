"""Writing one planned range to its remote partition, exactly once.

The mirror is the only writer of a remote topic, so the remote partition itself records
how far an earlier attempt of the same plan got. A writer:

1. **fences** every earlier writer of the partition: its producer's ``transactional.id``
   is fixed per remote partition, and ``init_transactions`` bumps the epoch, so a zombie
   task can write no more and its open transaction is aborted;
2. **counts** the records a ``read_committed`` reader sees in the remote partition from
   the plan's ``target_start``: those records of the range are already there;
3. **skips** that many records of the range and writes the rest, in source order, with
   key, value, headers and timestamp, committing a transaction every ``chunk_records``.

On Apache Kafka, ``read_committed`` hides aborted records, so step 2 counts only what
consumers will see and step 3 rewrites what an aborted attempt lost. On Tansu, which shows
aborted records to every reader, step 2 counts them as present, and they are: every
consumer sees them. Either way each record ends up on the target exactly once as the
target's consumers see it. Where the target refuses transactions and
``exactly.once.support = requested``, the writer falls back to an idempotent producer
(no zombie fencing) and says so in its result; ``required`` fails instead.

Speed: records are produced straight from the Arrow batch; only the first and last record
of each produced span (a slice of a batch inside one transaction) carry a delivery
callback. A span's remote offsets are contiguous (one producer, one partition, one
transaction), so its two offsets give every record's, and the offset syncs follow without
per-record Python work. A gap means another producer wrote to the remote partition, and
the write fails. Failed deliveries fail the transaction's commit, which names the span.
Without transactions every record carries a callback, to name the failed offset.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.errors import MirrorflowError

log = logging.getLogger(__name__)

DEFAULT_CHUNK_RECORDS = 100_000
TIMEOUT_S = 60.0
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


@dataclass
class RangeResult:
    """What one writer did for one range; the offset-sync pairs go to the next step."""

    topic: str
    partition: int
    remote_topic: str
    start: int
    end: int
    records_read: int = 0
    records_written: int = 0
    records_skipped: int = 0
    bytes_written: int = 0
    first_downstream: int | None = None
    last_downstream: int | None = None
    syncs: list[tuple[int, int]] = field(default_factory=list)
    transactional: bool = False
    record_age_ms: dict[str, float] | None = None
    replication_latency_ms: dict[str, float] | None = None
    write_seconds: float = 0.0


def transactional_id(flow_name: str, remote_topic: str, partition: int) -> str:
    """Fixed per remote partition: a new writer fences every earlier one."""
    return f"mirrorflow|{flow_name}|{remote_topic}|{partition}"


def visible_offsets(conf: dict[str, Any], topic: str, partition: int, start: int,
                    timeout: float = TIMEOUT_S) -> list[int]:
    """Offsets of the records a read_committed reader sees in topic[partition] from
    ``start`` to the end (their count is how much of the range is already there)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from mirrorflow.clients import new_client

    # A short fetch wait: the scan usually finds the end at once (nothing written yet), and
    # the default 500 ms would be paid by every write task.
    consumer = new_client(Consumer, {
        **conf, "group.id": "mirrorflow-writer", "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": "read_committed",
        "fetch.wait.max.ms": 10}, f"reading {topic}[{partition}] on the target")
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        offsets: list[int] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.05):
                err = msg.error()
                if err is None:
                    offsets.append(msg.offset())
                elif err.code() == KafkaError._PARTITION_EOF:
                    return offsets
                else:
                    raise WriteError(f"counting {topic}[{partition}] from {start}: {err.str()}")
        raise WriteError(f"counting {topic}[{partition}] from {start}: no end within "
                         f"{timeout:.0f}s")
    finally:
        consumer.close()


class PartitionWriter:
    """Writes one range (see the module's note). Use: open(), write_batch()..., close()."""

    def __init__(self, producer_conf: dict[str, Any], consumer_conf: dict[str, Any],
                 topic: str, partition: int, remote_topic: str,
                 start: int, end: int, target_start: int, flow_name: str,
                 exactly_once: str = "requested", chunk_records: int = DEFAULT_CHUNK_RECORDS,
                 max_message_bytes: int | None = None):
        self.producer_conf = producer_conf
        self.consumer_conf = consumer_conf
        self.remote_topic = remote_topic
        self.partition = partition
        self.target_start = target_start
        self.flow_name = flow_name
        self.exactly_once = exactly_once
        self.chunk_records = chunk_records
        self.max_message_bytes = max_message_bytes
        self.result = RangeResult(topic, partition, remote_topic, start, end)
        self._producer = None
        self._to_skip = 0
        self._present: collections.deque[int] = collections.deque()
        self._in_txn = 0
        self._spans: collections.deque[_Span] = collections.deque()
        self._last_delta: int | None = None
        self._last_pair: tuple[int, int] | None = None
        self._errors: list[str] = []
        # Metrics: a record's age when the writer gets it, and when its write is committed.
        self._age = AgeStats()
        self._latency = AgeStats()
        self._uncommitted = TimestampStats()
        self._opened = 0.0

    # -- lifecycle
    def open(self) -> None:
        from confluent_kafka import KafkaException, Producer

        from mirrorflow.clients import new_client

        self._opened = time.monotonic()
        settings = {**_PRODUCER_DEFAULTS, **self.producer_conf, "enable.idempotence": True}
        if self.max_message_bytes:
            # The remote topic's limit on a record batch is the producer's on a message set.
            settings["message.max.bytes"] = min(int(settings["message.max.bytes"]),
                                                self.max_message_bytes)
        txn_id = transactional_id(self.flow_name, self.remote_topic, self.partition)
        where = f"writing {self.remote_topic}[{self.partition}]"
        producer = new_client(Producer, {**settings, "transactional.id": txn_id,
                                         "transaction.timeout.ms": 300_000}, where)
        try:
            producer.init_transactions(TIMEOUT_S)
            self.result.transactional = True
        except KafkaException as exc:
            if self.exactly_once == "required":
                raise WriteError(
                    f"exactly.once.support = required, but the target refuses transactions "
                    f"for {self.remote_topic}[{self.partition}]: {exc}") from None
            log.warning("transactions unavailable for %s[%d] (%s); writing with an idempotent "
                        "producer, without zombie fencing", self.remote_topic, self.partition,
                        exc)
            producer = new_client(Producer, settings, where)
        self._producer = producer
        self._present = collections.deque(visible_offsets(
            self.consumer_conf, self.remote_topic, self.partition, self.target_start))
        self._to_skip = len(self._present)
        self.result.records_skipped = self._to_skip
        if self._to_skip:
            log.info("%s[%d]: %d records of this range are already on the target; skipping "
                     "them", self.remote_topic, self.partition, self._to_skip)
        self._begin()

    def write_batch(self, batch) -> None:
        """Produce the records of one Arrow batch (the Kafka source schema), in order,
        committing a transaction every ``chunk_records``."""
        n = batch.num_rows
        self.result.records_read += n
        skip = min(self._to_skip, n)
        self._to_skip -= skip
        if skip:
            # Already on the target: pair them with where they are, for exact offset syncs.
            for upstream in batch.column("offset").slice(0, skip).to_pylist():
                self._record_pair(upstream, self._present.popleft())
            if skip == n:
                return
            batch = batch.slice(skip)
        received = TimestampStats()
        received.add_column(batch.column("timestamp"))
        self._age.add(time.time() * 1000, received)
        self._uncommitted = _merged(self._uncommitted, received)
        done = 0
        while done < batch.num_rows:
            span = batch.slice(done, self.chunk_records - self._in_txn)
            self._produce(span)
            done += span.num_rows
            self._in_txn += span.num_rows
            if self._in_txn >= self.chunk_records:
                self._commit()
                self._begin()
        self._producer.poll(0)
        self._settle()
        self._raise_errors()

    def _produce(self, batch) -> None:
        """Produce one span (inside one transaction); see the module's note on callbacks."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from confluent_kafka import KafkaException

        n = batch.num_rows
        upstream = batch.column("offset").to_numpy()
        span = _Span(upstream)
        self._spans.append(span)
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        millis = pc.fill_null(pc.divide(batch.column("timestamp").cast(pa.int64()), 1000), 0)
        stamps = millis.to_pylist()
        headers = _header_lists(batch.column("headers"))
        every = not self.result.transactional
        produce, poll = self._producer.produce, self._producer.poll
        topic, partition, last = self.remote_topic, self.partition, n - 1
        for i in range(n):
            callback = (functools.partial(span.delivered, i)
                        if every or i == 0 or i == last else None)
            while True:
                try:
                    produce(topic, values[i], keys[i], partition=partition, timestamp=stamps[i],
                            headers=headers[i] if headers else None, on_delivery=callback)
                    break
                except BufferError:
                    poll(0.05)
                except KafkaException as exc:
                    raise WriteError(f"cannot write {self.result.topic}[{partition}] offset "
                                     f"{upstream[i]} to {topic}: {exc.args[0].str()}"
                                     f"{self._size_hint(exc.args[0])}") from None
        self.result.records_written += n
        self.result.bytes_written += (pc.sum(pc.binary_length(batch.column("key"))).as_py() or 0) \
            + (pc.sum(pc.binary_length(batch.column("value"))).as_py() or 0)

    def _size_hint(self, error) -> str:
        from confluent_kafka import KafkaError

        if error.code() != KafkaError.MSG_SIZE_TOO_LARGE:
            return ""
        limit = self.max_message_bytes
        return (f" (the record is larger than {self.remote_topic}'s max.message.bytes = "
                f"{limit} on the target; raise it there, then rerun)" if limit else
                " (raise the target producer's message.max.bytes, then rerun)")

    def close(self) -> RangeResult:
        """Commit what is left and wait for every acknowledgement."""
        self._commit()
        self._raise_errors()
        if self._spans:
            raise WriteError(f"{self.remote_topic}[{self.partition}]: "
                             f"{sum(len(s.upstream) for s in self._spans)} records unacknowledged")
        # Syncs: the first pair of every run of equal distance, and the range's last pair.
        if self._last_pair is not None and self.result.syncs[-1] != self._last_pair:
            self.result.syncs.append(self._last_pair)
        self.result.record_age_ms = self._age.summary()
        self.result.replication_latency_ms = self._latency.summary()
        self.result.write_seconds = round(time.monotonic() - self._opened, 3)
        return self.result

    def abort(self) -> None:
        """Best effort after a failure: abort the open transaction."""
        if self._producer is not None and self.result.transactional:
            try:
                self._producer.abort_transaction(10)
            except Exception as exc:  # the failure that brought us here matters more
                log.warning("abort of %s[%d] failed: %s", self.remote_topic, self.partition,
                            exc)

    # -- internals
    def _begin(self) -> None:
        if self.result.transactional:
            self._producer.begin_transaction()
        self._in_txn = 0

    def _commit(self) -> None:
        from confluent_kafka import KafkaException

        if self.result.transactional:
            try:
                self._producer.commit_transaction(TIMEOUT_S)
            except KafkaException as exc:
                # Not settled: a failed record in a span would read as a foreign producer's
                # gap. A span end's own error names its offset; else the commit's error.
                spans = list(self._spans)
                where = (f" (upstream offsets {spans[0].upstream[0]}..{spans[-1].upstream[-1]})"
                         if spans else "")
                named = next((s.error for s in spans if s.error), exc.args[0].str())
                raise WriteError(f"writing {self.result.topic}[{self.partition}] to "
                                 f"{self.remote_topic}: the transaction{where} failed: "
                                 f"{named}") from None
        else:
            remaining = self._producer.flush(TIMEOUT_S)
            if remaining:
                self._errors.append(f"{remaining} records unacknowledged after "
                                    f"{TIMEOUT_S:.0f}s")
        self._settle()
        self._raise_errors()
        # Records of a batch that straddles a commit count at the next one: an upper bound.
        self._latency.add(time.time() * 1000, self._uncommitted)
        self._uncommitted = TimestampStats()

    def _settle(self) -> None:
        """Turn the acknowledged spans, oldest first, into offset pairs."""
        while self._spans and self._spans[0].acknowledged():
            span = self._spans.popleft()
            if span.error is not None:
                self._errors.append(span.error)
                continue
            if span.last - span.first != len(span.upstream) - 1:
                self._errors.append(
                    f"remote offsets {span.first}..{span.last} hold "
                    f"{span.last - span.first + 1} records for {len(span.upstream)} produced: "
                    "another producer writes to this remote partition")
                continue
            if self.result.first_downstream is None:
                self.result.first_downstream = span.first
            self.result.last_downstream = span.last
            self._record_pairs(span.upstream, span.first)

    def _record_pairs(self, upstream, first_downstream: int) -> None:
        """_record_pair for a run of contiguous remote offsets, vectorised."""
        import numpy as np

        delta = first_downstream + np.arange(len(upstream)) - upstream
        starts = np.flatnonzero(np.diff(delta)) + 1
        if int(delta[0]) != self._last_delta:
            starts = np.concatenate(([0], starts))
        self.result.syncs.extend((int(upstream[i]), first_downstream + int(i)) for i in starts)
        self._last_delta = int(delta[-1])
        self._last_pair = (int(upstream[-1]), first_downstream + len(upstream) - 1)

    def _record_pair(self, upstream: int, downstream: int) -> None:
        """Keep the first pair of every run of equal distance (and, at close, the last)."""
        delta = downstream - upstream
        if delta != self._last_delta:
            self.result.syncs.append((upstream, downstream))
            self._last_delta = delta
        self._last_pair = (upstream, downstream)

    def _raise_errors(self) -> None:
        if self._errors:
            raise WriteError(f"writing {self.result.topic}[{self.partition}] to "
                             f"{self.remote_topic}: {self._errors[0]}")


@dataclass
class _Span:
    """Records produced inside one transaction, waiting for their remote offsets."""

    upstream: Any  # numpy int64 array of the records' source offsets
    first: int | None = None
    last: int | None = None
    error: str | None = None

    def delivered(self, index: int, err, msg) -> None:
        if err is not None:
            self.error = self.error or f"offset {self.upstream[index]}: {err.str()}"
            return
        if index == 0:
            self.first = msg.offset()
        if index == len(self.upstream) - 1:
            self.last = msg.offset()

    def acknowledged(self) -> bool:
        return self.error is not None or (self.first is not None and self.last is not None)


def _header_lists(column) -> list | None:
    """Per record ``[(key, value), ...]`` or None; None for the whole batch when no record
    has headers (the common case costs no per-record work)."""
    import pyarrow.compute as pc

    if not pc.max(pc.list_value_length(column)).as_py():
        return None
    return [[(h["key"], h["value"]) for h in hs] if hs else None for hs in column.to_pylist()]


def _merged(a: TimestampStats, b: TimestampStats) -> TimestampStats:
    return TimestampStats(a.count + b.count, min(a.min, b.min), max(a.max, b.max),
                          a.total + b.total)
