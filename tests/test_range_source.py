"""mirrorflow's Kafka range source (``jvm/connector``, format ``mirrorflow-kafka``) over
planned ranges on real brokers, and the mirror through it, in an in-process Spark session
(local[2])."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from helpers.kafka import (
    config_file,
    create_topic,
    delete_records,
    produce,
    read_partition,
    varied_records,
)
from mirrorflow.config.loader import load_config, parse_config
from mirrorflow.source.plan import plan_run
from mirrorflow.spark.kafka_source import (
    RangeReadError,
    grouped,
    kafka_options,
    read_groups,
    read_tasks,
)
from mirrorflow.spark.mirror import mirror, worker_error

pytestmark = [pytest.mark.broker, pytest.mark.spark]

# Spark's Kafka source schema with includeHeaders=true, which the range source keeps.
SPARK_KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")


def cluster_of(bootstrap: str, extra: str = ""):
    return parse_config(f"clusters = a\na.bootstrap.servers = {bootstrap}\n{extra}").cluster("a")


def test_the_range_source_runs_the_projects_kafka_client_in_the_pinned_spark(spark) -> None:
    import pyspark

    from mirrorflow.jvm import kafka_version
    from mirrorflow.spark.session import connector_jars

    names = sorted(Path(j).name for j in connector_jars())
    assert names == [f"kafka-clients-{kafka_version()}.jar", "mirrorflow-connector-0.jar"]
    assert spark.version == pyspark.__version__ == "4.2.0"


def test_coalesced_groups_are_read_in_a_task_per_core_each_partition_once(
        spark, two_clusters) -> None:
    a = two_clusters["a"]
    create_topic(a, "orders", 8)
    produce(a, "orders", varied_records(800), 8)
    cluster = cluster_of(a)
    groups = [[("orders", p, 0, 100)] for p in range(8)]
    assert read_groups(spark, cluster, groups).rdd.getNumPartitions() == 8
    merged = read_groups(spark, cluster, groups, coalesce=True)
    assert merged.rdd.getNumPartitions() == 2  # local[2]: Spark's default parallelism
    assert sorted((r.partition, r.offset) for r in merged.collect()) == [
        (p, o) for p in range(8) for o in range(100)]


def test_exact_ranges_with_headers_nulls_and_timestamps(spark, two_clusters) -> None:
    a = two_clusters["a"]
    create_topic(a, "orders", 2)
    records = varied_records(400)
    produce(a, "orders", records, 2)
    cluster = cluster_of(a)
    frame = read_groups(spark, cluster, [[("orders", 0, 10, 150)], [("orders", 1, 0, 200)]])
    assert frame.schema.simpleString() == SPARK_KAFKA_SCHEMA
    assert frame.rdd.getNumPartitions() == 2  # one input partition per group
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "BatchScan" in plan and "mirrorflow-kafka [2 groups, 2 ranges]" in plan, plan
    one = read_groups(spark, cluster, [[("orders", 0, 10, 150), ("orders", 1, 0, 200)]])
    assert one.rdd.getNumPartitions() == 1  # one task, one consumer, both partitions
    rows = one.collect()
    by_part = {p: [r for r in rows if r.partition == p] for p in (0, 1)}
    assert [r.offset for r in by_part[0]] == list(range(10, 150))  # each in offset order
    assert [r.offset for r in by_part[1]] == list(range(200))
    for p, first in ((0, 10), (1, 0)):
        expected = records[p::2][first:first + len(by_part[p])]
        got = [(None if r.key is None else bytes(r.key),
                None if r.value is None else bytes(r.value),
                [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []]
                or None,
                int(r.timestamp.timestamp() * 1000 + 0.5)) for r in by_part[p]]
        assert got == expected
        assert {r.timestampType for r in by_part[p]} == {0}


def test_a_digests_read_sums_each_partition_as_the_proofs_sql_sums_its_rows(
        spark, two_clusters) -> None:
    """The proof's target side summed in the reading tasks (``digests``) equals Spark
    SQL's sums of the same records read as rows, with and without timestamps; a partition
    read in two pieces by two tasks has a row from each."""
    from pyspark.sql import functions as F

    from mirrorflow.quality.digests import record_digest

    a = two_clusters["a"]
    create_topic(a, "summed", 2)
    produce(a, "summed", varied_records(300), 2)
    groups = [[("summed", 0, 5, 80), ("summed", 1, 0, 150)], [("summed", 0, 80, 150)]]
    cluster = cluster_of(a)
    sums = read_groups(spark, cluster, groups, digests=True)
    assert sums.columns == ["topic", "partition", "records", "xor", "xor_no_ts", "first", "last"]
    rows = sorted((tuple(r) for r in sums.collect()), key=lambda r: (r[1], r[5]))
    assert [(r[1], r[2], r[5], r[6]) for r in rows] == [(0, 75, 5, 79), (0, 70, 80, 149),
                                                       (1, 150, 0, 149)]
    summed: dict[int, list[int]] = {}
    for _, partition, records, xor, xor_no_ts, *_ in rows:
        n, x, y = summed.get(partition, (0, 0, 0))
        summed[partition] = [n + records, x ^ xor, y ^ xor_no_ts]
    sql = (read_groups(spark, cluster, groups).groupBy("partition")
           .agg(F.count("*"),
                F.bit_xor(F.xxhash64(record_digest(F, F.lit(True)), "offset")),
                F.bit_xor(F.xxhash64(record_digest(F, F.lit(False)), "offset")))
           .collect())
    assert {r[0]: list(r[1:]) for r in sql} == summed
    assert summed[0][1] != summed[0][2]  # the timestamps count in one of them


def test_one_task_reads_many_partitions_exactly_with_one_consumer(spark, two_clusters) -> None:
    """300 partitions of 3 records in one group: every record once, none past its end."""
    a = two_clusters["a"]
    create_topic(a, "many", 300)
    produce(a, "many", [(None, f"v{i}".encode(), None, 1_700_000_000_000 + i)
                        for i in range(1200)], 300)
    frame = read_groups(spark, cluster_of(a), [[("many", p, 1, 4) for p in range(300)]])
    assert frame.rdd.getNumPartitions() == 1
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in frame.collect())
    assert got == [(p, o, f"v{p + 300 * o}".encode()) for p in range(300) for o in (1, 2, 3)]


def test_a_range_below_the_log_start_or_past_its_end_reads_what_the_log_holds(
        spark, two_clusters) -> None:
    """Retention removed offsets 0..29: the read goes on from the log start (the writer and
    the proof name the gap); a range planned past the log's end ends there."""
    a = two_clusters["a"]
    create_topic(a, "kept", 2)
    produce(a, "kept", varied_records(200), 2)
    delete_records(a, "kept", 0, 30)
    frame = read_groups(spark, cluster_of(a), [[("kept", 0, 10, 60), ("kept", 1, 90, 130)]])
    got = sorted((r.partition, r.offset) for r in frame.collect())
    assert got == [(0, o) for o in range(30, 60)] + [(1, o) for o in range(90, 100)]


def test_a_deleted_topic_fails_the_read_naming_it(spark, two_clusters) -> None:
    """The JVM's RangeReadException, as the mirror raises it again: RangeReadError with its
    one-line message."""
    from py4j.protocol import Py4JJavaError

    a = two_clusters["a"]
    with pytest.raises(Py4JJavaError) as failed:
        read_groups(spark, cluster_of(a), [[("absent", 0, 0, 5)]]).collect()
    error = worker_error(failed.value)
    assert type(error) is RangeReadError
    assert str(error) == ("source topic 'absent' partition 0 no longer exists (reading topic "
                          "'absent' partition 0 [0, 5) at 0)")


def test_groups_deal_ranges_and_their_pieces_without_a_partition_twice() -> None:
    ranges = [("t", 0, 0, 250), ("t", 1, 0, 10), ("u", 0, 5, 6), ("u", 1, 7, 7)]
    tasks = read_tasks([250, 10, 1, 0], 1, 100)
    assert tasks == 3
    groups = grouped(ranges, tasks, 100)
    assert sorted(r for g in groups for r in g) == [
        ("t", 0, 0, 100), ("t", 0, 100, 200), ("t", 0, 200, 250), ("t", 1, 0, 10),
        ("u", 0, 5, 6), ("u", 1, 7, 7)]
    assert all(len({r[:2] for r in g}) == len(g) for g in groups)
    assert len(groups) == 3
    assert grouped(ranges, 1) == [[("t", 0, 0, 250), ("t", 1, 0, 10), ("u", 0, 5, 6),
                                   ("u", 1, 7, 7)]]
    # Fewer tasks than one range's pieces: a group more for each piece (never one
    # partition twice in a group).
    assert grouped([("t", 0, 0, 30)], 2, 10) == [[("t", 0, 0, 10)], [("t", 0, 10, 20)],
                                                 [("t", 0, 20, 30)]]


def test_read_committed_hides_aborted_records_and_uncommitted_shows_them(spark,
                                                                          two_clusters) -> None:
    a = two_clusters["a"]
    create_topic(a, "txn", 1)
    producer = Producer({"bootstrap.servers": a, "transactional.id": "test-txn"})
    producer.init_transactions(30)
    for values, commit in (([b"c0", b"c1"], True), ([b"a0", b"a1"], False), ([b"c2"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce("txn", value)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    # offsets: c0 c1 (0-1), marker (2), a0 a1 (3-4), abort marker (5), c2 (6), marker (7)
    for level, expected in (("read_committed", [(0, b"c0"), (1, b"c1"), (6, b"c2")]),
                            ("read_uncommitted", [(0, b"c0"), (1, b"c1"), (3, b"a0"),
                                                  (4, b"a1"), (6, b"c2")])):
        cluster = cluster_of(a, f"a.consumer.isolation.level = {level}\n")
        assert kafka_options(cluster)["kafka.isolation.level"] == level
        rows = read_groups(spark, cluster, [[("txn", 0, 0, 8)]]).orderBy("offset").collect()
        assert [(r.offset, bytes(r.value)) for r in rows] == expected, level


def test_secrets_in_kafka_options_are_redacted_where_spark_shows_options(spark,
                                                                        two_clusters) -> None:
    a = two_clusters["a"]
    create_topic(a, "orders", 1)
    cluster = parse_config(
        f"clusters = a\na.bootstrap.servers = {a}\n"
        "a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="mirror" password="s3cr3t-planted";\n'
        "a.ssl.key.password = k3y-planted\n").cluster("a")
    options = kafka_options(cluster)
    assert 's3cr3t-planted' in options["kafka.sasl.jaas.config"]  # the client needs it
    frame = read_groups(spark, cluster, [[("orders", 0, 0, 1)]])
    assert "planted" not in frame._jdf.queryExecution().toString()
    # How Spark renders data source options (UI, event log, explain): with our patterns.
    jvm = spark.sparkContext._jvm
    shown = spark._jsparkSession.sessionState().conf().redactOptions(
        jvm.PythonUtils.toScalaMap(options)).toString()
    assert "planted" not in shown
    assert "kafka.sasl.jaas.config -> *********(redacted)" in shown
    assert "kafka.ssl.key.password -> *********(redacted)" in shown


def test_one_mib_values_survive_the_mirror_exactly(spark, two_clusters, tmp_path: Path) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "blobs", 1, {"max.message.bytes": "4000000"})
    big = [(f"k{i}".encode(), bytes([i]) * (1024 * 1024), [("h", b"v")], 1_700_000_000_000 + i)
           for i in range(6)]
    produce(a, "blobs", big, 1, **{"message.max.bytes": 4_000_000})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    config = load_config(path)
    flow = config.flow("a->b")
    plan, _ = plan_run(config, flow, "blobs-run")
    result = mirror(spark, config, flow, plan)  # the job's own code path, in this session
    assert [(r["topic"], r["records"], r["records_written"]) for r in result["ranges"]] == [
        ("blobs", 6, 6)]
    assert read_partition(b, "a.blobs", 0) == read_partition(a, "blobs", 0) == big


def test_read_defaults_yield_to_the_clusters_own_settings() -> None:
    cluster = parse_config("clusters = a\na.bootstrap.servers = a:9092\n"
                           "a.consumer.max.partition.fetch.bytes = 1048576\n"
                           "a.consumer.max.poll.records = 800\n").cluster("a")
    options = kafka_options(cluster)
    assert options["kafka.max.partition.fetch.bytes"] == "1048576"
    assert options["kafka.max.poll.records"] == "800"
    assert {k: options[f"kafka.{k}"] for k in (
        "receive.buffer.bytes", "fetch.max.wait.ms", "enable.metrics.push",
        "metric.reporters")} == {
        "receive.buffer.bytes": "-1", "fetch.max.wait.ms": "0", "enable.metrics.push": "false",
        "metric.reporters": ""}
    plain = kafka_options(parse_config("clusters = a\na.bootstrap.servers = a:9092\n")
                          .cluster("a"))
    assert (plain["kafka.max.poll.records"], plain["kafka.max.partition.fetch.bytes"]) == (
        "20000", "8388608")
