"""Records up to the remote topic's max.message.bytes mirror, whatever shares their write
slot; a larger one fails the run naming its offset, its size and the limit (through
spark-submit too: test_job_failures)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import record_size
from helpers.kafka import (
    alter_topic,
    config_file,
    create_topic,
    produce,
    read_partition,
    varied_records,
)
from mirrorflow.config.loader import load_config
from mirrorflow.run import run_cycle
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.write_task import RecordTooLargeError

pytestmark = [pytest.mark.broker, pytest.mark.spark]

LIMIT = 100_000


def sized(total: int, key: bytes | None = b"k") -> tuple:
    """A record whose batch of its own is exactly ``total`` bytes (incompressible)."""
    value = os.urandom(total)
    while record_size.batch_size(key, value, None) > total:
        value = value[:-1]
    assert record_size.batch_size(key, value, None) == total
    return (key, value, None, 1_700_000_000_000 + total)


def positions(path: Path) -> dict:
    return OffsetStore(load_config(path).cluster("b"), "a").positions()


def test_a_record_batch_of_one_is_sized_as_kafka_encodes_it() -> None:
    # 61 (batch) + 1 (length) + attributes, deltas (3) + key (1 + 1) + value (1 + 3)
    # + header count (1) + header ("h": 1 + 1, null value: 1).
    assert record_size.batch_size(b"k", b"abc", [("h", None)]) == 61 + 1 + 3 + 2 + 4 + 1 + 3
    assert record_size.batch_size(None, None, None) == 61 + 1 + 3 + 1 + 1 + 1
    assert record_size.varint_size(63) == 1 and record_size.varint_size(64) == 2
    assert record_size.varint_size(-1) == 1


def test_a_large_record_mirrors_beside_the_heartbeats_on_a_flows_first_run(
        two_clusters, tmp_path: Path) -> None:
    """The case of issue 67, through ``mirrorflow run`` (spark-submit to local[*]): a
    1,500,000-byte record among ordinary ones, on the flow's first run (its remote topic
    created then), in one write slot with the heartbeats topic (Kafka's default limit).
    The slot's producer took the smallest limit of its topics for every record."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1, {"max.message.bytes": "3000000"})
    records = varied_records(50)
    records += [(None, f"v{i}".encode(), None, 1_700_000_001_000 + i) for i in range(10)]
    records += [(f"k{i}".encode(), None, None, 1_700_000_002_000 + i) for i in range(10)]
    records += [(f"h{i}".encode(), b"x", [("a", None), ("a", b""), ("a", b"1"), ("a", b"1")],
                 1_700_000_003_000 + i) for i in range(10)]
    records += [(b"big", os.urandom(1_500_000), None, 1_700_000_004_000)]
    records += varied_records(20, 100)
    produce(a, "orders", records, 1, **{"message.max.bytes": 4_000_000})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true")
    done = subprocess.run([sys.executable, "-m", "mirrorflow.cli", "run", str(path), "--flow",
                           "a->b"], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "orders[0] -> a.orders[0]: offsets 0..100, 101 written" in done.stdout
    assert read_partition(b, "a.orders", 0) == records
    assert positions(path)[("orders", 0)] == 100


def test_the_limit_holds_at_its_boundary_and_follows_the_source(spark, two_clusters,
                                                                tmp_path: Path) -> None:
    """A record exactly at the remote topic's limit is written; one byte more fails the
    run naming its offset, size and the limit, committing nothing; with the source's
    limit raised, config sync raises the remote's and the pending plan goes on."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1, {"max.message.bytes": str(LIMIT + 1)})
    create_topic(b, "a.orders", 1, {"max.message.bytes": str(LIMIT)})
    at_limit = [*varied_records(5), sized(LIMIT), *varied_records(5, 5)]
    for part in (at_limit[:5], at_limit[5:6], at_limit[6:]):  # the large one a batch alone
        produce(a, "orders", part, 1, **{"message.max.bytes": 400_000})
    flows = "a->b.enabled = true\nemit.heartbeats.enabled = false"
    path = config_file(tmp_path / "mm2.properties", two_clusters, flows,
                       "sync.topic.configs.enabled = false\n")
    first = run_cycle(path, "a->b", spark=spark)
    assert first.records == 11 and first.validation["success"]
    over = sized(LIMIT + 1)
    produce(a, "orders", varied_records(3, 20), 1)
    produce(a, "orders", [over], 1, **{"message.max.bytes": 400_000})
    with pytest.raises(RecordTooLargeError, match=(
            rf"^cannot write orders\[0\] offset 14 to a\.orders: the record is {LIMIT + 1} "
            rf"bytes as a record batch, larger than a\.orders's max\.message\.bytes = {LIMIT} "
            r"on cluster 'b'; raise it there \(config sync copies the source topic's\), then "
            r"rerun$")):
        run_cycle(path, "a->b", spark=spark)
    assert positions(path) == {("orders", 0): 10}
    assert read_partition(b, "a.orders", 0) == at_limit  # the failed attempt's is aborted

    path = config_file(tmp_path / "mm2.properties", two_clusters, flows)  # config sync on
    again = run_cycle(path, "a->b", spark=spark)
    assert again.resumed and again.records == 4 and again.validation["success"]
    assert read_partition(b, "a.orders", 0) == [*at_limit, *varied_records(3, 20), over]
    alter_topic(a, "orders", {"max.message.bytes": None})  # leave the topic as found
