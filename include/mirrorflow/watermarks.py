"""True log start and end offsets of partitions, on Apache Kafka and on Tansu alike.

ListOffsets(latest) on Tansu returns the base offset of the last record batch + 1, short
of the real end when that batch holds several records (see shared/notes/broker.md). The
high watermark carried by a Fetch response is right on both brokers, so we fetch from
just below the listed end and read the end from the partition-EOF event, which carries
the fetch's high watermark. On Apache Kafka the fetch returns at most one record per
partition before EOF; the cost is one fetch round trip.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mirrorflow import clients
from mirrorflow.config import ClusterConfig

TopicPart = tuple[str, int]


class WatermarkError(RuntimeError):
    """A partition's offsets could not be read in time."""


@dataclass(frozen=True)
class Watermarks:
    """[log start, end) of one partition: the offsets a reader can fetch now."""

    low: int
    high: int


def probe_watermarks(
    cluster: ClusterConfig, partitions: Iterable[TopicPart], timeout: float = 30.0,
    **consumer_settings: Any,
) -> dict[TopicPart, Watermarks]:
    """The log start and true end of every partition (see the module's note)."""
    from confluent_kafka import KafkaError, TopicPartition

    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    settings = {"enable.partition.eof": True, "isolation.level": "read_uncommitted",
                "fetch.wait.max.ms": 10, "group.id": "mirrorflow-watermarks",
                **consumer_settings}
    consumer = clients.consumer(cluster, **settings)
    try:
        low: dict[TopicPart, int] = {}
        assignment = []
        for topic, partition in wanted:
            start, listed_end = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False)
            low[(topic, partition)] = start
            assignment.append(TopicPartition(topic, partition, max(start, listed_end - 1)))
        consumer.assign(assignment)
        ends: dict[TopicPart, int] = {}
        deadline = time.monotonic() + timeout
        while len(ends) < len(wanted):
            if time.monotonic() > deadline:
                missing = ", ".join(f"{t}[{p}]" for t, p in wanted if (t, p) not in ends)
                raise WatermarkError(
                    f"cluster {cluster.alias!r}: no end offset within {timeout:.0f}s for {missing}")
            for msg in consumer.consume(num_messages=1000, timeout=0.05):
                err = msg.error()
                if err is None:
                    continue
                if err.code() == KafkaError._PARTITION_EOF:
                    ends[(msg.topic(), msg.partition())] = msg.offset()
                else:
                    raise WatermarkError(
                        f"cluster {cluster.alias!r}: reading {msg.topic()}[{msg.partition()}]: "
                        f"{err.str()}")
        return {tp: Watermarks(low[tp], max(ends[tp], low[tp])) for tp in wanted}
    finally:
        consumer.close()
