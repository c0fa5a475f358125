"""The JVM slot writer (``jvm/connector``'s ``mirrorflow-mirror``) on real brokers: spans and
resume positions in the formats every attempt reads, zombies fenced, retention named, a
plan half-written by the first (librdkafka) writer finished exactly. Its units are pinned
by the JUnit tests of ``dev.mirrorflow.kafka.write``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from py4j.protocol import Py4JJavaError

from helpers.kafka import (
    config_file,
    create_topic,
    delete_records,
    produce,
    produce_in_transactions,
    read_partition,
    resume_position,
    varied_records,
)
from mirrorflow.config.loader import load_config
from mirrorflow.errors import DataLossError
from mirrorflow.lease import FlowLease
from mirrorflow.source import ledger
from mirrorflow.source.plan import plan_run
from mirrorflow.source.write_task import WriteError
from mirrorflow.spark.mirror import MIRROR_FORMAT, mirror_options, worker_error, write_tasks

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def flow_file(tmp_path: Path, clusters: dict[str, str], extra: str = "") -> Path:
    return config_file(tmp_path / "mm2.properties", clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n" + extra)


def orders_flow(tmp_path: Path, clusters: dict[str, str], n: int) -> tuple[Path, list]:
    """``n`` records in a's orders (1 partition), an empty a.orders on b; the flow's file
    and the records."""
    create_topic(clusters["a"], "orders", 1)
    create_topic(clusters["b"], "a.orders", 1)
    records = varied_records(n)
    produce(clusters["a"], "orders", records, 1)
    return flow_file(tmp_path, clusters), records


def write(spark, path: Path, run_id: str = "run-1", **changes) -> list[dict]:
    """Plan the flow and write its ranges (of ``orders``) in one write slot with the JVM
    writer (the tasks' fields changed by ``changes``); the writer's results."""
    import json

    config = load_config(path)
    flow = config.flow("a->b")
    with FlowLease(config, flow, run_id):
        plan, _ = plan_run(config, flow, run_id)
        ledger.spans_store(config.cluster("b"), "a").ensure()
        tasks = {(t.topic, t.partition): replace(t, slot=0, **changes)
                 for t in write_tasks(flow, plan)}
        options = mirror_options(config, flow, tasks, [[
            (t.topic, t.partition, t.start, t.end) for t in tasks.values()]])
        try:
            rows = spark.read.format(MIRROR_FORMAT).options(**options).load().collect()
        except Py4JJavaError as exc:
            raise worker_error(exc) from None
    return [json.loads(row["result"]) for row in rows]


def test_spans_and_the_resume_position_record_where_each_record_went(spark, two_clusters,
                                                                     tmp_path: Path) -> None:
    """Source offsets with gaps (each transaction's marker), two writer transactions of
    300 and 200 records: two spans, a sync wherever the distance changes, the resume
    position with the plan's id, every record once on the target."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    records = varied_records(500)
    produce_in_transactions(a, "orders", records, 1, per_txn=100)  # a marker every 101
    path = flow_file(tmp_path, two_clusters)
    (result,) = write(spark, path, chunk_records=300)
    assert result["transactional"] and result["records_written"] == 500
    assert read_partition(b, "a.orders", 0) == records
    spans = ledger.read_spans(load_config(path).cluster("b"), "a")[("orders", 0)]
    assert [(s.upstream_first, s.upstream_last, s.downstream_first, s.downstream_last,
             s.records) for s in spans] == [(0, 301, 0, 299, 300), (303, 503, 301, 500, 200)]
    assert spans[0].syncs[:3] == ((0, 0), (101, 100), (202, 200))
    assert spans[1].syncs == ((303, 301), (404, 401))
    assert [json_of(s) for s in spans] == result["spans"]
    assert resume_position(b, "a", "a.orders", 0) == (spans[0].plan_id, 504)


def json_of(span: ledger.Span) -> str:
    return span.value().decode()


def test_a_transaction_of_many_ranges_writes_one_span_record(spark, two_clusters,
                                                            tmp_path: Path) -> None:
    """Four ranges in one transaction: one record in the spans topic, keyed by the plan,
    holding a span of each range (a record per range left a flow's spans topic with one
    tombstone per range and run for a day); the commit tombstones it."""
    from mirrorflow.kafka.internal_topics import read_log

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 4)
    create_topic(b, "a.orders", 4)
    produce(a, "orders", varied_records(40), 4)
    path = flow_file(tmp_path, two_clusters)
    results = write(spark, path)
    assert sorted((r["partition"], r["records_written"]) for r in results) == [
        (0, 10), (1, 10), (2, 10), (3, 10)]
    target = load_config(path).cluster("b")
    (record,) = read_log(target, ledger.spans_topic("a"))
    spans = ledger.read_spans(target, "a")
    plan_id = spans[("orders", 0)][0].plan_id
    first = ledger.decode_spans(record.value)[0]
    assert record.key == f"{plan_id}/orders/{first.partition}/a.orders/0".encode()
    assert sorted((tp, [(s.upstream_first, s.upstream_last, s.records) for s in found])
                  for tp, found in spans.items()) == [
        (("orders", p), [(0, 9, 10)]) for p in range(4)]
    ledger.drop_spans(target, "a", plan_id)
    assert ledger.read_spans(target, "a") == {}


def test_a_zombie_of_the_slot_is_fenced_and_its_records_never_seen(spark, two_clusters,
                                                                   tmp_path: Path) -> None:
    """An earlier attempt still holding an open transaction of the slot's id (the first
    writer's client, librdkafka): the JVM writer's initTransactions aborts it and fences
    it; its commit fails and read_committed readers see only the writer's records."""
    from confluent_kafka import KafkaException

    b = two_clusters["b"]
    path, records = orders_flow(tmp_path, two_clusters, 50)
    zombie = Producer({"bootstrap.servers": b, "transactional.id": "mirrorflow|a->b|write-0"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("a.orders", b"zombie", partition=0)
    zombie.flush(10)
    (result,) = write(spark, path)
    assert result["records_written"] == 50
    with pytest.raises(KafkaException, match="fenced by a newer instance"):
        zombie.commit_transaction(10)
    assert read_partition(b, "a.orders", 0) == records


def test_records_lost_to_retention_fail_the_write_naming_them_or_are_a_gap(
        spark, two_clusters, tmp_path: Path) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    path, _ = orders_flow(tmp_path, two_clusters, 100)
    config = load_config(path)
    with FlowLease(config, config.flow("a->b"), "planned"):
        plan_run(config, config.flow("a->b"), "planned")  # 0..99, before the loss
    delete_records(a, "orders", 0, 30)
    with pytest.raises(DataLossError, match=(
            r"^source orders\[0\]: offsets 0\.\.29 of the planned range 0\.\.99 were removed by "
            r"retention before they were mirrored; nothing after them was written\. Set "
            r"a->b\.failOnDataLoss = false to skip them$")):
        write(spark, path, run_id="planned")
    assert read_partition(b, "a.orders", 0) == []
    (result,) = write(spark, path, run_id="planned", fail_on_data_loss=False)
    assert result["gaps"] == [[0, 30]] and result["records_written"] == 70


def test_a_missing_spans_topic_fails_the_write_by_name(spark, two_clusters,
                                                       tmp_path: Path) -> None:
    a = two_clusters["a"]
    create_topic(a, "orders", 1)
    create_topic(two_clusters["b"], "a.orders", 1)
    produce(a, "orders", varied_records(10), 1)
    path = flow_file(tmp_path, two_clusters)
    config = load_config(path)
    with FlowLease(config, config.flow("a->b"), "run-1"):
        plan, _ = plan_run(config, config.flow("a->b"), "run-1")
        (task,) = write_tasks(config.flow("a->b"), plan)
        options = mirror_options(config, config.flow("a->b"), {("orders", 0): task},
                                 [[("orders", 0, 0, 10)]])
        with pytest.raises(Py4JJavaError) as failed:
            spark.read.format(MIRROR_FORMAT).options(**options).load().collect()
    error = worker_error(failed.value)
    assert type(error) is WriteError
    assert str(error).startswith("writing orders[0] -> a.orders[0]: cannot write its span "
                                 "records to mirrorflow-spans.a.internal on cluster 'b': ")


def test_a_plan_half_written_by_the_first_writer_is_finished_exactly(spark, two_clusters,
                                                                     tmp_path: Path) -> None:
    """The upgrade: a plan whose first 300 records the librdkafka writer committed (its
    transaction: the records, their span record, the resume position with the plan's id,
    under the slot's transactional id), then the JVM writer resumes it at 300."""
    from mirrorflow.run import run_cycle

    b = two_clusters["b"]
    path, records = orders_flow(tmp_path, two_clusters, 600)
    config = load_config(path)
    flow = config.flow("a->b")
    with FlowLease(config, flow, "first"):
        plan, _ = plan_run(config, flow, "first")
    ledger.spans_store(config.cluster("b"), "a").ensure()
    old = Producer({"bootstrap.servers": b, "transactional.id": "mirrorflow|a->b|write-0",
                    "enable.idempotence": True})
    old.init_transactions(30)
    old.begin_transaction()
    for key, value, headers, ts in records[:300]:
        old.produce("a.orders", value, key, partition=0, headers=headers, timestamp=ts)
    span = ledger.Span(plan.plan_id, "orders", 0, "a.orders", 0, 299, 0, 299, 300, ((0, 0),))
    old.produce(ledger.spans_topic("a"), span.value(), span.key())
    group = Consumer({"bootstrap.servers": b, "group.id": ledger.progress_group("a")})
    old.send_offsets_to_transaction([TopicPartition("a.orders", 0, 300, metadata=plan.plan_id)],
                                    group.consumer_group_metadata(), 30)
    old.commit_transaction(30)
    group.close()

    done = run_cycle(path, "a->b", run_id="upgraded", spark=spark)
    assert done.resumed and done.validation["success"]
    assert [(p.planned_start, p.records, p.skipped) for p in done.partitions] == [(0, 600, 300)]
    assert read_partition(b, "a.orders", 0) == records
