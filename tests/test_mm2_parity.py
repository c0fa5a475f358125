"""MM2's integration scenarios (``MirrorConnectorsIntegrationBaseTest``) against MM2 itself:
one ``mm2.properties``, MM2 (dedicated mode) mirroring a into c, mirrorflow a into b.

This file's flows read from latest (``a.consumer.auto.offset.reset = latest``, MM2's
``testReplicateFromLatest``), keep their offset syncs on the target
(``offset-syncs.topic.location = target``, ``testOffsetSyncsTopicsOnTarget``) with a sync
for every record MM2 would sync (``offset.lag.max = 0``,
``testOneWayReplicationWithFrequentOffsetSyncs``), and meet an empty partition
(``testReplicationWithEmptyPartition``), a group on a topic nothing was mirrored from
(``testNoCheckpointsIfNoRecordsAreMirrored``), a topic created after both started and a
group rewound behind the flow (``testOffsetTranslationBehindReplicationFlow``).
Replication from earliest, MM2's default, is ``test_mm2_oracle``'s.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers.kafka import (
    QUICK_START,
    alter_topic,
    commit,
    config_file,
    create_topic,
    produce,
    read_partition,
    topics,
)
from helpers.kafka import varied_records as records_from
from helpers.mm2 import MM2_PACE, own_configs, parse, wait_for
from mirrorflow.checkpoint import remote
from mirrorflow.config.loader import load_config
from mirrorflow.dev.local_mm2 import MirrorMaker, formatted
from mirrorflow.kafka.clients import close_shared
from mirrorflow.run import run_cycle

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.timeout(900)]

SETTINGS = MM2_PACE + """\
a.consumer.auto.offset.reset = latest
offset-syncs.topic.location = target
offset.lag.max = 0
sync.topic.configs.interval.seconds = 1
"""
# The source topic's own configs; min.insync.replicas is in config.properties.exclude.
# (The records' timestamps are of 2023: retention keeps them.)
ORDERS_CONFIGS = {"retention.ms": "-1", "max.message.bytes": "2000000",
                  "min.insync.replicas": "1"}
RETENTION_LATER = str(10 * 365 * 24 * 3600 * 1000)
BEFORE = 40  # orders held before either flow started: left out by both (20 a partition)
AFTER = 60  # written once both run


def copies(bootstrap: str, topic: str, partitions: int) -> list[list]:
    return [read_partition(bootstrap, topic, p) for p in range(partitions)]


def sentinel_through(a: str, c: str, topic: str, n: list[int]) -> bool:
    """Write one more sentinel into ``topic``; whether one has reached c (MM2's task then
    reads ``topic`` from where latest put it)."""
    produce(a, topic, records_from(1, 10_000 + n[0]), 1)
    n[0] += 1
    return f"a.{topic}" in topics(c) and bool(read_partition(c, f"a.{topic}", 0))


def test_from_latest_with_every_sync_on_the_target_against_mm2(spark, three_clusters,
                                                                tmp_path: Path) -> None:
    a, b, c = three_clusters["a"], three_clusters["b"], three_clusters["c"]
    create_topic(a, "orders", 2, ORDERS_CONFIGS)
    produce(a, "orders", records_from(BEFORE), 2)
    create_topic(a, "sparse", 3)  # its partition 2 never gets a record
    create_topic(a, "quiet", 1)  # never gets a record
    create_topic(a, "sentinel", 1)
    path = config_file(tmp_path / "mm2.properties", three_clusters,
                       "a->b.enabled = true\na->c.enabled = true", SETTINGS)
    config = load_config(path)

    first = run_cycle(path, "a->b", spark=spark)  # sees every partition at its end
    assert sum(p.records for p in first.partitions if p.topic == "orders") == 0
    assert sorted((k["topic"], k["partition"], k["start"], k["end"]) for k in first.breaks
                  if k["topic"] == "orders") == [("orders", 0, 0, 20), ("orders", 1, 0, 20)]
    with MirrorMaker(path, tmp_path / "mm2", clusters=("c",), jvm_options=QUICK_START) as mm2:
        sent = [0]
        wait_for("a sentinel on c", lambda: sentinel_through(a, c, "sentinel", sent))
        produce(a, "orders", records_from(AFTER, BEFORE), 2)
        produce(a, "sparse", records_from(15), 2)  # partitions 0 and 1
        commit(a, "app", "orders", {0: 30, 1: 50})  # 10 into what both copy; the end
        commit(a, "app", "sparse", {0: 8, 1: 3, 2: 0})
        commit(a, "idle", "quiet", {0: 0})
        second = run_cycle(path, "a->b", spark=spark)
        assert second.validation["success"]
        wait_for("orders and sparse on c", lambda: copies(c, "a.orders", 2) == [
            part[20:] for part in copies(a, "orders", 2)] and copies(
            c, "a.sparse", 3) == copies(a, "sparse", 3), state=lambda: (
            [len(p) for p in copies(c, "a.orders", 2)], [len(p) for p in copies(
                c, "a.sparse", 3)]))
        # Where app is at a partition's end, MM2's translation is exact; behind it, MM2's
        # sync store may no longer hold a sync close enough (see 3. below).
        wait_for("app's checkpoints on c", lambda: remote.translate_offsets(
            config.cluster("c"), "a", "app").items() >= {(("a.orders", 1), 30),
                                                        (("a.sparse", 0), 8)},
                 state=lambda: remote.translate_offsets(config.cluster("c"), "a", "app"))

        # A topic created after both started: each reads it from where it first sees it.
        # Meanwhile on the source a config changes and another is removed (the remote
        # topics fall back to their cluster's default: testReplicateTargetDefault), and
        # on each target an excluded config is set on the remote topic, where it stays
        # (testSyncTopicConfigs).
        alter_topic(a, "orders", {"retention.ms": RETENTION_LATER, "max.message.bytes": None})
        for target in (b, c):
            alter_topic(target, "a.orders", {"unclean.leader.election.enable": "true"})
        create_topic(a, "late", 1)
        run_cycle(path, "a->b", spark=spark)  # sees it empty
        wait_for("a sentinel in late on c", lambda: sentinel_through(a, c, "late", sent))
        produce(a, "late", records_from(10, 500), 1)
        run_cycle(path, "a->b", spark=spark)
        wait_for("late on c", lambda: read_partition(c, "a.late", 0)[-10:] ==
                 read_partition(a, "late", 0)[-10:])
        synced = {"retention.ms": RETENTION_LATER, "unclean.leader.election.enable": "true"}

        def configs_on_c() -> dict[str, str]:
            return own_configs(config, "c", "a.orders")

        wait_for("the config change on c", lambda: configs_on_c() == synced,
                 state=configs_on_c)

        # A group near the flow's end, then rewound behind it on the source
        # (testOffsetTranslationBehindReplicationFlow): checkpoints follow it back.
        def behind(alias: str) -> dict:
            return remote.translate_offsets(config.cluster(alias), "a", "behind")

        # MM2 finds the group and checkpoints it within 2 s (1-second refresh and emit
        # intervals) where its sync store can translate it, which timing decides.
        commit(a, "behind", "orders", {0: 48, 1: 48})
        run_cycle(path, "a->b", spark=spark)
        time.sleep(5)
        mm2_ahead, ours_ahead = behind("c"), behind("b")
        commit(a, "behind", "orders", {0: 22, 1: 25})
        run_cycle(path, "a->b", spark=spark)
        time.sleep(5)  # MM2 checkpoints every second
        mm2_back = behind("c")
        assert mm2.running(), mm2.log_file.read_text()[-2000:]

    # 1. Both left out what the source held when they started, and copied the rest.
    assert copies(b, "a.orders", 2) == copies(c, "a.orders", 2) == [
        part[20:] for part in copies(a, "orders", 2)]
    assert copies(b, "a.sparse", 3) == copies(c, "a.sparse", 3) == copies(a, "sparse", 3)
    assert copies(b, "a.sparse", 3)[2] == []  # the empty partition, on both
    assert copies(b, "a.quiet", 1) == copies(c, "a.quiet", 1) == [[]]
    # mirrorflow saw "late" empty and copies all of it; MM2 from its task's first read.
    assert read_partition(b, "a.late", 0) == read_partition(a, "late", 0)
    on_c = read_partition(c, "a.late", 0)
    assert on_c == read_partition(a, "late", 0)[-len(on_c):] and len(on_c) >= 11

    # The remote topics' own configs: the source's, minus config.properties.exclude (set
    # on the target, it stays), minus what the source no longer sets.
    assert own_configs(config, "b", "a.orders") == configs_on_c() == synced

    # 2. Offset syncs on the targets, named after the source; none on the source.
    assert "mm2-offset-syncs.a.internal" in topics(b) & topics(c)
    assert not {"mm2-offset-syncs.b.internal", "mm2-offset-syncs.c.internal"} & topics(a)
    for target in (b, c):
        syncs = [parse(line) for line in formatted(target, "mm2-offset-syncs.a.internal",
                                                   "offset-syncs")]
        pairs = {(s["topicPartition"], int(s["upstreamOffset"]), int(s["downstreamOffset"]))
                 for s in syncs}
        assert {tp for tp, _, _ in pairs} >= {"orders-0", "orders-1", "sparse-0", "sparse-1"}
        for tp, upstream, downstream in pairs:  # every sync is a true pair
            if tp.startswith("orders-"):
                assert downstream == upstream - 20, (target, tp, upstream, downstream)
            elif tp.startswith("sparse-"):
                assert downstream == upstream, (target, tp, upstream, downstream)

    # 3. Checkpoints: mirrorflow's exact for every group offset in what was copied; none
    #    where nothing was (the empty partition, the quiet topic), on both. MM2's never
    #    past the true offset, and for a group behind the flow's end not always there:
    #    its OffsetSyncStore keeps 64 syncs a partition, ever sparser behind the newest,
    #    so with a sync for every record (offset.lag.max = 0) a group 20 records behind
    #    translates to an older sync (orders-0 at 1 instead of 10 in some runs) or, where
    #    no kept sync is at or before it, to no checkpoint (sparse-1), as timing decides.
    exact = {("a.orders", 0): 10, ("a.orders", 1): 30, ("a.sparse", 0): 8,
             ("a.sparse", 1): 3}
    ours = remote.translate_offsets(config.cluster("b"), "a", "app")
    mm2_at = remote.translate_offsets(config.cluster("c"), "a", "app")
    print(f"app's translated offsets: mirrorflow {ours}, MM2 {mm2_at}")
    assert ours == exact
    assert mm2_at.keys() <= exact.keys()
    assert all(mm2_at[tp] <= exact[tp] for tp in mm2_at), mm2_at
    assert remote.translate_offsets(config.cluster("b"), "a", "idle") == {}
    # 4. The rewound group: mirrorflow's checkpoints exact before and after. MM2's, where
    #    its sync store can translate the group at all, never past the true offset; after
    #    the rewind, where the store still holds a sync at or before the group's offset,
    #    it follows the group back, and otherwise keeps the checkpoint it had (ahead of
    #    the group: its failover would skip records).
    at_end, rewound = {("a.orders", 0): 28, ("a.orders", 1): 28}, \
        {("a.orders", 0): 2, ("a.orders", 1): 5}
    print(f"behind's translated offsets: mirrorflow {ours_ahead} then {behind('b')}, "
          f"MM2 {mm2_ahead} then {mm2_back}")
    assert (ours_ahead, behind("b")) == (at_end, rewound)
    assert all(mm2_ahead[tp] <= at_end[tp] for tp in mm2_ahead), mm2_ahead
    assert all(mm2_back[tp] <= rewound[tp] or mm2_back[tp] == mm2_ahead.get(tp)
               for tp in mm2_back), (mm2_ahead, mm2_back)
    assert remote.translate_offsets(config.cluster("c"), "a", "idle") == {}
    close_shared()
