"""The offset store speaks MM2's format, byte for byte, on a real broker."""

from __future__ import annotations

import json
import logging
import time

import pytest
from confluent_kafka.admin import AdminClient

from helpers.kafka import create_topic, delete_records, read_partition, topics
from helpers.mm2 import own_configs
from mirrorflow.checkpoint.checkpoints import checkpoints_topic
from mirrorflow.config.loader import parse_config
from mirrorflow.heartbeat import heartbeats
from mirrorflow.kafka import internal_topics
from mirrorflow.kafka.internal_topics import CompactedTopic
from mirrorflow.lease import FlowLease
from mirrorflow.source import ledger
from mirrorflow.source.history import CHAIN, OWNED, SYNCS, Chain, HistoryStore, RemotePartition
from mirrorflow.source.offset_syncs import offset_syncs_topic
from mirrorflow.source.offsets import OffsetStore, decode, encode_key, encode_value, offsets_topic
from mirrorflow.source.plan_store import PlanStore


def a_to_b(two_clusters: dict[str, str], extra: str = ""):
    """The flow a->b between the two local clusters, with ``extra`` lines."""
    return parse_config(f"clusters = a, b\na.bootstrap.servers = {two_clusters['a']}\n"
                        f"b.bootstrap.servers = {two_clusters['b']}\na->b.enabled = true\n"
                        + extra)


def test_key_and_value_bytes_match_mm2() -> None:
    # Connect's JsonConverter (schemas off) of [connector name, MirrorUtils.wrapPartition]:
    assert encode_key("us-west", "orders", 3) == (
        b'["MirrorSourceConnector",{"cluster":"us-west","partition":3,"topic":"orders"}]')
    assert encode_value(41) == b'{"offset":41}'
    assert offsets_topic("us-west") == "mm2-offsets.us-west.internal"


def test_decode_accepts_any_key_order_and_rejects_others() -> None:
    key = json.dumps(["MirrorSourceConnector", {"topic": "t", "partition": 1, "cluster": "a"}])
    assert decode(key.encode(), b'{"offset":7}') == ("a", ("t", 1), 7)
    assert decode(b'["MirrorCheckpointConnector",{}]', b'{"offset":1}') is None
    assert decode(b"garbage", b"{}") is None


@pytest.mark.broker
def test_commit_and_read_back(two_clusters: dict[str, str]) -> None:
    config = a_to_b(two_clusters)
    store = OffsetStore(config.cluster("b"), "a")
    assert store.positions() == {}
    store.commit({("orders", 0): 9, ("orders", 1): 19})
    store.commit({("orders", 0): 29})
    # A record of another source and a malformed record are ignored, not fatal.
    CompactedTopic(config.cluster("b"), offsets_topic("a"), 25).write(
        [(encode_key("c", "orders", 0), encode_value(5)), (b"not json", b"{}")])
    assert store.positions() == {("orders", 0): 29, ("orders", 1): 19}
    store.forget([("orders", 1)])
    assert store.positions() == {("orders", 0): 29}
    # What is on the wire is MM2's layout, keyed for Java's murmur2 partitioner.
    raw = CompactedTopic(config.cluster("b"), offsets_topic("a"), 25).read()
    assert raw[encode_key("a", "orders", 0)] == b'{"offset":29}'
    murmur_partition = _java_partition(encode_key("a", "orders", 0), 25)
    on_wire = read_partition(two_clusters["b"], offsets_topic("a"), murmur_partition)
    # mirrorflow's records carry its origin header (MM2 ignores headers of offset records):
    # a position without it was set outside mirrorflow.
    assert (encode_key("a", "orders", 0), b'{"offset":29}', [("mirrorflow", b"1")]) in [
        r[:3] for r in on_wire]
    assert store.read() == ({("orders", 0): 29}, set())


@pytest.mark.broker
def test_a_history_read_decodes_the_kinds_of_entries_asked_for(
        two_clusters: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """A flow's history holds three entries per partition; a reader asking for some kinds
    gets those, and the others are not decoded (a damaged one goes unnoticed)."""
    config = a_to_b(two_clusters, "replication.factor = 1\n")
    store = HistoryStore(config.cluster("b"), "a")
    with FlowLease(config, config.flow("a->b"), "r"):
        store.write([RemotePartition("a.orders", 0, 9, 4, [(0, 9)])], {("orders", 0): [(4, 9)]},
                    {("orders", 0): Chain("id-1", 5)})
        store.topic.write([(b"owned/a.orders/1", b"not json")])
    def warned() -> list[str]:
        return [r.getMessage().split(" skipped")[0] for r in caplog.records
                if r.name == "mirrorflow.source.history"]

    with caplog.at_level(logging.WARNING, logger="mirrorflow.source.history"):
        chains = store.read_all(CHAIN)
        assert warned() == []
        everything = store.read_all()
    assert (chains.remote, chains.syncs) == ({}, {})
    assert chains.chains == {("orders", 0): Chain("id-1", 5)}
    assert everything.remote == {("a.orders", 0): RemotePartition("a.orders", 0, 9, 4, [(0, 9)])}
    assert everything.syncs == {("orders", 0): [(4, 9)]}
    assert everything.chains == chains.chains
    assert warned() == [
        "mirrorflow-history.a.internal on cluster 'b': entry b'owned/a.orders/1'"]
    assert store.read_all(OWNED, SYNCS).chains == {}
    assert store.read() == (everything.remote, everything.syncs)


def _java_partition(key: bytes, partitions: int) -> int:
    """Java's DefaultPartitioner for a keyed record: murmur2(key) & 0x7fffffff % n."""
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ len(key)) & 0xFFFFFFFF
    length4 = len(key) // 4
    for i in range(length4):
        k = int.from_bytes(key[i * 4:i * 4 + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = key[length4 * 4:]
    if len(rest) == 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if len(rest) >= 1:
        h ^= rest[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


@pytest.mark.broker
def test_reads_in_one_context_fetch_only_what_is_new(two_clusters: dict[str, str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease holder's steps read a state topic a dozen times: after the first read, each
    fetches only the records added since, and still returns what a full read would."""
    config = a_to_b(two_clusters)
    # Compacted and time-bounded (a compacted topic refuses DeleteRecords): retention moves
    # its log start.
    create_topic(two_clusters["b"], "reads.internal", 1, {"cleanup.policy": "compact,delete"})
    topic = CompactedTopic(config.cluster("b"), "reads.internal")
    # A spy (the real fetch runs): which offsets each read asked the broker for.
    fetched: list[dict] = []
    real = internal_topics._fetch

    def fetch(cluster, name, bounds, timeout):
        fetched.append(dict(bounds))
        return real(cluster, name, bounds, timeout)

    monkeypatch.setattr(internal_topics, "_fetch", fetch)
    with internal_topics.incremental_reads():
        topic.write([(b"k%d" % i, b"v%d" % i) for i in range(6)])
        assert topic.read() == {b"k%d" % i: b"v%d" % i for i in range(6)}
        topic.write([(b"k1", b"new"), (b"k7", b"v7")])
        assert topic.read() == {b"k0": b"v0", b"k1": b"new", b"k2": b"v2", b"k3": b"v3",
                                b"k4": b"v4", b"k5": b"v5", b"k7": b"v7"}
        assert topic.read() == {b"k0": b"v0", b"k1": b"new", b"k2": b"v2", b"k3": b"v3",
                                b"k4": b"v4", b"k5": b"v5", b"k7": b"v7"}
        assert fetched == [{("reads.internal", 0): (0, 6)}, {("reads.internal", 0): (6, 8)}, {}]
        # Records below a new log start are gone from the reads too.
        delete_records(two_clusters["b"], "reads.internal", 0, 2)
        assert topic.read() == {b"k1": b"new", b"k2": b"v2", b"k3": b"v3", b"k4": b"v4",
                                b"k5": b"v5", b"k7": b"v7"}
        # A topic deleted and created again under its name is read anew.
        admin = AdminClient({"bootstrap.servers": two_clusters["b"]})
        admin.delete_topics(["reads.internal"])["reads.internal"].result(10)
        deadline = time.monotonic() + 30
        while "reads.internal" in topics(two_clusters["b"]):
            assert time.monotonic() < deadline, "reads.internal not deleted"
            time.sleep(0.05)
        topic.write([(b"x", b"1")])
        assert topic.read() == {b"x": b"1"}
        assert fetched[-1] == {("reads.internal", 0): (0, 1)}
    # Outside the context every read is a full one.
    assert topic.read() == {b"x": b"1"}
    assert fetched[-1] == {("reads.internal", 0): (0, 1)} and len(fetched) == 6


@pytest.mark.broker
def test_a_holders_commits_are_awaited_at_their_next_read_and_at_its_end(
        two_clusters: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A committed state write is readable (its transaction markers written) for the
    holder's next read of its topic and for everyone once the lease ends; the holder does
    not wait for it right after the commit."""
    config = a_to_b(two_clusters, "replication.factor = 1\n")
    first = CompactedTopic(config.cluster("b"), "settle.first")
    second = CompactedTopic(config.cluster("b"), "settle.second")
    awaited: list[list[tuple[str, int]]] = []
    real = internal_topics.await_readable

    def spy(cluster, ends, timeout) -> None:
        awaited.append(sorted(ends))
        real(cluster, ends, timeout)

    monkeypatch.setattr(internal_topics, "await_readable", spy)
    with FlowLease(config, config.flow("a->b"), "settling"):
        first.write([(b"k", b"1")])
        second.write([(b"k", b"2")])
        with internal_topics.one_transaction():
            first.write([(b"k", b"3")])
            second.write([(b"k", b"4")])
        assert awaited == []
        assert first.read() == {b"k": b"3"}
        assert awaited == [[("settle.first", 0)]]
    assert awaited == [[("settle.first", 0)], [("settle.second", 0)]]
    assert second.read() == {b"k": b"4"}
    first.write([(b"k", b"5")])  # without a lease: unfenced, no transaction to wait for
    assert len(awaited) == 2 and first.read() == {b"k": b"5"}


@pytest.mark.broker
def test_a_holder_whose_writes_cannot_be_settled_reports_its_own_failure_and_releases(
        two_clusters: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder's body failure is the one raised, not its writes' failing to settle at the
    lease's end; that failure is raised where the body succeeded; the lease is released
    both times. The double stands for markers that never arrive, which cannot be caused."""
    config = a_to_b(two_clusters, "replication.factor = 1\n")
    flow = config.flow("a->b")
    topic = CompactedTopic(config.cluster("b"), "settle.never")

    def never(cluster, ends, timeout) -> None:
        raise internal_topics.InternalTopicError(
            f"cluster 'b': the committed write to {sorted(ends)} is not readable")

    monkeypatch.setattr(internal_topics, "await_readable", never)
    with pytest.raises(ValueError, match=r"^the body's own$"), \
            FlowLease(config, flow, "failing"):
        topic.write([(b"k", b"1")])
        raise ValueError("the body's own")
    assert FlowLease(config, flow, "x").current() is None  # released
    with pytest.raises(internal_topics.InternalTopicError,
                       match=r"^cluster 'b': the committed write to \[\('settle\.never', 0\)\]"), \
            FlowLease(config, flow, "settling"):
        topic.write([(b"k", b"2")])
    assert FlowLease(config, flow, "x").current() is None
    monkeypatch.undo()
    assert topic.read() == {b"k": b"2"}


@pytest.mark.broker
def test_internal_topics_roll_segments_so_the_cleaner_bounds_them(
        two_clusters: dict[str, str]) -> None:
    """Every internal topic mirrorflow creates, its own and MM2's, rolls a segment every 10
    minutes (the log cleaner and retention act only on rolled segments, and each run's
    tasks read a topic from its log start), but for the heartbeats topics, which flows
    mirror; a topic that exists keeps its settings."""
    config = a_to_b(two_clusters, "replication.factor = 1\n"
                    "offset-syncs.topic.replication.factor = 1\n"
                    "checkpoints.topic.replication.factor = 1\n"
                    "heartbeats.topic.replication.factor = 1\n")
    flow, target = config.flow("a->b"), config.cluster("b")
    create_topic(two_clusters["b"], "heartbeats", 1, {"cleanup.policy": "compact"})
    with FlowLease(config, flow, "r"):  # creates the leases' log
        PlanStore(config, flow).topic.ensure()
        ledger.spans_store(target, "a").ensure()
        HistoryStore(target, "a").topic.ensure()
        OffsetStore(target, "a").topic.ensure()
        offset_syncs_topic(config, flow).ensure()
        checkpoints_topic(config, flow).ensure()
        CompactedTopic(target, "heartbeats").ensure()
        heartbeats.emit(config, flow)  # b's exists; a's (the reverse pair's) is created
    compacted = {"cleanup.policy": "compact", "segment.ms": "600000"}
    for topic in ("mirrorflow-plans.a.internal", "mirrorflow-spans.a.internal",
                  "mirrorflow-history.a.internal", "mm2-offsets.a.internal",
                  "a.checkpoints.internal"):
        assert own_configs(config, "b", topic) == compacted, topic
    assert own_configs(config, "a", "mm2-offset-syncs.b.internal") == compacted
    assert own_configs(config, "b", "mirrorflow-leases.internal") == {
        "cleanup.policy": "delete", "retention.ms": "86400000", "segment.ms": "600000"}
    assert own_configs(config, "b", "heartbeats") == {"cleanup.policy": "compact"}
    # A heartbeats topic mirrorflow creates keeps Kafka's default segments, as MM2's: with
    # 10-minute ones, a soak's b->c proof failed on every retry once b's cleaner removed
    # two mirrored records of a.heartbeats between the mirror and the proof.
    assert own_configs(config, "a", "heartbeats") == {"cleanup.policy": "compact"}
    assert len(list(internal_topics.read_log(config.cluster("a"), "heartbeats"))) == 1
