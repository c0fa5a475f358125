"""Compacted internal topics used as key/value stores (offset store, plan store).

Keys are partitioned with murmur2, as the Java client does, so that records written by
mirrorflow and by MirrorMaker 2 for the same key land in the same partition and
compaction keeps only the newest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mirrorflow import clients
from mirrorflow.config import ClusterConfig
from mirrorflow.watermarks import probe_watermarks

log = logging.getLogger(__name__)


class InternalTopicError(RuntimeError):
    """An internal topic could not be created, read or written."""


@dataclass(frozen=True)
class CompactedTopic:
    """A compacted topic read as a map: the newest value of every key, tombstones removed."""

    cluster: ClusterConfig
    topic: str
    partitions: int = 1
    replication_factor: int = 1

    def ensure(self) -> None:
        """Create the topic (compacted) unless it exists."""
        clients.ensure_topic(self.cluster, self.topic, self.partitions,
                             self.replication_factor, config={"cleanup.policy": "compact"})

    def read(self) -> dict[bytes, bytes]:
        """Every key's newest value. A missing topic reads as empty."""
        from confluent_kafka import TopicPartition

        admin = clients.admin_client(self.cluster)
        metadata = admin.list_topics(timeout=15).topics.get(self.topic)
        if metadata is None or metadata.error is not None:
            return {}
        parts = [(self.topic, p) for p in sorted(metadata.partitions)]
        marks = probe_watermarks(self.cluster, parts)
        consumer = clients.consumer(self.cluster, **{"group.id": "mirrorflow-internal"})
        latest: dict[bytes, bytes | None] = {}
        try:
            pending = {tp: m for tp, m in marks.items() if m.high > m.low}
            consumer.assign([TopicPartition(t, p, marks[(t, p)].low) for t, p in pending])
            while pending:
                for msg in consumer.consume(num_messages=10_000, timeout=0.05):
                    if msg.error() is not None:
                        raise InternalTopicError(
                            f"cluster {self.cluster.alias!r}: reading {self.topic}: "
                            f"{msg.error().str()}")
                    tp = (msg.topic(), msg.partition())
                    if msg.key() is None:
                        log.warning("%s[%d]@%d has no key; skipped", self.topic, tp[1],
                                    msg.offset())
                    else:
                        latest[msg.key()] = msg.value()
                    if tp in pending and msg.offset() >= pending[tp].high - 1:
                        del pending[tp]
                        consumer.incremental_unassign([TopicPartition(*tp)])
        finally:
            consumer.close()
        return {k: v for k, v in latest.items() if v is not None}

    def write(self, records: list[tuple[bytes, bytes | None]], timeout: float = 30.0) -> None:
        """Write records (None value = tombstone) and wait until every one is acknowledged."""
        if not records:
            return
        errors: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(err.str())

        producer = clients.producer(self.cluster, **{
            "enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"})
        for key, value in records:
            producer.produce(self.topic, key=key, value=value, on_delivery=on_delivery)
        remaining = producer.flush(timeout)
        if remaining or errors:
            raise InternalTopicError(
                f"cluster {self.cluster.alias!r}: writing {self.topic} failed: "
                f"{errors[0] if errors else f'{remaining} records unacknowledged'}")
