"""Soak, bounded: the flow runs again and again while a producer keeps writing to the
source and a consumer group keeps consuming and committing there. Afterwards the target
holds every source record once, in order, and the group's translated offsets point at
exactly the record after the last one it consumed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from helpers.kafka import config_file, create_topic, read_partition
from mirrorflow.checkpoint import checkpoints, remote
from mirrorflow.config.loader import load_config
from mirrorflow.run import run_cycle

pytestmark = [pytest.mark.broker, pytest.mark.spark]

CYCLES = 6
PARTITIONS = 3


def test_repeated_runs_under_live_traffic_stay_complete_and_exact(spark, two_clusters,
                                                                  tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", PARTITIONS)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n"
                       "emit.checkpoints.interval.seconds = 0\n")
    config = load_config(path)
    stop = threading.Event()
    produced = [0]
    consumed = [0]

    def produce() -> None:
        producer = Producer({"bootstrap.servers": a, "linger.ms": 5})
        while not stop.is_set():
            for _ in range(150):
                i = produced[0]
                producer.produce("orders", key=f"k{i}".encode(), value=b"v" * (i % 300),
                                 partition=i % PARTITIONS, headers=[("n", str(i).encode())])
                produced[0] += 1
            producer.poll(0)
            time.sleep(0.05)
        assert producer.flush(30) == 0

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": a, "group.id": "billing",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        while not stop.is_set():
            msgs = [m for m in consumer.consume(200, timeout=0.2) if m.error() is None]
            if msgs:
                consumer.commit(asynchronous=False)
                consumed[0] += len(msgs)
        consumer.close()

    workers = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for worker in workers:
        worker.start()
    mirrored = 0
    try:
        for cycle in range(CYCLES):
            mirrored += run_cycle(path, "a->b", run_id=f"soak-{cycle}", spark=spark).records
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)
    # Traffic has stopped: one more cycle takes the rest and checkpoints the last commits.
    mirrored += run_cycle(path, "a->b", run_id="soak-final", spark=spark).records

    assert mirrored == produced[0] and consumed[0] > 0
    committed = checkpoints.committed_offsets(config.cluster("a"), "billing")
    translated = remote.translate_offsets(config.cluster("b"), "a", "billing")
    for p in range(PARTITIONS):
        source = read_partition(a, "orders", p)
        target = read_partition(b, "a.orders", p, with_offsets=True)
        assert [r[1:] for r in target] == source, f"orders[{p}] incomplete or reordered"
        upstream = committed[("orders", p)][0]
        downstream = translated[("a.orders", p)]
        # Exact: every target record before the translated offset is a source record the
        # group had consumed, and the one at it is the first it had not.
        before = [r for r in target if r[0] < downstream]
        assert len(before) == upstream, f"orders[{p}]: {upstream} -> {downstream}"
        if upstream < len(source):
            assert next(r for r in target if r[0] >= downstream)[1:] == source[upstream]
