"""The kafka_range data source in an in-process Spark session (local[2])."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.kafka import config_file, create_topic, produce, read_partition, varied_records
from mirrorflow.config import load_config
from mirrorflow.plan import plan_run
from mirrorflow.run import commit_step
from mirrorflow.spark.job import mirror

pytestmark = [pytest.mark.broker, pytest.mark.spark]

# The schema of Spark's built-in Kafka source with includeHeaders=true.
SPARK_KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")


def test_schema_and_rows_match_the_builtin_kafka_source(spark, two_clusters) -> None:
    a = two_clusters["a"]
    create_topic(a, "orders", 2)
    records = varied_records(400)
    produce(a, "orders", records, 2)
    ranges = [{"topic": "orders", "partition": p, "start": 0, "end": 200} for p in (0, 1)]
    frame = (spark.read.format("kafka_range").option("kafka.bootstrap.servers", a)
             .option("ranges", json.dumps(ranges)).option("maxRecordsPerPartition", 64).load())
    assert frame.schema.simpleString() == SPARK_KAFKA_SCHEMA
    assert frame.rdd.getNumPartitions() == 8  # 200 offsets in 64-record splits, 2 partitions
    rows = frame.orderBy("partition", "offset").collect()
    assert len(rows) == 400
    by_part = {p: [r for r in rows if r.partition == p] for p in (0, 1)}
    for p in (0, 1):
        expected = records[p::2]
        got = [(r.key, r.value, [(h.key, h.value) for h in r.headers] if r.headers else None,
                int(r.timestamp.timestamp() * 1000 + 0.5)) for r in by_part[p]]
        assert [bytes(k) if k is not None else None for k, *_ in got] == [e[0] for e in expected]
        assert [(bytes(v) if v is not None else None) for _, v, *_ in got] == [
            e[1] for e in expected]
        assert [(h and [(k, bytes(v) if v is not None else None) for k, v in h])
                for _, _, h, _ in got] == [e[2] for e in expected]
        assert [ts for *_, ts in got] == [e[3] for e in expected]
        assert [r.offset for r in by_part[p]] == list(range(200))
        assert {r.timestampType for r in by_part[p]} == {0}


def test_range_beyond_the_end_fails_naming_the_partition(spark, two_clusters) -> None:
    a = two_clusters["a"]
    create_topic(a, "short", 1)
    produce(a, "short", varied_records(5), 1)
    ranges = [{"topic": "short", "partition": 0, "start": 0, "end": 50}]
    frame = (spark.read.format("kafka_range").option("kafka.bootstrap.servers", a)
             .option("ranges", json.dumps(ranges)).load())
    with pytest.raises(Exception, match=r"short\[0\]: the partition ends at 5"):
        frame.collect()


def test_one_mib_values_survive_the_mirror_exactly(spark, two_clusters, tmp_path: Path) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "blobs", 1)
    big = [(f"k{i}".encode(), bytes([i]) * (1024 * 1024), [("h", b"v")], 1_700_000_000_000 + i)
           for i in range(6)]
    produce(a, "blobs", big, 1, **{"message.max.bytes": 4_000_000})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true")
    config = load_config(path)
    flow = config.flow("a->b")
    plan, _ = plan_run(config, flow, "blobs-run")
    mirror(spark, str(path), flow, plan)  # the job's own code path, in this session
    result = commit_step(config, flow, plan)
    assert result.records == 6
    assert read_partition(b, "a.blobs", 0) == read_partition(a, "blobs", 0) == big
