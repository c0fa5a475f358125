"""Spark's own Kafka source over planned ranges, and the mirror through it, in an
in-process Spark session (local[2]) with the connector from jvm/pom.xml."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from helpers.kafka import config_file, create_topic, produce, read_partition, topics, varied_records
from mirrorflow.config.loader import load_config, parse_config
from mirrorflow.kafka import clients
from mirrorflow.source.plan import plan_run
from mirrorflow.spark.kafka_source import kafka_options, read_ranges, reader_group
from mirrorflow.spark.mirror import mirror

pytestmark = [pytest.mark.broker, pytest.mark.spark]

# Spark's Kafka source with includeHeaders=true: the schema the writer consumes.
SPARK_KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")


def test_pyspark_and_the_connector_are_the_same_spark_version(spark) -> None:
    import pyspark

    from mirrorflow.spark.session import connector_jars

    names = [Path(j).name for j in connector_jars()]
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert spark.version == pyspark.__version__ == "4.2.0"


def test_exact_ranges_with_headers_nulls_and_timestamps(spark, two_clusters) -> None:
    a = two_clusters["a"]
    create_topic(a, "orders", 2)
    records = varied_records(400)
    produce(a, "orders", records, 2)
    cluster = parse_config(f"clusters = a\na.bootstrap.servers = {a}\n").cluster("a")
    frame = read_ranges(spark, cluster, [("orders", 0, 10, 150), ("orders", 1, 0, 200)],
                        topic_ids={})
    assert frame.schema.simpleString() == SPARK_KAFKA_SCHEMA
    assert frame.rdd.getNumPartitions() == 2  # one input partition per range
    # The connector's DataSource V2 reader (session.SPARK_CONF), not the V1 relation.
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "KafkaSourceProvider$KafkaScan" in plan and "ExistingRDD" not in plan, plan
    rows = frame.orderBy("partition", "offset").collect()
    by_part = {p: [r for r in rows if r.partition == p] for p in (0, 1)}
    assert [r.offset for r in by_part[0]] == list(range(10, 150))
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
        cluster = parse_config(f"clusters = a\na.bootstrap.servers = {a}\n"
                               f"a.consumer.isolation.level = {level}\n").cluster("a")
        assert kafka_options(cluster)["kafka.isolation.level"] == level
        rows = read_ranges(spark, cluster, [("txn", 0, 0, 8)], topic_ids={}) \
            .orderBy("offset").collect()
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
    frame = read_ranges(spark, cluster, [("orders", 0, 0, 1)], topic_ids={})
    assert "planted" not in frame._jdf.queryExecution().toString()
    # How Spark renders data source options (UI, event log, explain): with our patterns.
    jvm = spark.sparkContext._jvm
    shown = spark._jsparkSession.sessionState().conf().redactOptions(
        jvm.PythonUtils.toScalaMap(options)).toString()
    assert "planted" not in shown
    assert "kafka.sasl.jaas.config -> *********(redacted)" in shown
    assert "kafka.ssl.key.password -> *********(redacted)" in shown


def test_reads_reuse_sparks_consumers_but_never_serve_an_old_incarnations_records(
        spark, two_clusters) -> None:
    """Reads with one flow's group id (reader_group) share Spark's pooled consumers and the
    records a fetch brought past a range's end: the second read of a topic is served the
    records the first one fetched. After the topic is deleted and created again its new id
    makes a new group id, and the read returns the new incarnation's records."""
    from confluent_kafka.admin import AdminClient

    a = two_clusters["a"]
    cluster = parse_config(f"clusters = a\na.bootstrap.servers = {a}\n").cluster("a")
    # The pool's room and keep-alive mirrorflow gives the servers it starts; the records a
    # poll brought past a range's end, 10 s.
    assert [spark.conf.get(f"spark.kafka.consumer.{k}") for k in (
        "cache.capacity", "cache.timeout", "fetchedData.cache.timeout",
        "fetchedData.cache.evictorThreadRunInterval")] == ["2048", "15m", "10s", "5s"]

    def values(start: int, end: int, ids: dict[str, str]) -> list[bytes]:
        rows = read_ranges(spark, cluster, [("reborn", 0, start, end)], topic_ids=ids)
        return [bytes(r.value) for r in rows.orderBy("offset").collect()]

    create_topic(a, "reborn", 1)
    produce(a, "reborn", [(None, b"old%d" % i, None, 1_700_000_000_000) for i in range(6)], 1)
    old = clients.topic_ids(cluster, ["reborn"])
    assert values(0, 3, old) == [b"old0", b"old1", b"old2"]  # one fetch brings all six
    admin = AdminClient({"bootstrap.servers": a})
    admin.delete_topics(["reborn"])["reborn"].result(30)
    deadline = time.monotonic() + 30
    while "reborn" in topics(a) and time.monotonic() < deadline:
        time.sleep(0.2)
    create_topic(a, "reborn", 1)
    produce(a, "reborn", [(None, b"new%d" % i, None, 1_700_000_000_000) for i in range(6)], 1)
    new = clients.topic_ids(cluster, ["reborn"])
    assert new["reborn"] != old["reborn"]
    assert values(3, 6, new) == [b"new3", b"new4", b"new5"]
    # What the old id's group would be served: the pooled records of the first fetch.
    assert values(3, 6, old) == [b"old3", b"old4", b"old5"]


def test_reader_group_counts_settings_and_topic_ids_and_secrets_only_as_a_tag() -> None:
    options = kafka_options(parse_config(
        "clusters = a\na.bootstrap.servers = a:9092\n"
        "a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="mirror" password="first-planted";\n').cluster("a"))
    ids = {"orders": "id-1", "payments": "id-2"}
    group = reader_group(options, ids)
    assert group.startswith("mirrorflow-reader-") and "planted" not in group
    assert reader_group(dict(reversed(options.items())), dict(reversed(ids.items()))) == group
    rotated = {**options, "kafka.sasl.jaas.config": options["kafka.sasl.jaas.config"]
               .replace("first-planted", "second-planted")}
    # A new password changes only the last four hex digits (a 16-bit tag).
    assert reader_group(rotated, ids)[:-4] == group[:-4]
    assert reader_group(rotated, ids) != group
    assert len(group.rsplit("-", 1)[1]) == 4
    for other in ({**options, "kafka.bootstrap.servers": "b:9092"},
                  {**options, "kafka.isolation.level": "read_uncommitted"}):
        assert reader_group(other, ids)[:-5] != group[:-5]
    assert reader_group(options, {**ids, "orders": "id-3"}) != group
    assert reader_group(options, {"orders": "id-1"}) != group
    plain = kafka_options(parse_config("clusters = a\na.bootstrap.servers = a:9092\n")
                          .cluster("a"))
    assert len(reader_group(plain, ids).split("-")) == 3  # no secrets, no tag


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
        "auto.include.jmx.reporter")} == {
        "receive.buffer.bytes": "-1", "fetch.max.wait.ms": "0", "enable.metrics.push": "false",
        "auto.include.jmx.reporter": "false"}
    plain = kafka_options(parse_config("clusters = a\na.bootstrap.servers = a:9092\n")
                          .cluster("a"))
    assert (plain["kafka.max.poll.records"], plain["kafka.max.partition.fetch.bytes"]) == (
        "20000", "8388608")
