"""A transactional source on Apache Kafka, mirrored as configured by default (the source
read ``read_committed``): aborted records never reach the target, a plan ends at the last
stable offset (never waiting on an open transaction), and the next run continues exactly
there, with the open transaction's records once it commits and none once it aborts."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from helpers.kafka import config_file, create_topic, read_partition
from mirrorflow.config.loader import load_config
from mirrorflow.run import run_cycle
from mirrorflow.source.offsets import OffsetStore

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def transaction(producer: Producer, values: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce("payments", value, key=value)
    producer.flush(10)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


def test_read_committed_source_with_aborted_and_open_transactions(spark, two_clusters,
                                                                  tmp_path: Path) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "payments", 1)
    settled = Producer({"bootstrap.servers": a, "transactional.id": "payments-app"})
    settled.init_transactions(30)
    transaction(settled, [b"p0", b"p1"], commit=True)    # 0-1, marker 2
    transaction(settled, [b"x0", b"x1"], commit=False)   # 3-4, abort marker 5
    transaction(settled, [b"p2"], commit=True)           # 6, marker 7
    # Another producer's transaction stays open across the first run: offsets 8-9.
    pending = Producer({"bootstrap.servers": a, "transactional.id": "payments-pending"})
    pending.init_transactions(30)
    pending.begin_transaction()
    for value in (b"q0", b"q1"):
        pending.produce("payments", value, key=value)
    pending.flush(10)
    # A third producer's transaction is open across the first run too, then aborted: 10.
    doomed = Producer({"bootstrap.servers": a, "transactional.id": "payments-doomed"})
    doomed.init_transactions(30)
    doomed.begin_transaction()
    doomed.produce("payments", b"z0", key=b"z0")
    doomed.flush(10)
    transaction(settled, [b"p3"], commit=True)           # 11, marker 12: after the open ones
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")

    first = run_cycle(path, "a->b", spark=spark)

    (part,) = first.partitions
    # The plan stops at the last stable offset (8, the open transaction's first record).
    assert (part.planned_start, part.planned_end, part.records) == (0, 8, 3)
    assert [v for _, v, *_ in read_partition(b, "a.payments", 0)] == [b"p0", b"p1", b"p2"]
    assert OffsetStore(load_config(path).cluster("b"), "a").positions() == {("payments", 0): 7}
    assert first.validation["success"]
    assert first.source_isolation == "read_committed"

    pending.commit_transaction(30)                       # q0 q1 committed, marker 13
    doomed.abort_transaction(30)                         # z0 aborted, marker 14
    second = run_cycle(path, "a->b", spark=spark)

    (part,) = second.partitions
    assert (part.planned_start, part.planned_end, part.records) == (8, 15, 3)
    assert [v for _, v, *_ in read_partition(b, "a.payments", 0)] == [
        b"p0", b"p1", b"p2", b"q0", b"q1", b"p3"]
    assert second.validation["success"]
