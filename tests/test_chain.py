"""Every source offset accounted for (issues 38 and 31 §5): topic ids in the plan, the
chain of each source partition, named breaks, and the proof's check of the plan against
the chain. Apache Kafka and real Spark."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from helpers.kafka import (
    config_file,
    create_topic,
    delete_records,
    produce,
    read_partition,
    varied_records,
)
from mirrorflow.config.loader import load_config
from mirrorflow.kafka.clients import topic_ids
from mirrorflow.quality.verdicts import ValidationError
from mirrorflow.run import run_cycle
from mirrorflow.source.history import HistoryStore
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import plan_run
from mirrorflow.source.plan_store import PlanStore

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def recreate(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(10)
    deadline = time.monotonic() + 30
    while True:
        try:
            create_topic(bootstrap, topic, partitions)
            return
        except Exception as exc:  # the deletion still settling: TOPIC_ALREADY_EXISTS
            assert "TOPIC_ALREADY_EXISTS" in str(exc) and time.monotonic() < deadline, exc
            time.sleep(0.2)


def causes(result) -> list[tuple]:
    return [(b["topic"], b["partition"], b["cause"], b["start"], b["end"])
            for b in result.breaks]


@pytest.fixture
def flow(two_clusters, tmp_path: Path):
    a = two_clusters["a"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(300), 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\na->b.failOnDataLoss = false\n")
    return path, load_config(path), two_clusters


def test_recreated_and_refilled_topic_is_mirrored_whole_and_the_break_named(spark,
                                                                            flow) -> None:
    """The issue's case: 300 records, one run; the topic recreated and refilled with 400
    (past the old positions): every new record once, the break named in the report."""
    path, config, clusters = flow
    a, b = clusters["a"], clusters["b"]
    first = run_cycle(path, "a->b", spark=spark)
    assert [c[2] for c in causes(first)] == ["new", "new"]
    old_id = topic_ids(config.cluster("a"), ["orders"])["orders"]
    recreate(a, "orders", 2)
    produce(a, "orders", varied_records(400, 1000), 2)
    new_id = topic_ids(config.cluster("a"), ["orders"])["orders"]
    assert new_id != old_id
    second = run_cycle(path, "a->b", spark=spark)
    third = run_cycle(path, "a->b", spark=spark)
    assert second.validation["success"] and second.records == 400 and third.records == 0
    assert causes(second) == [("orders", 0, "recreated", 0, 0), ("orders", 1, "recreated", 0, 0)]
    assert f"topic id {old_id} -> {new_id}" in second.breaks[0]["detail"]
    for p in range(2):
        assert read_partition(b, "a.orders", p)[150:] == read_partition(a, "orders", p)
        assert len(read_partition(b, "a.orders", p)) == 350
    chains = HistoryStore(config.cluster("b"), "a").read_all().chains
    assert {tp: (c.topic_id, c.next) for tp, c in chains.items()} == {
        ("orders", 0): (new_id, 200), ("orders", 1): (new_id, 200)}

    # A position forced past the chain's end, as a future bug might: the proof names the
    # offsets no plan covered, and nothing is committed.
    produce(a, "orders", varied_records(200, 2000), 2)
    OffsetStore(config.cluster("b"), "a").commit({("orders", 0): 249})
    with pytest.raises(ValidationError, match=(
            rf"offsets 200-249 of orders\[0\] \(topic id {re.escape(new_id)}\) were never "
            r"planned: the flow accounted for the partition up to offset 199, and this plan "
            r"starts at 250")):
        run_cycle(path, "a->b", spark=spark)
    assert OffsetStore(config.cluster("b"), "a").positions() == {("orders", 0): 249,
                                                                  ("orders", 1): 199}


def test_a_topic_recreated_while_its_plan_is_pending(spark, flow) -> None:
    """The pending plan's ranges point into the old incarnation: they are dropped as a
    named break, and the new incarnation is mirrored from its start, every record once."""
    path, config, clusters = flow
    a, b = clusters["a"], clusters["b"]
    flow_ = config.flow("a->b")
    pending, _ = plan_run(config, flow_, "killed-run")  # planned, never mirrored
    recreate(a, "orders", 2)
    produce(a, "orders", varied_records(40, 1000), 2)
    resumed = run_cycle(path, "a->b", spark=spark)
    assert resumed.resumed and resumed.plan_id == pending.plan_id and resumed.records == 0
    assert [c[2:] for c in causes(resumed)] == [("recreated", 0, 0), ("recreated", 0, 0)]
    assert "while plan" in resumed.breaks[0]["detail"]
    after = run_cycle(path, "a->b", spark=spark)
    assert after.records == 40 and after.validation["success"] and after.breaks == []
    for p in range(2):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)


def test_retention_a_new_partition_and_a_reset_are_named_breaks(spark, flow, capsys) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    from mirrorflow.airflow import status
    from mirrorflow.cli import main
    from mirrorflow.lease import FlowLease
    from mirrorflow.operations import reset_positions
    from mirrorflow.quality import reports
    from mirrorflow.quality.reports import render

    path, config, clusters = flow
    a, b = clusters["a"], clusters["b"]
    run_cycle(path, "a->b", spark=spark)
    # Retention past the position before the next run: a gap, named.
    produce(a, "orders", varied_records(100, 300), 2)
    delete_records(a, "orders", 0, 180)
    kept = run_cycle(path, "a->b", spark=spark)
    assert kept.validation["success"]
    assert causes(kept) == [("orders", 0, "retention", 150, 180)]
    # A partition added: its chain starts at 0, named.
    admin = AdminClient({"bootstrap.servers": a})
    admin.create_partitions([NewPartitions("orders", 3)])["orders"].result(10)
    produce(a, "orders", [(b"k", b"v", None, 1_700_000_000_000 + i) for i in range(9)], 3)
    grown = run_cycle(path, "a->b", spark=spark)
    assert grown.validation["success"]
    assert causes(grown) == [("orders", 2, "new", 0, 0)]
    assert "a new partition of a topic the flow mirrors" in grown.breaks[0]["detail"]
    # A reset to latest: each partition's break names the mode, the offsets and who.
    produce(a, "orders", varied_records(30, 500), 3)
    with FlowLease(config, config.flow("a->b"), "operator-run"):
        reset_positions(config, config.flow("a->b"), "latest", run_id="operator-run")
    chains = HistoryStore(config.cluster("b"), "a").read_all().chains
    assert chains[("orders", 1)].breaks[-1]["cause"] == "reset"
    assert chains[("orders", 1)].breaks[-1]["detail"] == (
        "reset to latest by operator-run: from offset 203 to 213")
    after = run_cycle(path, "a->b", spark=spark)
    assert after.records == 0 and after.validation is None  # nothing new: no proof to run
    # The report and the status view list a run's breaks; `report --gaps` the flow's.
    table = render(reports.read("a->b", kept.run_id))
    assert ("  break orders[0] retention offsets 150..179: removed by retention or "
            "DeleteRecords before they were read") in table.splitlines()
    assert status.breaks(reports.read("a->b", grown.run_id)) == (
        "<br><span class=muted>1 named break(s)<br>orders[2] new at offset 0: a new partition "
        "of a topic the flow mirrors: mirrored from its log start</span>")
    capsys.readouterr()
    assert main(["report", str(path), "--flow", "a->b", "--gaps"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split(" ")[:2] for line in listed] == [
        ["orders[0]", "new"], ["orders[0]", "retention"], ["orders[0]", "reset"],
        ["orders[1]", "new"], ["orders[1]", "reset"], ["orders[2]", "new"],
        ["orders[2]", "reset"]]
    assert ("orders[1] reset offsets 203..212: reset to latest by operator-run: from offset "
            "203 to 213") in listed
    assert PlanStore(config, config.flow("a->b")).pending() is None
    assert len(read_partition(b, "a.orders", 2)) == 3  # the reset skipped the 10 after them
