"""Failover with real brokers and real Spark: checkpoints and synced group offsets let a
consumer group resume on the target exactly where it stopped on the source."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from helpers.kafka import (
    commit,
    commit_offsets,
    config_file,
    create_topic,
    produce,
    produce_in_transactions,
    read_as_group,
    read_partition,
    varied_records,
)
from mirrorflow.checkpoint import remote
from mirrorflow.cli import main
from mirrorflow.config.loader import load_config
from mirrorflow.run import run_cycle

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def consume_and_commit(bootstrap: str, group: str, topic: str, partitions: int,
                       per_partition: int) -> None:
    """A group processes the first ``per_partition`` records of each partition and commits."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[int, int] = dict.fromkeys(range(partitions), 0)
    last: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while any(n < per_partition for n in seen.values()) and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is None or msg.error() or seen[msg.partition()] >= per_partition:
            continue
        seen[msg.partition()] += 1
        last[msg.partition()] = msg.offset()
    commit_offsets(consumer, [TopicPartition(topic, p, o + 1) for p, o in last.items()])
    consumer.close()


def test_failover_resumes_exactly_where_the_group_stopped(spark, two_clusters: dict[str, str],
                                                          tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    records = varied_records(1200)
    create_topic(a, "orders", 2)
    produce_in_transactions(a, "orders", records, 2, per_txn=50)
    # The target's remote topic already holds other records: downstream != upstream.
    create_topic(b, "a.orders", 2)
    produce(b, "a.orders", varied_records(37, 90_000), 2)
    # The groups: one to fail over, one excluded by regex, one excluded by MM2's default,
    # one active on the target, one already ahead on the target.
    for group in ("app", "audit-job", "console-consumer-42", "busy", "ahead"):
        consume_and_commit(a, group, "orders", 2, 200)
    busy = Consumer({"bootstrap.servers": b, "group.id": "busy", "session.timeout.ms": 45000})
    busy.subscribe(["a.orders"])
    deadline = time.monotonic() + 60
    while not busy.assignment() and time.monotonic() < deadline:
        busy.poll(0.5)
    assert busy.assignment(), "the target group must be active during the run"
    commit(b, "ahead", "a.orders", {0: 10_000, 1: 10_000})

    path = config_file(tmp_path / "mm2.properties", two_clusters,
                       "a->b.enabled = true\nb->a.enabled = true",
                       "sync.group.offsets.enabled = true\ngroups.exclude = audit-.*, "
                       "console-consumer-.*, connect-.*, __.*\n")
    result = run_cycle(path, "a->b", spark=spark)
    busy.close()
    assert result.records == 1200 + 1  # the orders and this run's heartbeat
    assert result.heartbeat["arrived"] and result.heartbeat["topic"] == "a.heartbeats"
    assert result.offset_syncs > 2 * 24  # a sync at every marker gap, per partition
    groups = {g["group"]: g for g in result.group_sync}
    assert set(groups) == {"app", "busy", "ahead"}
    assert "is active on cluster 'b'" in groups["busy"]["skipped_reason"]
    assert groups["ahead"]["synced"] == {}

    # Failover: the application restarts on the target in the same group.
    resumed = read_as_group(b, "app", "a.orders", 2)
    for p in range(2):
        assert resumed[p] == read_partition(a, "orders", p)[200:], f"partition {p}"
    # Checkpoints say the same, in MM2's format, through the client utility and the CLI.
    config = load_config(path)
    translated = remote.translate_offsets(config.cluster("b"), "a", "app")
    committed = Consumer({"bootstrap.servers": b, "group.id": "app"}).committed(
        [TopicPartition("a.orders", p) for p in range(2)], timeout=10)
    assert translated == {("a.orders", tp.partition): tp.offset for tp in committed}
    assert main(["translate", str(path), "--flow", "a->b", "--group", "app"]) == 0
    assert "a.orders[0]" in capsys.readouterr().out
    assert main(["inspect", str(path), "--cluster", "b", "--topic",
                 "a.checkpoints.internal"]) == 0
    assert "Checkpoint(group='app', topic='a.orders'" in capsys.readouterr().out
    # The target groups that were active or ahead were not moved.
    ahead_now = Consumer({"bootstrap.servers": b, "group.id": "ahead"}).committed(
        [TopicPartition("a.orders", p) for p in range(2)], timeout=10)
    assert {tp.offset for tp in ahead_now} == {10_000}
    assert remote.upstream_clusters(config, "b") == {"a"}
    assert remote.replication_hops(config, "b", "a") == 1

    # Active/active: the reverse flow checkpoints b's groups and sends nothing back.
    create_topic(b, "returns", 1)
    produce(b, "returns", varied_records(60), 1)
    consume_and_commit(b, "returns-app", "returns", 1, 25)
    back = run_cycle(path, "b->a", spark=spark)
    # returns, and the two heartbeats in b's `heartbeats` (a->b's own, and the pair (a, b)
    # this run emitted for the reverse flow, as MM2's two heartbeat connectors do); never
    # a.orders or a.heartbeats
    assert back.records == 60 + 2
    assert remote.translate_offsets(config.cluster("a"), "b", "returns-app") == {
        ("b.returns", 0): 25}
    assert remote.upstream_clusters(config, "a") == {"b"}
