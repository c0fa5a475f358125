"""Every way back the docs give, through the user's own path (the DAG's params in
``dag.test``): the repair after a failed proof, each reset mode, and dry runs that write
nothing. Apache Kafka, real Spark, real Airflow."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from test_airflow_run import flow_dag, states

from helpers.kafka import (
    KAFKA_OWN_TOPICS,
    commit,
    config_file,
    create_topic,
    fresh_admin,
    produce,
    read_partition,
    topic_partitions,
    topics,
    varied_records,
)
from mirrorflow.cli import main
from mirrorflow.config.loader import load_config
from mirrorflow.quality import reports
from mirrorflow.run import run_cycle
from mirrorflow.source.offsets import OffsetStore

pytestmark = [pytest.mark.airflow, pytest.mark.broker, pytest.mark.spark]
BASE = datetime(2026, 11, 1, tzinfo=UTC)


def end_offsets(bootstrap: str) -> dict[tuple[str, int], int]:
    """The end offset of every partition of every topic of a cluster."""
    admin = fresh_admin(bootstrap)
    parts = [TopicPartition(t, p) for t in topics(bootstrap)
             for p in range(topic_partitions(bootstrap, t))]
    found = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts})
    return {(tp.topic, tp.partition): future.result(10).offset
            for tp, future in found.items()}


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(10)
    deadline = time.monotonic() + 30
    while topic in topics(bootstrap):
        assert time.monotonic() < deadline, f"{topic} was not deleted"
        time.sleep(0.2)


@pytest.mark.timeout(420)  # well under the heartbeat sensor's 600 s
def test_the_documented_repair_after_a_failed_proof_ends_green(airflow_db, two_clusters,
                                                               tmp_path, monkeypatch,
                                                               capsys,
                                                               warm_spark) -> None:
    """docs/operations.md: a foreign record fails the proof; delete the remote topic and
    trigger reset = earliest with confirm_reset. The run is green, every source record is
    on the target once, the old checkpoints no longer count, fresh ones point into the new
    topic, and a group synced onto the old topic ahead of its checkpoint is named."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 3)
    produce(a, "orders", varied_records(300), 3)
    commit(a, "app", "orders", {0: 40, 1: 40, 2: 40})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "sync.group.offsets.enabled = true\n"
                       "mirrorflow.retry.delay.seconds = 0\n"
                       "mirrorflow.alert.max.lag.records = 50\n")
    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(tmp_path / "reports"))
    assert run_cycle(path, "a->b", spark=warm_spark).validation["success"]  # set-up: in-process
    producer = Producer({"bootstrap.servers": b})
    producer.produce("a.orders", value=b"foreign", partition=1)
    producer.flush(10)
    produce(a, "orders", varied_records(300, 300), 3)
    failed = flow_dag(path, monkeypatch).test(logical_date=BASE + timedelta(minutes=1))
    got = states(failed)
    assert str(failed.state) == "failed"
    assert (got["mirror"], got["validate"], got["report"]) == ("success", "failed", "failed")
    # While runs fail, the lag and the heartbeat's age are still measured and shown, the
    # alert fires, and the failed run's records are not counted as mirrored.
    summary = reports.read("a->b", failed.run_id)
    assert summary["failed"] is True and summary["lag"] == {
        "heartbeats[0]": 1, "orders[0]": 100, "orders[1]": 100, "orders[2]": 100}
    assert summary["heartbeat"]["age_ms"] >= 0
    exposed = (tmp_path / "reports" / "a__b" / "metrics.prom").read_text()
    assert 'replication_lag_records{flow="a->b",source="a",target="b",topic="orders",' \
           'partition="1"} 100' in exposed
    assert "mirrorflow_heartbeat_age_ms{" in exposed
    assert 'mirrorflow_record_count_total{flow="a->b",source="a",target="b",topic="orders",' \
           'partition="1"} 100' in exposed  # the first run's, not the failed run's
    assert "the run failed before its commit" in reports.render(summary)

    delete_topic(b, "a.orders")
    repaired = flow_dag(path, monkeypatch).test(logical_date=BASE + timedelta(minutes=2),
                        run_conf={"reset": "earliest", "confirm_reset": "a->b"})

    got = states(repaired)
    assert str(repaired.state) == "success", got
    assert got["mirror"] == got["await_heartbeat"] == got["commit"] == "success"
    for p in range(3):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)
        assert len(read_partition(b, "a.orders", p)) == 200
    # The failed run's heartbeat, written by the plan the reset dropped, is there once.
    assert read_partition(b, "a.heartbeats", 0) == read_partition(a, "heartbeats", 0)
    summary = reports.read("a->b", repaired.run_id)
    assert summary["validation"]["success"] and summary["checkpoints"] == 3
    capsys.readouterr()  # what the runs printed
    assert main(["translate", str(path), "--flow", "a->b", "--group", "app", "--json"]) == 0
    translated = json.loads(capsys.readouterr().out)
    # One transaction per partition from remote offset 0: upstream 40 is remote 40.
    assert translated == [{"topic": "a.orders", "partition": p, "offset": 40} for p in range(3)]
    # The target group went along (it had no offsets on the new topic).
    assert [g["synced"] for g in summary["group_sync"]] == [
        {f"a.orders[{p}]": 40 for p in range(3)}]

    # An application on the target moved `app` past its checkpoint on a.orders[0]: the
    # forward-only sync leaves it, and the report names it with what to do.
    commit(b, "app", "a.orders", {0: 90})
    produce(a, "orders", varied_records(3, 600), 3)
    after = run_cycle(path, "a->b", spark=warm_spark)
    (app,) = after.group_sync
    assert app["past"] == {"a.orders[0]": {"at": 90, "checkpoint": 40}}
    assert app["note"].startswith("group 'app' on cluster 'b' sits past its checkpoint since "
                                  "the reset or recreation of a.orders[0] at 90 (checkpoint "
                                  "40): it would skip records there")


@pytest.mark.timeout(420)  # well under the heartbeat sensor's 600 s
def test_dry_runs_write_nothing_and_every_reset_mode_ends_green(airflow_db, two_clusters,
                                                               tmp_path, monkeypatch,
                                                               capsys,
                                                               warm_spark) -> None:
    """A dry run with each reset mode leaves every topic of both clusters as it was (no
    heartbeat, lease, remote topic, position or plan) and moves no position; a reset to
    latest and to a timestamp each end green, this run's heartbeat mirrored."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(100), 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "mirrorflow.retry.delay.seconds = 0\n")
    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(tmp_path / "reports"))
    assert run_cycle(path, "a->b", spark=warm_spark).validation["success"]  # set-up: in-process
    store = OffsetStore(load_config(path).cluster("b"), "a")
    positions = store.positions()
    assert positions[("orders", 0)] == positions[("orders", 1)] == 49

    for minute, mode in enumerate(("earliest", "latest", "timestamp"), start=1):
        before = {alias: end_offsets(boot) for alias, boot in two_clusters.items()}
        dry = flow_dag(path, monkeypatch).test(logical_date=BASE + timedelta(minutes=minute),
                       run_conf={"dry_run": True, "reset": mode,
                                 "reset_timestamp_ms": 1_700_000_000_010})
        got = states(dry)
        assert str(dry.state) == "success", got
        assert got["plan"] == got["mirror"] == got["validate"] == got["commit"] == "skipped"
        assert got["report"] == "skipped"  # nothing held
        after = {alias: end_offsets(boot) for alias, boot in two_clusters.items()}
        for alias, ends in after.items():  # Kafka creates its own topics on first use: the
            for (topic, p), end in list(ends.items()):  # dry run may look a group up
                if topic in KAFKA_OWN_TOPICS and (topic, p) not in before[alias]:
                    assert end == 0, (alias, topic, p)  # nothing written there
                    del ends[(topic, p)]
        assert after == before
        assert store.positions() == positions

    produce(a, "orders", varied_records(50, 100), 2)
    latest = flow_dag(path, monkeypatch).test(logical_date=BASE + timedelta(minutes=5),
                      run_conf={"reset": "latest", "confirm_reset": "a->b"})
    got = states(latest)
    assert str(latest.state) == "success", got
    assert got["await_heartbeat"] == "success", got
    assert store.positions()[("orders", 0)] == store.positions()[("orders", 1)] == 74
    assert len(read_partition(b, "a.orders", 0)) == 50  # the 25 after the reset skipped
    assert reports.read("a->b", latest.run_id)["heartbeat"]["arrived"] is True

    # Ten more per partition; a reset to the timestamp of the 6th of them mirrors the last 5.
    produce(a, "orders", varied_records(20, 150), 2)
    stamp = 1_700_000_000_000 + 160
    at = flow_dag(path, monkeypatch).test(logical_date=BASE + timedelta(minutes=6),
                  run_conf={"reset": "timestamp", "reset_timestamp_ms": stamp,
                            "confirm_reset": "a->b"})
    got = states(at)
    assert str(at.state) == "success", got
    assert got["await_heartbeat"] == "success", got
    for p in range(2):
        mirrored = read_partition(b, "a.orders", p)
        assert len(mirrored) == 55
        assert [ts for *_, ts in mirrored[-5:]] == [
            1_700_000_000_000 + i for i in range(160, 170) if i % 2 == p]
    # The plan store reads back whole, its pending key included.
    capsys.readouterr()
    assert main(["inspect", str(path), "--cluster", "b", "--topic",
                 "mirrorflow-plans.a.internal"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if "undecodable" in line] == []
    assert any(line.split(" ", 2)[2].startswith("pending: ") for line in lines)
