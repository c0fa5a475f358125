"""Correctness on Apache Kafka under what consumers, brokers and other flows do between
runs: a group moved back, a LogAppendTime target, fan-in of two flows into one topic,
translation for a group many runs behind after the offset-syncs topic was compacted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from helpers.kafka import (
    alter_topic,
    commit,
    config_file,
    create_topic,
    delete_records,
    produce,
    produce_in_transactions,
    produce_with_java,
    read_partition,
    varied_records,
)
from mirrorflow.checkpoint import remote
from mirrorflow.config.loader import load_config
from mirrorflow.quality import reports
from mirrorflow.run import run_cycle
from mirrorflow.source.plan import plan_run
from mirrorflow.source.plan_store import PlanStore
from mirrorflow.spark.job import run_steps

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def committed(bootstrap: str, group: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
    finally:
        consumer.close()


def test_a_group_moved_back_never_blocks_the_flow(spark, two_clusters, tmp_path: Path) -> None:
    """MM2's rules: the checkpoint follows the group back; the target group, idle, is
    never rewound by the sync (MirrorCheckpointTask.syncGroupOffset moves forward only)."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(100), 1)
    commit(a, "billing", "orders", {0: 80})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\nsync.group.offsets.enabled = true\n")
    config = load_config(path)
    run_cycle(path, "a->b", spark=spark)
    assert remote.translate_offsets(config.cluster("b"), "a", "billing") == {
        ("a.orders", 0): 80}  # one transaction: its commit marker is at 100

    commit(a, "billing", "orders", {0: 20})  # reset to reprocess
    produce(a, "orders", varied_records(10, 100), 1)
    again = run_cycle(path, "a->b", spark=spark)

    assert again.validation["success"] and again.records == 10
    assert remote.translate_offsets(config.cluster("b"), "a", "billing") == {
        ("a.orders", 0): 20}
    assert committed(b, "billing", "a.orders", 0) == 80


def test_a_log_append_time_target_is_proven_without_timestamps(spark, two_clusters,
                                                               tmp_path: Path) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    # A name of its own: KRaft may keep a deleted topic's configs for a recreated one of
    # the same name (seen once: a later test's `a.orders` stamped LogAppendTime).
    create_topic(a, "stamped", 1)
    produce(a, "stamped", varied_records(50), 1)
    create_topic(b, "a.stamped", 1, {"message.timestamp.type": "LogAppendTime"})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")

    result = run_cycle(path, "a->b", spark=spark)

    assert result.validation["success"] and result.records == 50
    assert ("a.stamped: timestamps not compared (message.timestamp.type = LogAppendTime on "
            "the target)") in result.validation["notes"]
    landed = read_partition(b, "a.stamped", 0)
    assert [r[:3] for r in landed] == [r[:3] for r in read_partition(a, "stamped", 0)]
    assert all(ts > 1_700_000_000_000 + 50 for *_, ts in landed)  # the broker's time


def test_timestamps_at_or_before_the_epoch_are_written_as_the_plans_time(
        spark, two_clusters, tmp_path: Path) -> None:
    """CreateTime 0 (which librdkafka cannot write: it takes 0 for "now") and no timestamp
    (-1) become the plan's time on the target, alike in every attempt, so the proof passes
    and says so, on a compacted remote topic too (proven record by record: nothing was
    compacted away). Other timestamps are kept."""
    a, b = two_clusters["a"], two_clusters["b"]
    for topic, config in (("epoch", {}), ("epoch_compacted", {"cleanup.policy": "compact"})):
        create_topic(a, topic, 1, config)
        produce_with_java(a, topic, [(b"k-zero", b"zero", 0),
                                     (b"k-normal", b"normal", 1_700_000_000_000)])
        produce(a, topic, [(b"k-none", b"none", None, -1), (b"k-later", b"later", None, 5)], 1)
        assert [r[3] for r in read_partition(a, topic, 0)] == [0, 1_700_000_000_000, -1, 5]
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")

    result = run_cycle(path, "a->b", spark=spark)

    assert result.validation["success"] and result.records == 8
    config = load_config(path)
    plan_ms = PlanStore(config, config.flow("a->b")).load(result.plan_id).created_ms
    for topic in ("epoch", "epoch_compacted"):
        assert [r[3] for r in read_partition(b, f"a.{topic}", 0)] == [
            plan_ms, 1_700_000_000_000, plan_ms, 5]
        assert [r[:3] for r in read_partition(b, f"a.{topic}", 0)] == [
            r[:3] for r in read_partition(a, topic, 0)]
    stamped = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(plan_ms / 1000))
    assert (f"a.epoch[0]: 2 records stamped at or before the epoch (CreateTime 0, or none) "
            f"were written with the plan's time ({stamped}.{plan_ms % 1000:03d}Z), which the "
            f"proof compares") in result.validation["notes"]
    assert (f"  note: a.epoch_compacted[0]: 2 records stamped at or before the epoch (CreateTime"
            f" 0, or none) were written with the plan's time ({stamped}."
            f"{plan_ms % 1000:03d}Z), which the proof compares") in reports.render(
        reports.read("a->b", result.run_id)).splitlines()
    assert {p.remote_topic: p.restamped for p in result.partitions} == {
        "a.epoch": 2, "a.epoch_compacted": 2}
    assert not [n for n in result.validation["notes"] if "compacted on the target" in n]
    produce(a, "epoch", [(b"k-more", b"more", None, -1)], 1)
    again = run_cycle(path, "a->b", spark=spark)  # never a permanent failure
    assert again.validation["success"] and again.records == 1
    assert [p.restamped for p in again.partitions] == [1]


def test_each_proof_reuses_the_code_spark_generated_for_the_last(spark, two_clusters,
                                                                tmp_path: Path) -> None:
    """Records without a timestamp in a source topic with gaps (transaction markers): the
    proof reads the source again and gives them the plan's time, as the writer did. Spark
    compiles the code it generates for a query unless it compiled the same code before; a
    plan's time written into that code as a literal made each proof compile its stages
    anew. The second run, with a plan time of its own, compiles nothing."""
    a = two_clusters["a"]
    create_topic(a, "gapped", 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    compiled, stamps = [], []
    for first in (0, 4):
        produce_in_transactions(a, "gapped", [
            (f"k{i}".encode(), b"v", None, -1 if i % 2 else 1_700_000_000_000 + i)
            for i in range(first, first + 4)], 1, 2)
        before = metrics.METRIC_COMPILATION_TIME().getCount()

        result = run_cycle(path, "a->b", spark=spark)

        compiled.append(metrics.METRIC_COMPILATION_TIME().getCount() - before)
        assert result.validation["success"] and result.records == 4
        assert [(p.remote_topic, p.restamped) for p in result.partitions] == [("a.gapped", 2)]
        config = load_config(path)
        stamps.append(PlanStore(config, config.flow("a->b")).load(result.plan_id).created_ms)
    assert stamps[0] != stamps[1]
    assert compiled[1] == 0, compiled


def test_more_ranges_than_write_slots_share_their_tasks(spark, two_clusters,
                                                      tmp_path: Path) -> None:
    """Seven ranges (three topics) dealt to two write slots: each slot's ranges go through
    one Spark task and one producer (a union of one-partition reads); every record lands
    once, in order, and the proof passes; a second run resumes each range where the
    first ended."""
    a, b = two_clusters["a"], two_clusters["b"]
    for topic, partitions in (("slots_a", 3), ("slots_b", 2), ("slots_c", 2)):
        create_topic(a, topic, partitions)
        produce(a, topic, varied_records(70), partitions)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\na->b.topics = slots_.*\n"
                       "a->b.mirrorflow.write.tasks = 2\n"
                       "a->b.mirrorflow.write.records.per.task = 1\n")
    config = load_config(path)

    result = run_cycle(path, "a->b", spark=spark)

    assert result.validation["success"] and result.records == 210
    plan = PlanStore(config, config.flow("a->b")).load(result.plan_id)
    assert sorted(r.slot for r in plan.ranges) == [0, 0, 0, 1, 1, 1, 1]
    produce(a, "slots_b", varied_records(10, 70), 2)
    again = run_cycle(path, "a->b", spark=spark)
    assert again.validation["success"] and again.records == 10
    for topic, partitions in (("slots_a", 3), ("slots_b", 2), ("slots_c", 2)):
        for p in range(partitions):
            assert read_partition(b, f"a.{topic}", p) == read_partition(a, topic, p)


IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def two_sources_into_b(clusters: dict, tmp_path: Path, records: int, policy: str = "") -> Path:
    """`orders` on a and c with ``records`` each (c's numbered from 10,000), and a config
    of the flows a->b and c->b under ``policy`` (MM2's default where empty)."""
    for alias, first in (("a", 0), ("c", 10_000)):
        create_topic(clusters[alias], "orders", 1)
        produce(clusters[alias], "orders", varied_records(records, first), 1)
    return config_file(tmp_path / "mm2.properties", clusters,
                       "a->b.enabled = true\nc->b.enabled = true",
                       "emit.heartbeats.enabled = false\n"
                       + (f"replication.policy.class = {policy}\n" if policy else ""))


def test_fan_in_two_flows_into_one_topic_each_proven(spark, three_clusters,
                                                     tmp_path: Path) -> None:
    """IdentityReplicationPolicy, MirrorMaker 1 style: a and c both write `orders` on the
    aggregation cluster b; each flow is exact and proves its own records, the other's
    neither foreign nor its own."""
    a, b, c = three_clusters["a"], three_clusters["b"], three_clusters["c"]
    path = two_sources_into_b(three_clusters, tmp_path, 40, IDENTITY)

    results = [run_cycle(path, "a->b", spark=spark), run_cycle(path, "c->b", spark=spark)]
    produce(a, "orders", varied_records(15, 40), 1)
    produce(c, "orders", varied_records(5, 10_040), 1)
    results += [run_cycle(path, "c->b", spark=spark), run_cycle(path, "a->b", spark=spark)]

    assert [r.records for r in results] == [40, 40, 5, 15]
    assert all(r.validation["success"] for r in results)
    assert all(v["foreign"] == 0 for r in results for v in r.validation["ranges"])
    landed = [r[:3] for r in read_partition(b, "orders", 0)]
    from_a = [r[:3] for r in read_partition(a, "orders", 0)]
    from_c = [r[:3] for r in read_partition(c, "orders", 0)]
    assert landed == from_a[:40] + from_c[:40] + from_c[40:] + from_a[40:]


@pytest.mark.parametrize("policy, reads_c", [("", False), (IDENTITY, True)])
def test_a_proof_reads_the_state_of_only_the_flows_that_may_write_its_topics(
        spark, three_clusters, tmp_path: Path, monkeypatch, policy: str,
        reads_c: bool) -> None:
    """Under MM2's default policy c->b writes only `c.` topics, so a->b's proof reads
    none of c's state on b (an entry per partition c mirrors); under
    IdentityReplicationPolicy both write `orders` there and the proof reads c's to tell
    its records apart. Either way a->b's run is exact and proven."""
    from mirrorflow.source import ledger

    a, b = three_clusters["a"], three_clusters["b"]
    path = two_sources_into_b(three_clusters, tmp_path, 20, policy)
    run_cycle(path, "c->b", spark=spark)
    read: list[str] = []
    read_spans = ledger.read_spans

    def recorded(target, source_alias, plan_id=None):
        read.append(source_alias)
        return read_spans(target, source_alias, plan_id)

    monkeypatch.setattr(ledger, "read_spans", recorded)
    result = run_cycle(path, "a->b", spark=spark)

    assert (result.records, result.validation["success"]) == (20, True)
    assert [v["foreign"] for v in result.validation["ranges"]] == [0]
    assert ("c" in read, "a" in read) == (reads_c, True)
    remote_topic = "orders" if policy else "a.orders"
    assert [r[:3] for r in read_partition(b, remote_topic, 0)][-20:] == \
        [r[:3] for r in read_partition(a, "orders", 0)]


def test_translation_stays_exact_for_a_group_five_runs_behind_after_compaction(
        spark, two_clusters, tmp_path: Path) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(30), 1)
    commit(a, "slow", "orders", {0: 17})  # and it stays there
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    config = load_config(path)
    for run in range(5):
        if run:
            produce(a, "orders", varied_records(30, 30 * run), 1)
        run_cycle(path, "a->b", spark=spark)
    # Compact MM2's offset-syncs topic now: one sync per partition survives.
    syncs = "mm2-offset-syncs.b.internal"
    alter_topic(a, syncs, {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.001",
                           "min.compaction.lag.ms": "0"})
    produce(a, "orders", varied_records(1, 150), 1)
    run_cycle(path, "a->b", spark=spark)  # rolls the syncs topic's segment
    deadline = time.monotonic() + 90
    while len(read_partition(a, syncs, 0)) > 2:
        assert time.monotonic() < deadline, "the log cleaner did not compact the syncs topic"
        time.sleep(1)

    produce(a, "orders", varied_records(1, 151), 1)
    run_cycle(path, "a->b", spark=spark)

    landed = read_partition(b, "a.orders", 0, with_offsets=True)
    source = read_partition(a, "orders", 0)
    assert [r[1:] for r in landed] == source
    assert remote.translate_offsets(config.cluster("b"), "a", "slow") == {
        ("a.orders", 0): landed[17][0]}


def test_a_remote_topic_compacted_before_the_proof_is_proven_on_the_newest_record_of_each_key(
        spark, two_clusters, tmp_path: Path) -> None:
    """The proof compares a compacted remote topic record by record first; where the
    target's log cleaner removed older records of a key between the mirror and the proof,
    it compares again on the newest record of each key, reading the source (where the
    plan's time stands in for timestamps at or before the epoch, as the writer wrote
    them), passes, and says so."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "accounts", 1, {"cleanup.policy": "compact"})
    # Every append to the remote topic rolls a segment, so that the cleaner may compact
    # the older transactions' records once newer ones of their keys are there.
    create_topic(b, "a.accounts", 1, {"cleanup.policy": "compact", "segment.ms": "1",
                                      "min.cleanable.dirty.ratio": "0.001",
                                      "min.compaction.lag.ms": "0"})
    rounds = [[(f"k{k}".encode(), f"v{k}-{r}".encode(), None,
                -1 if (r, k) == (3, 0) else 1_700_000_000_000 + 10 * r + k)
               for k in range(5)] for r in range(4)]
    produce(a, "accounts", [record for batch in rounds for record in batch], 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\nsync.topic.configs.enabled = false\n"
                       "a->b.mirrorflow.transaction.records = 5\n")
    config = load_config(path)
    flow = config.flow("a->b")
    plan, _ = plan_run(config, flow, "run-1")
    run_steps(spark, config, flow, plan, steps=("mirror",), run_id="run-1")
    deadline = time.monotonic() + 90
    while len(left := read_partition(b, "a.accounts", 0)) == 20:
        assert time.monotonic() < deadline, "the log cleaner did not compact a.accounts"
        time.sleep(1)
    assert [r[:2] for r in left[-5:]] == [r[:2] for r in rounds[3]]

    _, validation = run_steps(spark, config, flow, plan, steps=("validate",), run_id="run-1")

    assert validation.success, validation.failures
    assert (validation.verified_records, validation.planned_records) == (20, 20)
    assert "a.accounts: compacted on the source and the target; the newest record of each " \
           "key is compared" in validation.notes


def test_a_source_compacted_between_the_mirror_and_the_proof_is_proven_by_newer_keys(
        spark, two_clusters, tmp_path: Path) -> None:
    """A range with transaction markers is read from the source again by its proof. Where
    the source's cleaner removed records of it for newer ones of their keys in between
    (as b's cleaner did to mirrored heartbeats in a soak, failing every retry), the newer
    records prove them; a record the source still holds and the target lost is named."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "profiles", 1, {"cleanup.policy": "compact", "segment.ms": "1",
                                    "min.cleanable.dirty.ratio": "0.001",
                                    "min.compaction.lag.ms": "0"})
    create_topic(b, "a.profiles", 1)  # the target keeps every record
    first = [(f"k{k}".encode(), f"v{k}-0".encode(), None, 1_700_000_000_000 + k)
             for k in range(10)]
    produce_in_transactions(a, "profiles", first, 1, per_txn=5)  # 0-4, 6-10; markers 5, 11
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\nsync.topic.configs.enabled = false\n")
    config = load_config(path)
    flow = config.flow("a->b")
    plan, _ = plan_run(config, flow, "run-1")
    run_steps(spark, config, flow, plan, steps=("mirror",), run_id="run-1")
    # Newer records of k0..k4 after the plan's range: the cleaner may drop offsets 0-4.
    produce_in_transactions(a, "profiles", [(f"k{k}".encode(), f"v{k}-1".encode(), None,
                                             1_700_000_000_100 + k) for k in range(5)], 1, 5)
    deadline = time.monotonic() + 90
    while len(read_partition(a, "profiles", 0)) > 10:
        assert time.monotonic() < deadline, "the log cleaner did not compact profiles"
        time.sleep(1)
    assert [k for k, *_ in read_partition(a, "profiles", 0)] == [
        f"k{k}".encode() for k in (5, 6, 7, 8, 9, 0, 1, 2, 3, 4)]

    _, validation = run_steps(spark, config, flow, plan, steps=("validate",), run_id="run-1")

    assert validation.success, validation.failures
    assert (validation.verified_records, validation.planned_records) == (10, 10)
    for note in ("a.profiles: compacted on the source; the newest record of each key is "
                 "compared",
                 "a.profiles[0]: 5 records the source's cleaner removed after the mirror read "
                 "them are proven by newer records of their keys"):
        assert note in validation.notes, validation.notes

    delete_records(b, "a.profiles", 0, 7)  # the copies of k0..k4 (excused), k5 and k6 (not)
    _, validation = run_steps(spark, config, flow, plan, steps=("validate",), run_id="run-1")

    assert not validation.success
    assert "profiles[0] -> a.profiles[0]: 2 source records missing on the target" in \
        validation.failures, validation.failures
