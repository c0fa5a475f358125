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
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_CHUNK_RECORDS = 100_000
TIMEOUT_S = 60.0
_PRODUCER_DEFAULTS = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 262_144,
    "message.max.bytes": 16_777_216,
    "compression.type": "lz4",
    "acks": "all",
}


class WriteError(RuntimeError):
    """A range could not be written; the message names topic, partition and offset."""


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


def transactional_id(flow_name: str, remote_topic: str, partition: int) -> str:
    """Fixed per remote partition: a new writer fences every earlier one."""
    return f"mirrorflow|{flow_name}|{remote_topic}|{partition}"


def visible_offsets(conf: dict[str, Any], topic: str, partition: int, start: int,
                    timeout: float = TIMEOUT_S) -> list[int]:
    """Offsets of the records a read_committed reader sees in topic[partition] from
    ``start`` to the end (their count is how much of the range is already there)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({**conf, "group.id": "mirrorflow-writer", "enable.auto.commit": False,
                         "enable.partition.eof": True, "isolation.level": "read_committed"})
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
                 exactly_once: str = "requested", chunk_records: int = DEFAULT_CHUNK_RECORDS):
        self.producer_conf = producer_conf
        self.consumer_conf = consumer_conf
        self.remote_topic = remote_topic
        self.partition = partition
        self.target_start = target_start
        self.flow_name = flow_name
        self.exactly_once = exactly_once
        self.chunk_records = chunk_records
        self.result = RangeResult(topic, partition, remote_topic, start, end)
        self._producer = None
        self._to_skip = 0
        self._present: collections.deque[int] = collections.deque()
        self._in_txn = 0
        self._upstream: collections.deque[int] = collections.deque()
        self._last_delta: int | None = None
        self._last_pair: tuple[int, int] | None = None
        self._errors: list[str] = []

    # -- lifecycle
    def open(self) -> None:
        from confluent_kafka import KafkaException, Producer

        settings = {**_PRODUCER_DEFAULTS, **self.producer_conf, "enable.idempotence": True,
                    "on_delivery": self._on_delivery}
        txn_id = transactional_id(self.flow_name, self.remote_topic, self.partition)
        producer = Producer({**settings, "transactional.id": txn_id,
                             "transaction.timeout.ms": 300_000})
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
            producer = Producer(settings)
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
        """Produce the records of one Arrow batch (the Kafka source schema), in order."""
        from confluent_kafka import KafkaException

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
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        offsets = batch.column("offset").to_pylist()
        timestamps = batch.column("timestamp").cast("int64").to_pylist()
        headers = batch.column("headers").to_pylist()
        produce = self._producer.produce
        topic, partition = self.remote_topic, self.partition
        written_bytes = 0
        for i, offset in enumerate(offsets):
            key, value, hdrs = keys[i], values[i], headers[i]
            ts = timestamps[i]
            self._upstream.append(offset)
            while True:
                try:
                    produce(topic, value, key, partition=partition,
                            timestamp=ts // 1000 if ts is not None else 0,
                            headers=[(h["key"], h["value"]) for h in hdrs] if hdrs else None)
                    break
                except BufferError:
                    self._producer.poll(0.05)
                except KafkaException as exc:
                    self._upstream.pop()
                    raise WriteError(f"cannot write {self.result.topic}[{partition}] offset "
                                     f"{offset} to {topic}: {exc.args[0].str()}") from None
            written_bytes += (len(key) if key else 0) + (len(value) if value else 0)
            self._in_txn += 1
            if self._in_txn >= self.chunk_records:
                self._commit()
                self._begin()
        self.result.records_written += len(offsets)
        self.result.bytes_written += written_bytes
        self._producer.poll(0)
        self._raise_errors()

    def close(self) -> RangeResult:
        """Commit what is left and wait for every acknowledgement."""
        self._commit()
        self._raise_errors()
        if self._upstream:
            raise WriteError(f"{self.remote_topic}[{self.partition}]: "
                             f"{len(self._upstream)} records unacknowledged")
        # Syncs: the first pair of every run of equal distance, and the range's last pair.
        if self._last_pair is not None and self.result.syncs[-1] != self._last_pair:
            self.result.syncs.append(self._last_pair)
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
        if self.result.transactional:
            self._producer.commit_transaction(TIMEOUT_S)
        else:
            remaining = self._producer.flush(TIMEOUT_S)
            if remaining:
                self._errors.append(f"{remaining} records unacknowledged after "
                                    f"{TIMEOUT_S:.0f}s")
        self._raise_errors()

    def _on_delivery(self, err, msg) -> None:
        """Delivery reports of one partition arrive in produce order (idempotence)."""
        upstream = self._upstream.popleft()
        if err is not None:
            self._errors.append(f"offset {upstream}: {err.str()}")
            return
        downstream = msg.offset()
        if self.result.first_downstream is None:
            self.result.first_downstream = downstream
        self.result.last_downstream = downstream
        self._record_pair(upstream, downstream)

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
