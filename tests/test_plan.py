"""Planning against real brokers: discovery, remote topics, ranges, caps, data loss."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from helpers.kafka import (
    config_file,
    create_topic,
    delete_records,
    produce,
    recorded_creates,
    topics,
    varied_records,
)
from helpers.pauses import recorded_pauses
from mirrorflow.config.loader import load_config, parse_config
from mirrorflow.errors import DataLossError
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.watermarks import probe_watermarks
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import build_plan, discover_topics, plan_run
from mirrorflow.source.plan_records import Plan, PlanError, Range, deal, write_slots
from mirrorflow.source.plan_store import PlanStore

pytestmark = pytest.mark.broker


@pytest.fixture
def setup(two_clusters: dict[str, str], tmp_path: Path):
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 3)
    create_topic(a, "secret", 1)
    create_topic(a, "b.returns", 1)  # came from b: never sent back
    create_topic(a, "__internal", 1)
    produce(a, "orders", varied_records(3000), 3, **{"linger.ms": 200})
    path = config_file(tmp_path / "mm2.properties", two_clusters,
                       "a->b.enabled = true\nb->a.enabled = true\n"
                       "a->b.topics.exclude = secret\n")
    return load_config(path), a, b


def test_plan_discovers_creates_and_plans_true_ends(setup) -> None:
    config, a, b = setup
    flow = config.flow("a->b")
    plan = build_plan(config, flow, "run-1")
    assert {r.topic for r in plan.ranges} == {"orders"}
    assert sorted((r.partition, r.start, r.end, r.remote_topic, r.target_start)
                  for r in plan.ranges) == [
        (0, 0, 1000, "a.orders", 0), (1, 0, 1000, "a.orders", 0), (2, 0, 1000, "a.orders", 0)]
    assert "a.orders" in topics(b)
    assert not {"a.secret", "a.b.returns", "a.__internal"} & topics(b)


def test_remote_topic_has_the_source_partition_count(setup) -> None:
    from confluent_kafka.admin import AdminClient

    config, a, b = setup
    build_plan(config, config.flow("a->b"), "run-1")
    admin = AdminClient({"bootstrap.servers": b})
    assert len(admin.list_topics(timeout=5).topics["a.orders"].partitions) == 3


def test_cap_and_resume_from_committed_position(setup) -> None:
    config, a, b = setup
    flow = config.flow("a->b")
    OffsetStore(config.cluster("b"), "a").commit({("orders", 0): 499})
    plan = build_plan(config, flow, "run-2", max_records=300)
    by_part = {r.partition: r for r in plan.ranges}
    assert (by_part[0].start, by_part[0].end) == (500, 800)
    assert (by_part[1].start, by_part[1].end) == (0, 300)
    assert plan.positions[("orders", 0)] == 799


def test_only_topics_limits_the_plan(setup) -> None:
    config, a, b = setup
    create_topic(a, "payments", 1)
    produce(a, "payments", varied_records(10), 1)
    plan = build_plan(config, config.flow("a->b"), "r", only_topics=["payments"])
    assert {r.topic for r in plan.ranges} == {"payments"}


def test_pending_plan_is_resumed_not_replanned(setup) -> None:
    config, a, b = setup
    flow = config.flow("a->b")
    first, resumed = plan_run(config, flow, "run-1")
    assert not resumed
    produce(a, "orders", varied_records(30, 3000), 3)
    again, resumed = plan_run(config, flow, "run-1-retry")
    assert resumed and again == first
    PlanStore(config, flow).mark_committed(first, "run-1-retry")
    fresh, resumed = plan_run(config, flow, "run-2")
    assert not resumed and fresh.plan_id != first.plan_id


def test_a_commit_keeps_the_newest_plans_as_stored_without_parsing_them(setup) -> None:
    """The store keeps the newest KEEP_PLANS plans in the order they were stored, whatever
    their writers' clocks, a malformed one among them too (the pending plan alone is
    parsed, where it is read); older plans go with their results and commit marks."""
    import time

    from confluent_kafka import Producer

    from mirrorflow.lease import FlowLease
    from mirrorflow.source.plan_store import KEEP_PLANS

    config, a, b = setup
    flow = config.flow("a->b")
    store = PlanStore(config, flow)
    with FlowLease(config, flow, "pruning"):
        plan, _ = plan_run(config, flow, "run-1")
        # Older plans, stored before it: the first has a later creation time than the plan,
        # one is malformed.
        ids = [f"old{i}" for i in range(KEEP_PLANS + 2)]
        store.topic.write([(b"plan/old0", b'{"created_ms": 99999999999999}'),
                           (b"result/old0", b"{}")])
        store.topic.write([(b"plan/old1", b"{not json")])
        for i in ids[2:]:
            store.topic.write([(f"plan/{i}".encode(), b"{}"),
                               (f"committed/{i}".encode(), b'{"run_id": "r"}')])
        # Stored last by a writer whose clock is a day behind the others'.
        late = Producer({"bootstrap.servers": b})
        late.produce(store.topic.topic, key=b"plan/" + plan.plan_id.encode(),
                     value=plan.to_json().encode(),
                     timestamp=int(time.time() * 1000) - 86_400_000)
        assert late.flush(30) == 0
        store.topic.write([(b"pending", plan.plan_id.encode())])
        store.mark_committed(plan, "run-1")
    kept = store.topic.read()
    assert sorted(k.decode() for k in kept if k.startswith(b"plan/")) == sorted(
        [f"plan/{i}" for i in ids[3:]] + [f"plan/{plan.plan_id}"])
    assert b"result/old0" not in kept and b"committed/old2" not in kept
    assert b"committed/old3" in kept and b"pending" not in kept
    assert kept[f"committed/{plan.plan_id}".encode()].startswith(b'{"run_id": "run-1"')


def test_source_unreachable_names_the_cluster(tmp_path: Path) -> None:
    path = config_file(tmp_path / "c.properties", {"a": "127.0.0.1:1", "b": "127.0.0.1:2"},
                       "a->b.enabled = true")
    config = load_config(path)
    with pytest.raises(PlanError, match=r"source cluster 'a' .* is not reachable"):
        build_plan(config, config.flow("a->b"), "r")


def test_a_new_admin_clients_first_probe_finds_the_leaders_in_metadata_read_first(
        two_clusters: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka's ListOffsets, on a client whose metadata lacks the partitions' leaders,
    works on the request from the caller's thread and librdkafka's at once, and the two
    race (a SIGSEGV in four soaks' report tasks, and in a core). The probe reads a new
    client's metadata first: its ListOffsets then never asks for the leaders."""
    a = two_clusters["a"]
    create_topic(a, "fresh", 2)
    produce(a, "fresh", varied_records(6), 2)
    path = config_file(tmp_path / "debug.properties", two_clusters,
                       "a->b.enabled = true\na.admin.debug = metadata\n")
    cluster = load_config(path).cluster("a")
    with caplog.at_level(logging.DEBUG, "mirrorflow.librdkafka"):
        marks = probe_watermarks(cluster, [("fresh", 0), ("fresh", 1)])
        admin_client(cluster).poll(1)  # serves the client's log lines
    assert {tp: (w.low, w.high) for tp, w in marks.items()} == {
        ("fresh", 0): (0, 3), ("fresh", 1): (0, 3)}
    logged = caplog.text
    assert "query partition leaders" not in logged  # ListOffsets found them there
    assert "Request metadata for all topics: application requested" in logged  # the read


def test_a_probe_asks_for_its_partitions_in_calls_of_a_bounded_size(
        two_clusters: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka's CPU for one ListOffsets call grows with the square of its partitions:
    a probe sends them in calls of at most ``PARTITIONS_PER_REQUEST`` (both watermarks'),
    and every partition's answer is its own."""
    from confluent_kafka.admin import AdminClient

    from mirrorflow.kafka import watermarks

    a = two_clusters["a"]
    create_topic(a, "wide", 7)
    produce(a, "wide", varied_records(7), 7)
    produce(a, "wide", varied_records(2), 1)  # two more records in partition 0
    calls: list[int] = []
    list_offsets = AdminClient.list_offsets

    def recorded(self, requests, **kwargs):
        calls.append(len(requests))
        return list_offsets(self, requests, **kwargs)

    monkeypatch.setattr(watermarks, "PARTITIONS_PER_REQUEST", 3)
    monkeypatch.setattr(AdminClient, "list_offsets", recorded)
    cluster = load_config(config_file(tmp_path / "c.properties", two_clusters,
                                      "a->b.enabled = true")).cluster("a")
    marks = probe_watermarks(cluster, [("wide", p) for p in range(7)])
    assert calls == [3, 3, 1, 3, 3, 1]
    assert {p: (w.low, w.high) for (_, p), w in marks.items()} == {
        0: (0, 3), **{p: (0, 1) for p in range(1, 7)}}


def test_a_plan_reads_the_sources_metadata_once_for_its_topics_and_its_probe(
        two_clusters: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The plan lists the source's topics; its probe of their watermarks through the same
    client finds the leaders there, and reads the metadata no second time."""
    a = two_clusters["a"]
    create_topic(a, "fresh", 2)
    produce(a, "fresh", varied_records(6), 2)
    path = config_file(tmp_path / "debug.properties", two_clusters,
                       "a->b.enabled = true\na.admin.debug = metadata\n")
    config = load_config(path)
    with caplog.at_level(logging.DEBUG, "mirrorflow.librdkafka"):
        found = discover_topics(config, config.flow("a->b"))
        marks = probe_watermarks(config.cluster("a"), [("fresh", 0), ("fresh", 1)])
        admin_client(config.cluster("a")).poll(1)  # serves the client's log lines
    assert found == {"fresh": 2}
    assert [w.high for w in marks.values()] == [3, 3]
    logged = caplog.text
    assert "query partition leaders" not in logged
    # (a request can be logged twice, once to the bootstrap address; its answer once)
    assert logged.count("Received metadata: application requested") == 1


def test_truncated_source_is_detected(setup) -> None:
    config, a, b = setup
    OffsetStore(config.cluster("b"), "a").commit({("orders", 0): 5000})
    with pytest.raises(PlanError, match=r"orders\[0\] ends at offset 1000 but offset 5000"):
        build_plan(config, config.flow("a->b"), "r")


def _retention(a: str, low: int) -> None:
    """Retention on the source, by DeleteRecords: every orders partition starts at ``low``."""
    for partition in range(3):
        delete_records(a, "orders", partition, low)


def test_retention_gap_fails_naming_the_range(setup) -> None:
    config, a, b = setup
    OffsetStore(config.cluster("b"), "a").commit({("orders", 1): 99})
    _retention(a, 250)
    with pytest.raises(DataLossError, match=r"orders\[1\]: offsets 100\.\.249 were removed"):
        build_plan(config, config.flow("a->b"), "r")


def test_retention_gap_recorded_when_fail_on_data_loss_false(setup, tmp_path):
    config, a, b = setup
    text = Path(config.path).read_text() + "a->b.failOnDataLoss = false\n"
    path = tmp_path / "lenient.properties"
    path.write_text(text)
    config = load_config(path)
    OffsetStore(config.cluster("b"), "a").commit({("orders", 1): 99})
    _retention(a, 250)
    plan = build_plan(config, config.flow("a->b"), "r")
    assert [(g.topic, g.partition, g.start, g.end) for g in plan.gaps] == [
        ("orders", 1, 100, 250)]
    ranges = {r.partition: (r.start, r.end) for r in plan.ranges}
    assert ranges[1] == (250, 1000)
    assert ranges[0] == (250, 1000)  # never-mirrored partitions start at the log start


def test_replication_factor_minus_one_is_the_brokers_default(two_clusters, tmp_path) -> None:
    """MM2 passes -1 to the broker, which takes its default.replication.factor."""
    from confluent_kafka.admin import AdminClient

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(10), 2)
    path = tmp_path / "mm2.properties"
    path.write_text(f"clusters = a, b\na.bootstrap.servers = {a}\nb.bootstrap.servers = {b}\n"
                    "a->b.enabled = true\nreplication.factor = -1\n"
                    "offset-syncs.topic.replication.factor = -1\n"
                    "checkpoints.topic.replication.factor = -1\n"
                    "heartbeats.topic.replication.factor = -1\n")
    config = load_config(path)
    assert config.flow("a->b").get("replication.factor") == -1
    plan, _ = plan_run(config, config.flow("a->b"), "run-1")
    assert sorted((r.topic, r.partition, r.end) for r in plan.ranges) == [
        ("orders", 0, 5), ("orders", 1, 5)]
    described = AdminClient({"bootstrap.servers": b}).list_topics(timeout=10).topics
    assert [len(p.replicas) for p in described["a.orders"].partitions.values()] == [1, 1]


def test_ranges_are_dealt_to_write_slots_by_size_and_limit() -> None:
    """Few large ranges get a slot each; many small ones share every slot evenly, a
    topic's together where there is room; a slot keeps to one max.message.bytes while
    there is room; a plan keeps its slots through JSON (every attempt writes a range with
    the same transactional id)."""
    big = [Range("bench", p, 0, 250_000, "a.bench", 0) for p in range(8)]
    assert sorted(r.slot for r in deal(big, 8)) == list(range(8))
    small = [Range(f"t{i // 4}", i % 4, 10, 13, f"a.t{i // 4}", 0) for i in range(1000)]
    dealt = deal(small, 8)
    assert [sum(1 for r in dealt if r.slot == s) for s in range(8)] == [125] * 8
    # A topic's partitions share a slot while it has room: the last 2 of 250 even out.
    slots_of = {}
    for r in dealt:
        slots_of.setdefault(r.topic, set()).add(r.slot)
    assert sorted(len(s) for s in slots_of.values()) == [1] * 248 + [4] * 2
    mixed = [Range("a", 0, 0, 100, "a.a", 0, 1_048_588), Range("b", 0, 0, 90, "a.b", 0, 4_194_304),
             Range("c", 0, 0, 80, "a.c", 0, 1_048_588), Range("d", 0, 0, 70, "a.d", 0, 4_194_304)]
    assert [r.slot for r in deal(mixed, 2)] == [0, 1, 0, 1]
    plan = Plan("p", "a->b", "run-1", 0, tuple(dealt[:3]))
    assert [r.slot for r in Plan.from_json(plan.to_json()).ranges] == [r.slot for r in dealt[:3]]


def test_a_small_plan_gets_as_few_write_slots_as_its_offsets_and_ranges_need() -> None:
    """A slot per mirrorflow.write.records.per.task offsets or 500 ranges, whichever asks
    more, at least one, at most mirrorflow.write.tasks: 8 records over 8 partitions are
    one task (and one producer), a backlog of 2,000,000 gets every slot, 1,000 trickling
    partitions get two."""
    base = ("clusters = a, b\na.bootstrap.servers = a:9092\nb.bootstrap.servers = b:9092\n"
            "a->b.enabled = true\n")
    flow = parse_config(base).flow("a->b")
    assert write_slots(flow, [1] * 8) == 1
    assert write_slots(flow, []) == 1
    assert write_slots(flow, [250_000] * 8) == 8
    assert write_slots(flow, [50_000, 1]) == 2
    assert write_slots(flow, [3] * 1000) == 2
    assert write_slots(flow, [1] * 10_000) == 8
    tuned = parse_config(base + "a->b.mirrorflow.write.records.per.task = 1\n"
                         "a->b.mirrorflow.write.tasks = 3\n").flow("a->b")
    assert write_slots(tuned, [1] * 8) == 3
    assert write_slots(tuned, [1, 1]) == 2


def test_offsets_ask_for_no_more_slots_than_sparks_cores_unless_write_tasks_is_set() -> None:
    """Where Spark's cores are known, a backlog's offsets get a slot per core (8 slots on
    2 cores ran in four waves, each with its own clients); the ranges' own count still
    asks for its slots; a mirrorflow.write.tasks the config sets is taken as it is."""
    base = ("clusters = a, b\na.bootstrap.servers = a:9092\nb.bootstrap.servers = b:9092\n"
            "a->b.enabled = true\n")
    flow = parse_config(base).flow("a->b")
    assert write_slots(flow, [250_000] * 8, cores=2) == 2
    assert write_slots(flow, [250_000] * 8, cores=16) == 8
    assert write_slots(flow, [1] * 8, cores=2) == 1
    assert write_slots(flow, [1] * 10_000, cores=2) == 8
    assert write_slots(flow, [1] * 1_500, cores=1) == 3
    set_to_8 = parse_config(base + "mirrorflow.write.tasks = 8\n").flow("a->b")
    assert write_slots(set_to_8, [250_000] * 8, cores=2) == 8


def test_sparks_cores_are_known_from_a_local_master_only() -> None:
    """local[N], local and local[*] (this process's cores), a Connect server on a loopback
    address (this machine's); a cluster's or a remote server's are not known."""
    from mirrorflow.spark.session import machine_cores, spark_cores

    assert machine_cores() == len(os.sched_getaffinity(0))
    assert [spark_cores(m) for m in ("local", "local[3]", "local[4,2]", "local[*]")] == [
        1, 3, 4, machine_cores()]
    assert spark_cores("sc://127.0.0.1:15002/;session_id=x") == machine_cores()
    assert spark_cores("sc://localhost") == machine_cores()
    assert [spark_cores(m) for m in ("sc://spark.example:15002", "yarn", "spark://h:7077",
                                     "k8s://https://k:443", "local-cluster[2,1,1024]")] == [
        None] * 5


def test_a_dags_plan_counts_the_cores_of_its_spark_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan task knows Spark's cores from the flow's connection, as the mirror task
    will run it: a local master's, a loopback Connect server's; not a cluster's, nor a
    missing connection's (the mirror task names that)."""
    from mirrorflow.airflow.operators import plan_limits
    from mirrorflow.dev.connect_server import airflow_connection
    from mirrorflow.spark.session import machine_cores

    monkeypatch.setenv("AIRFLOW_CONN_MF_LOCAL3", '{"conn_type": "spark", "host": "local[3]"}')
    monkeypatch.setenv("AIRFLOW_CONN_MF_YARN", '{"conn_type": "spark", "host": "yarn"}')
    monkeypatch.setenv("AIRFLOW_CONN_MF_CONNECT", airflow_connection("127.0.0.1", 15002))
    assert plan_limits({"topics": ["t"]}, "mf_local3") == {
        "only_topics": ["t"], "max_records": None, "cores": 3}
    assert plan_limits({}, "mf_yarn")["cores"] is None
    assert plan_limits({}, "mf_connect")["cores"] == machine_cores()
    assert plan_limits({}, "mf_missing")["cores"] is None


def test_remote_topics_are_created_and_grown_in_requests_a_kraft_controller_accepts() -> None:
    """A first run of 2,500 topics of 4 partitions would be one CreateTopics request of
    12,500 metadata records, which KRaft refuses past 10,000: it goes in requests of at most
    5,000 records (a topic, its partitions and configs), in order; a larger item alone.
    Growing topics counts the partitions added."""
    from confluent_kafka.admin import NewTopic

    from mirrorflow.kafka.clients import metadata_requests

    def created(t):
        return 1 + t.num_partitions + len(t.config or {})

    new = [NewTopic(f"a.t{i}", 4, 1, config={"cleanup.policy": "delete"}) for i in range(2500)]
    requests = metadata_requests(new, created)
    assert [len(r) for r in requests] == [833, 833, 833, 1]
    assert [t for r in requests for t in r] == new
    huge = [NewTopic("a.small", 1, 1), NewTopic("a.huge", 6000, 1), NewTopic("a.next", 1, 1)]
    assert [[t.topic for t in r] for r in metadata_requests(huge, created)] == [
        ["a.small"], ["a.huge"], ["a.next"]]
    counts, current = {"x": 4000, "y": 2000, "z": 10}, {"x": 1000, "y": 1, "z": 5}
    assert metadata_requests(list(counts), lambda t: counts[t] - current[t]) == [
        ["x", "y"], ["z"]]  # 3,000 + 1,999 new partitions, then 5


def test_latest_reset_starts_new_partitions_at_their_end_and_none_refuses(
        two_clusters: dict[str, str], tmp_path: Path) -> None:
    """MM2's ``auto.offset.reset = latest``: what a new partition held when the flow first
    saw it is left out (a named ``new`` break), what comes after is mirrored, a partition
    with a position is never moved; ``none`` fails the plan naming the partition."""
    from mirrorflow.run import commit_step

    a = two_clusters["a"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(40), 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "a.consumer.auto.offset.reset = latest\n"
                       "emit.heartbeats.enabled = false\n")
    config = load_config(path)
    flow = config.flow("a->b")
    first, _ = plan_run(config, flow, "run-1")
    assert first.ranges == ()
    assert [(b.topic, b.partition, b.cause, b.start, b.end) for b in first.breaks] == [
        ("orders", 0, "new", 0, 20), ("orders", 1, "new", 0, 20)]
    assert first.breaks[0].detail == (
        "a topic new to the flow: mirrored from its end (a.consumer.auto.offset.reset = "
        "latest, as MM2), offsets 0..19 left out")
    PlanStore(config, flow).save_empty_result(first.plan_id)
    commit_step(config, flow, first, "run-1")

    produce(a, "orders", varied_records(6, 40), 2)
    second, _ = plan_run(config, flow, "run-2")
    assert sorted((r.partition, r.start, r.end) for r in second.ranges) == [
        (0, 20, 23), (1, 20, 23)]
    assert second.breaks == ()
    create_topic(a, "heartbeats", 1)  # a run waits for its heartbeat: from the start
    produce(a, "heartbeats", varied_records(1), 1)
    dry = build_plan(config, flow, "run-dry", dry_run=True)
    assert [(r.topic, r.start, r.end) for r in dry.ranges if r.topic == "heartbeats"] == [
        ("heartbeats", 0, 1)]

    create_topic(a, "later", 1)
    produce(a, "later", varied_records(5), 1)
    none = config_file(tmp_path / "none.properties", two_clusters, "a->b.enabled = true",
                       "a->b.source.consumer.auto.offset.reset = none\n"
                       "emit.heartbeats.enabled = false\n")
    with pytest.raises(PlanError) as info:
        build_plan(load_config(none), load_config(none).flow("a->b"), "run-3")
    assert str(info.value).startswith(
        "source later[0] is a topic new to the flow and has no position, and "
        "a->b.source.consumer.auto.offset.reset = none starts no partition")


def test_a_first_plan_creates_its_state_topics_before_its_remote_topics(
        setup, monkeypatch) -> None:
    """A broker opens new partitions in the order they were created: the run's state topics
    on the target go first, so that its plan's save does not wait for thousands of remote
    partitions. A plan that creates nothing asks nothing of them."""
    config, a, b = setup
    requests = recorded_creates(monkeypatch)
    flow = config.flow("a->b")
    build_plan(config, flow, "run-1")
    state = {"mirrorflow-plans.a.internal", "mirrorflow-spans.a.internal",
             "mm2-offsets.a.internal", "mirrorflow-history.a.internal"}
    assert requests == [sorted(state), ["a.orders"]]
    assert state <= topics(b)
    # Offset syncs go to the source by default (MM2's), written when the run commits.
    assert "mm2-offset-syncs.b.internal" not in topics(a)
    requests.clear()
    build_plan(config, flow, "run-2")
    assert requests == []


def test_a_plan_waits_for_its_new_partitions_asking_at_most_twice_a_second(
        two_clusters, monkeypatch, caplog) -> None:
    """The wait for the broker to open the partitions a plan created asks again at
    doubling pauses up to half a second, and after its time leaves it to the producers,
    naming the partition."""
    from mirrorflow.source import plan

    config = parse_config(f"clusters = a, b\na.bootstrap.servers = {two_clusters['a']}\n"
                          f"b.bootstrap.servers = {two_clusters['b']}\na->b.enabled = true\n")
    pauses = recorded_pauses(monkeypatch)
    monkeypatch.setattr(plan, "OPENED_TIMEOUT_S", 2.0)
    with caplog.at_level(logging.WARNING, logger="mirrorflow.source.plan"):
        plan._await_opened(config.cluster("b"), [("a.never", 0)])
    assert pauses[:7] == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.5]
    assert set(pauses[6:]) == {0.5}
    assert ["a.never[0]" in m and m.endswith("; the mirror's producers wait for them")
            for m in caplog.messages] == [True]


def test_the_wait_for_new_partitions_asks_for_a_sample_of_them_until_it_is_served(
        two_clusters, monkeypatch, caplog) -> None:
    """While the broker opens the partitions a plan created, the wait asks for a sample
    spread over them (at most 64), then once for all of them; every one is served, and
    the log says when."""
    from mirrorflow.source import plan

    config = parse_config(f"clusters = a, b\na.bootstrap.servers = {two_clusters['a']}\n"
                          f"b.bootstrap.servers = {two_clusters['b']}\na->b.enabled = true\n")
    asked: list[list] = []
    served: dict = {}

    def recorded(cluster, partitions, **kwargs):
        asked.append(list(partitions))
        ends = probe_ends(cluster, partitions, **kwargs)
        served.update(ends)
        return ends

    probe_ends = plan.log_ends
    monkeypatch.setattr(plan, "log_ends", recorded)
    create_topic(two_clusters["b"], "a.fresh", 100)
    created = [("a.fresh", p) for p in range(100)]
    with caplog.at_level(logging.INFO, logger="mirrorflow.source.plan"):
        plan._await_opened(config.cluster("b"), created)
        plan._await_opened(config.cluster("b"), [])  # nothing created: nothing asked
    assert asked == [created[::2], created]
    assert served == {tp: 0 for tp in created}
    assert [re.fullmatch(r"cluster 'b' serves the 100 partitions this plan created, "
                         r"after \d+\.\d s", m) is not None for m in caplog.messages] == [True]


def test_offset_syncs_on_the_target_are_created_with_the_state_topics_when_emitted(
        two_clusters, tmp_path, monkeypatch) -> None:
    requests = recorded_creates(monkeypatch)
    state = sorted(["mirrorflow-plans.a.internal", "mirrorflow-spans.a.internal",
                    "mm2-offsets.a.internal", "mirrorflow-history.a.internal"])
    for emitted, topic, first in (("false", "other", state),
                                  ("true", "orders", ["mm2-offset-syncs.a.internal"])):
        create_topic(two_clusters["a"], topic, 1)
        config = load_config(config_file(
            tmp_path / f"{emitted}.properties", two_clusters,
            f"a->b.enabled = true\na->b.topics = {topic}\n"
            "offset-syncs.topic.location = target\n"
            f"emit.offset-syncs.enabled = {emitted}\n"))
        requests.clear()
        build_plan(config, config.flow("a->b"), "run-1")
        assert requests == [first, [f"a.{topic}"]]
