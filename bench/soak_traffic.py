"""``make soak``'s traffic: the load generator, the consumers that time each record's lag
on the targets, and the check that every source record is on every target once, in order."""

from __future__ import annotations

import threading
import time
from array import array

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

FLOWS = (("a", "b"), ("b", "a"), ("a", "c"), ("b", "c"))
SOURCES = ("a", "b")
TOPICS, PARTITIONS = 20, 4
CATCH_UP_S = 600


def topics_of(source: str) -> list[str]:
    return [f"load-{source}-{i}" for i in range(TOPICS)]


class Load(threading.Thread):
    """Writes ``rate`` records/s over one source's partitions, keys ``topic/partition/seq``."""

    def __init__(self, bootstrap: str, source: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.parts = [(t, p) for t in topics_of(source) for p in range(PARTITIONS)]
        self.rate, self.stopped, self.failed = rate, threading.Event(), 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 600_000})

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self.failed += 1

    def run(self) -> None:
        seq = dict.fromkeys(self.parts, 0)
        started, sent, i = time.monotonic(), 0, 0
        while not self.stopped.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while sent < due:
                topic, partition = self.parts[i % len(self.parts)]
                n = seq[(topic, partition)]
                try:
                    self.producer.produce(topic, key=f"{topic}/{partition}/{n}".encode(),
                                          value=b"v" * 200, partition=partition,
                                          headers=[("seq", str(n).encode())],
                                          timestamp=int(time.time() * 1000),
                                          on_delivery=self._delivered)
                except BufferError:
                    break
                seq[(topic, partition)] = n + 1
                sent, i = sent + 1, i + 1
            self.producer.poll(0.05)
        self.producer.flush(CATCH_UP_S)


class Tail(threading.Thread):
    """A read_committed consumer of a target's remote load topics: per record, when it
    became visible and its lag (s) since its source timestamp."""

    def __init__(self, bootstrap: str, pattern: str) -> None:
        super().__init__(daemon=True)
        self.arrived, self.lags = array("d"), array("d")
        self.stopped = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-tail",
                                  "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False,
                                  "topic.metadata.refresh.interval.ms": 5000})
        self.consumer.subscribe([pattern])

    def run(self) -> None:
        seen: dict[tuple[str, int], int] = {}  # the highest offset read per partition
        while not self.stopped.is_set():
            for msg in self.consumer.consume(10_000, 0.5):
                if msg.error() is None:
                    # Only a record's first visibility: a consumer that rejoins its group
                    # after a broker restart starts again from the earliest offset.
                    tp = (msg.topic(), msg.partition())
                    if msg.offset() <= seen.get(tp, -1):
                        continue
                    seen[tp] = msg.offset()
                    now = time.time()
                    self.arrived.append(now)
                    self.lags.append(now - msg.timestamp()[1] / 1000)
        self.consumer.close()


def keys_of(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """Every record key of each partition of ``topic``, in offset order (committed records
    only), read by one consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-check",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)
                for p in range(PARTITIONS)}
        pending = {p for p, (low, high) in ends.items() if low < high}
        consumer.assign([TopicPartition(topic, p, ends[p][0]) for p in pending])
        out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 300
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(100_000, 0.5):
                if msg.error() is None:
                    out[msg.partition()].append(msg.key())
                elif msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(msg.error().str())
            # Past the last record and its transaction's marker: done, without waiting.
            at = consumer.position([TopicPartition(topic, p) for p in sorted(pending)])
            pending -= {tp.partition for tp in at if tp.offset >= ends[tp.partition][1]}
        return out
    finally:
        consumer.close()


def exactly_once(bootstraps: dict[str, str]) -> dict[str, int]:
    """Source partitions against their remote partitions on every flow's target."""
    lost = duplicated = out_of_order = produced = 0
    for source in SOURCES:
        for topic in topics_of(source):
            wanted = keys_of(bootstraps[source], topic)
            for target in (t for s, t in FLOWS if s == source):
                copied = keys_of(bootstraps[target], f"{source}.{topic}")
                for partition, want in wanted.items():
                    got = copied[partition]
                    produced += len(want)
                    lost += len(set(want) - set(got))
                    duplicated += len(got) - len(set(got))
                    out_of_order += int(got != want and not (set(want) - set(got))
                                        and len(got) == len(set(got)))
    return {"records_compared": produced, "records_lost": lost,
            "records_duplicated": duplicated, "partitions_out_of_order": out_of_order}
