"""Faults against Apache Kafka and real Spark (the session's, so that no test pays a JVM
start): each leaves the flow's positions where they were, and the next run finishes the
job with every record on the target exactly once."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.kafka import commit, config_file, create_topic, produce, read_partition, varied_records
from mirrorflow.airflow.sensors import check_clusters  # with the module: see its test
from mirrorflow.checkpoint.remote import latest_checkpoints
from mirrorflow.config.loader import load_config
from mirrorflow.dev.localcluster import start, stop
from mirrorflow.kafka.clients import ClusterUnreachableError
from mirrorflow.kafka.reachability import check_reachable
from mirrorflow.kafka.watermarks import WatermarkError, probe_watermarks
from mirrorflow.lease import FlowLease, LeaseHeldError
from mirrorflow.quality import reports
from mirrorflow.run import run_cycle
from mirrorflow.source.ledger import progress_group
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import plan_run
from mirrorflow.source.plan_records import PlanError
from mirrorflow.source.plan_store import PlanStore
from mirrorflow.source.write_task import RecordTooLargeError, WriteError
from mirrorflow.spark.mirror import SourceTopicGoneError, mirror

pytestmark = [pytest.mark.broker, pytest.mark.spark]


@pytest.fixture
def brokers(two_clusters, kafka) -> tuple[dict[str, str], dict]:
    return two_clusters, kafka


def positions(path: Path) -> dict:
    return OffsetStore(load_config(path).cluster("b"), "a").positions()


def test_target_broker_killed_during_the_write_then_restarted(spark, brokers,
                                                              tmp_path: Path) -> None:
    """The target broker dies (SIGKILL) in the middle of the write and is started again,
    its log dirs kept: the retry resumes the plan from the positions committed with the
    data, and every record is on the target once."""
    (bootstraps, kafka), total = brokers, 200_000
    a, b = bootstraps["a"], bootstraps["b"]
    create_topic(a, "clicks", 2)
    produce(a, "clicks", [(f"k{i}".encode(), b"x" * 512, None, 1_700_000_000_000 + i)
                          for i in range(total)], 2)
    settings = "emit.heartbeats.enabled = false\nmirrorflow.transaction.records = 20000\n"
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true",
                       settings + "b.producer.delivery.timeout.ms = 5000\n"
                                  "b.producer.request.timeout.ms = 3000\n")
    config = load_config(path)
    flow = config.flow("a->b")
    plan, _ = plan_run(config, flow, "run-1")
    target_pid = kafka["b"].pid()
    killed = threading.Event()

    def kill_mid_write() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ends = probe_watermarks(config.cluster("b"), [("a.clicks", 0), ("a.clicks", 1)])
            if sum(m.high for m in ends.values()) > 50_000:  # transactions committed
                os.kill(target_pid, signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=kill_mid_write)
    watcher.start()
    try:
        with pytest.raises(WriteError, match=r"writing clicks\[\d\] -> a\.clicks\[\d\]: "):
            mirror(spark, config, flow, plan)
    finally:
        watcher.join()
        start(kafka["b"])  # same log dirs: what was acknowledged is still there
    assert killed.is_set(), "the write finished before the target could be stopped"
    assert positions(path) == {}  # nothing committed

    # As an Airflow retry delay would: the restarted broker recovers its logs and loads its
    # group coordinator (seconds, more on a busy machine). The killed writer's transaction
    # may still be open there (when the kill came after its offsets were sent), holding its
    # position unstable for up to transaction.timeout.ms: the retry does not wait for that,
    # its writers fence the transaction and resume.
    _wait_for_group_coordinator(config.cluster("b"), "a", kafka["b"].log_file, deadline_s=180)
    # The 5 s delivery timeout served the kill; on a restarted broker of a busy machine a
    # lease or state write can take longer, so the retry runs with the default timeouts.
    config_file(path, bootstraps, "a->b.enabled = true", settings)
    result = run_cycle(path, "a->b", run_id="run-2", spark=spark)  # the retry resumes the plan
    # Written before the crash, kept, and told apart from what the retry wrote.
    assert result.resumed and result.already_there > 0
    assert result.records + result.already_there == total
    assert result.already_there == sum(p.skipped for p in result.partitions)
    # Counted once, by the run that committed the plan.
    counters = json.loads((reports.flow_dir("a->b") / "metrics.json").read_text())["counters"]
    assert sum(v for k, v in counters.items() if k.startswith("record_count{")) == total
    for p in range(2):
        assert read_partition(b, "a.clicks", p) == read_partition(a, "clicks", p)
    assert positions(path) == {("clicks", 0): total // 2 - 1, ("clicks", 1): total // 2 - 1}


def _wait_for_group_coordinator(target, source_alias: str, log_file: Path,
                                deadline_s: float) -> None:
    """Until the progress group's coordinator answers a read that does not wait for open
    transactions (read_uncommitted: no KIP-447 stable-offset wait)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": target.bootstrap_servers,
                         "group.id": progress_group(source_alias),
                         "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + deadline_s
    try:
        while True:
            try:
                consumer.committed([TopicPartition("a.clicks", 0)], timeout=5)
                return
            except KafkaException:
                assert time.monotonic() < deadline, (
                    "the restarted target never served offsets; its log ends:\n"
                    + "\n".join(log_file.read_text(errors="replace").splitlines()[-40:]))
    finally:
        consumer.close()


def _check_clusters_until_back(path: Path, caplog: pytest.LogCaptureFixture, after_s: float,
                               bring_back: Callable[[], None]) -> list[str]:
    """A run's check of a->b's clusters while b is away, ``bring_back`` called by another
    thread ``after_s`` seconds in (always, even if the check fails): asserts the check
    returned only after that, and returns what the reachability check logged."""
    back: list[float] = []

    def later() -> None:
        time.sleep(after_s)
        back.append(time.monotonic())
        bring_back()

    thread = threading.Thread(target=later)
    thread.start()
    try:
        with caplog.at_level(logging.INFO, logger="mirrorflow.kafka.reachability"):
            check_clusters(str(path), "a->b")
        answered = time.monotonic()
    finally:
        thread.join()
    assert back and answered > back[0]
    return [r.getMessage() for r in caplog.records if r.name == "mirrorflow.kafka.reachability"]


def test_a_plan_that_meets_a_target_restart_goes_on_once_it_answers(
        brokers, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The target broker stops as a run's plan begins and starts again 3 s later: the
    plan's check of its clusters asks every second and goes on once the target answers,
    where it failed at once and waited for Airflow's retry."""
    # check_clusters is imported with the module: importing Airflow configures logging,
    # which drops the handler of pytest's caplog when done inside a test.
    bootstraps, kafka = brokers
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true",
                       "mirrorflow.cluster.wait.seconds = 60\n")
    assert stop(kafka["b"])
    logged = _check_clusters_until_back(path, caplog, 3, lambda: start(kafka["b"]))  # same dirs
    assert logged == [
        f"cluster 'b' ({bootstraps['b']}) is not reachable: no broker answers there; asking "
        "every second for up to 60 s", "cluster 'b' answers again"]
    # As the test above: later tests of this session find its group coordinator loaded.
    _wait_for_group_coordinator(load_config(path).cluster("b"), "a", kafka["b"].log_file,
                                deadline_s=180)


def test_a_plan_that_meets_a_broker_answering_nothing_goes_on_once_it_answers(
        brokers, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The target broker is paused (SIGSTOP: the kernel still takes its connections) for
    15 s as a run's plan begins: the check calls it down and asks every second, as for a
    restart, and goes on once it answers; it called it a listener of another protocol and
    gave up after its 10 s grace."""
    bootstraps, kafka = brokers
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true",
                       "mirrorflow.cluster.wait.seconds = 60\n")
    pid = kafka["b"].pid()
    os.kill(pid, signal.SIGSTOP)
    logged = _check_clusters_until_back(path, caplog, 15, lambda: os.kill(pid, signal.SIGCONT))
    assert logged == [
        f"cluster 'b' ({bootstraps['b']}) is not reachable: no broker answers there; asking "
        "every second for up to 60 s", "cluster 'b' answers again"]


def test_source_unreachable_at_planning_names_the_cluster(brokers, tmp_path: Path) -> None:
    bootstraps, _ = brokers
    dead = {"a": "127.0.0.1:1", "b": bootstraps["b"]}
    path = config_file(tmp_path / "mm2.properties", dead, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    with pytest.raises(PlanError, match=r"source cluster 'a' \(127\.0\.0\.1:1\) is not "
                                        r"reachable"):
        run_cycle(path, "a->b")
    config = load_config(path)
    assert positions(path) == {} and PlanStore(config, config.flow("a->b")).pending() is None


def test_source_topic_deleted_between_planning_and_reading(spark, brokers,
                                                           tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    bootstraps, _ = brokers
    a, b = bootstraps["a"], bootstraps["b"]
    create_topic(a, "orders", 1)
    create_topic(a, "doomed", 1)
    produce(a, "orders", varied_records(300), 1)
    produce(a, "doomed", varied_records(50), 1)
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true")
    config = load_config(path)
    flow = config.flow("a->b")
    plan, _ = plan_run(config, flow, "run-1")
    assert {r.topic for r in plan.ranges} == {"orders", "doomed"}
    admin = AdminClient({"bootstrap.servers": a})
    admin.delete_topics(["doomed"])["doomed"].result(10)
    with pytest.raises(SourceTopicGoneError, match=r"source topic 'doomed' no longer exists "
                                                   r"on cluster 'a': it was deleted after "
                                                   r"planning"):
        mirror(spark, config, flow, plan)
    assert positions(path) == {}

    result = run_cycle(path, "a->b", run_id="run-2", spark=spark)
    assert result.resumed and [p.topic for p in result.partitions] == ["orders"]
    assert read_partition(b, "a.orders", 0) == read_partition(a, "orders", 0)
    assert positions(path) == {("orders", 0): 299}


def test_source_topic_recreated_with_fewer_records_is_mirrored_from_its_start(
        spark, brokers, tmp_path: Path) -> None:
    """A topic deleted and created again has a new topic id: the plan mirrors the new
    incarnation from its log start and names the break, instead of failing on the old
    incarnation's position (or, refilled past it, skipping records)."""
    from confluent_kafka.admin import AdminClient

    bootstraps, _ = brokers
    a, b = bootstraps["a"], bootstraps["b"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(100), 1)
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    assert run_cycle(path, "a->b", spark=spark).records == 100
    admin = AdminClient({"bootstrap.servers": a})
    admin.delete_topics(["orders"])["orders"].result(10)
    time.sleep(0.5)
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(10, 500), 1)
    again = run_cycle(path, "a->b", run_id="run-2", spark=spark)
    assert again.records == 10 and again.validation["success"]
    assert [(b_["cause"], b_["start"], b_["end"]) for b_ in again.breaks] == [
        ("recreated", 0, 0)]
    assert "old incarnation was accounted for up to offset 99" in again.breaks[0]["detail"]
    assert read_partition(b, "a.orders", 0)[100:] == read_partition(a, "orders", 0)
    assert positions(path) == {("orders", 0): 9}


def test_record_larger_than_the_target_max_message_bytes_names_its_offset(
        spark, brokers, tmp_path: Path) -> None:
    bootstraps, _ = brokers
    a = bootstraps["a"]
    create_topic(a, "orders", 1)
    create_topic(bootstraps["b"], "a.orders", 1, {"max.message.bytes": "20000"})
    records = varied_records(30)
    records[17] = (b"big", b"x" * 50_000, None, 1_700_000_000_017)
    produce(a, "orders", records, 1)
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true")
    with pytest.raises(RecordTooLargeError,
                       match=r"cannot write orders\[0\] offset 17 to a\.orders: .*"
                             r"larger than a\.orders's max\.message\.bytes = 20000"):
        run_cycle(path, "a->b", spark=spark)
    assert positions(path) == {}


def test_two_runs_at_once_one_waits_or_fails_never_both(brokers, tmp_path: Path) -> None:
    """A real ``mirrorflow run`` (spark-submit) holds the flow; a second run fails naming
    it without writing, and a patient one waits, then finds nothing left to do."""
    bootstraps, _ = brokers
    a, b = bootstraps["a"], bootstraps["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(2000), 2)
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\nmirrorflow.lease.wait.seconds = 300\n")
    config = load_config(path)
    flow = config.flow("a->b")
    first = subprocess.Popen([sys.executable, "-m", "mirrorflow.cli", "run", str(path),
                              "--flow", "a->b", "--run-id", "first"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while FlowLease(config, flow, "probe").current() is None:
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.2)
        with pytest.raises(LeaseHeldError, match=r"flow a->b is being run by first"):
            FlowLease(config, flow, "second", wait_s=0).__enter__()
        patient = run_cycle(path, "a->b", run_id="third")  # waits, then runs
    finally:
        assert first.wait(240) == 0, first.stderr.read()
    assert patient.records == 0
    for p in range(2):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)


def test_malformed_internal_records_are_skipped_with_warnings(
        spark, brokers, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from confluent_kafka import KafkaError, Producer

    from mirrorflow.source import offset_syncs

    bootstraps, _ = brokers
    a, b = bootstraps["a"], bootstraps["b"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(40), 1)
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true",
                       "emit.checkpoints.interval.seconds = 0\n")
    config = load_config(path)
    flow = config.flow("a->b")
    commit(a, "billing", "orders", {0: 20})
    run_cycle(path, "a->b", run_id="run-1", spark=spark)  # creates every topic below
    garbage = [(b"\x00\x01", b"\xff"), (None, b"not json"), (b"k", None), (b"x" * 3, b"{")]
    refused: dict[str, list] = {}

    def delivered(err, msg) -> None:
        if err is not None:
            refused.setdefault(msg.topic(), []).append((msg.key(), err.code()))

    for bootstrap, topic in ((a, "mm2-offset-syncs.b.internal"), (b, "mm2-offsets.a.internal"),
                             (b, "a.checkpoints.internal"), (b, "mirrorflow-leases.internal"),
                             (b, "mirrorflow-plans.a.internal"), (a, "heartbeats"),
                             (b, "mirrorflow-spans.a.internal"),
                             (b, "mirrorflow-history.a.internal")):
        producer = Producer({"bootstrap.servers": bootstrap})
        for key, value in garbage:
            # One record a batch: the broker refuses a whole batch for one keyless record
            # in a compacted topic, which took the record after it down too.
            producer.produce(topic, key=key, value=value, on_delivery=delivered)
            assert producer.flush(60) == 0, topic
    # Kafka keeps keyless records out of compacted topics: only the leases' log (time-bounded)
    # can hold one; every other piece of garbage is there to be read.
    assert refused == {t: [(None, KafkaError.INVALID_RECORD)] for t in (
        "mm2-offset-syncs.b.internal", "mm2-offsets.a.internal", "a.checkpoints.internal",
        "mirrorflow-plans.a.internal", "heartbeats", "mirrorflow-spans.a.internal",
        "mirrorflow-history.a.internal")}
    produce(a, "orders", varied_records(10, 40), 1)
    commit(a, "billing", "orders", {0: 30})
    with caplog.at_level(logging.WARNING):
        result = run_cycle(path, "a->b", run_id="run-2", spark=spark)
        assert result.checkpoints == 1
        assert offset_syncs.read(config, flow)
    # The garbage in ``heartbeats`` is mirrored too, as MM2 mirrors any record there.
    assert sum(p.records for p in result.partitions if p.topic == "orders") == 10
    assert positions(path)[("orders", 0)] == 49
    assert latest_checkpoints(config.cluster("b"), "a", flow.policy())[
        ("billing", "a.orders", 0)].upstream_offset == 30
    assert ("mm2-offsets.a.internal: skipped a record that is not an MM2 source offset: "
            "b'xxx'") in caplog.text


def test_a_truncated_pending_plan_is_a_named_error_not_a_traceback(brokers,
                                                                    tmp_path: Path) -> None:
    """Skipping it would be unsafe: which records its attempt wrote is unknown."""
    bootstraps, _ = brokers
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true")
    config = load_config(path)
    store = PlanStore(config, config.flow("a->b"))
    store.topic.ensure()
    store.topic.write([(b"plan/p1", b'{"plan_id": "p1", "ranges": [{"top'), (b"pending", b"p1")])
    with pytest.raises(PlanError, match=r"plan 'p1' in mirrorflow-plans\.a\.internal on cluster "
                                        r"'b' is malformed .*reset the flow's positions"):
        plan_run(config, config.flow("a->b"), "r")


def _listening_pid(bootstrap: str) -> int | None:
    """The process listening on the port of ``bootstrap`` (host:port)."""
    import psutil

    port = int(bootstrap.rpartition(":")[2])
    return next((c.pid for c in psutil.net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port), None)


def test_a_broker_that_stops_answering_fails_the_watermark_probe_by_name(
        brokers, tmp_path: Path) -> None:
    """A target broker that keeps its connections but answers nothing (SIGSTOP) fails a
    watermark probe within its timeout with a one-line error naming the cluster and the
    partitions, not a bare ``TimeoutError`` (a soak's ``report`` met one in b's outage),
    and the reachability check calls it down (a task's retry waits for it), not a
    listener of another protocol."""
    bootstraps, kafka = brokers
    create_topic(bootstraps["b"], "a.orders", 2)
    path = config_file(tmp_path / "mm2.properties", bootstraps, "a->b.enabled = true")
    cluster = load_config(path).cluster("b")
    assert set(probe_watermarks(cluster, [("a.orders", 0), ("a.orders", 1)])) == {
        ("a.orders", 0), ("a.orders", 1)}
    pid = kafka["b"].pid()
    # The JVM paused below is the one that serves b's port: once the probe was answered
    # while it was paused, as by another broker on that port.
    assert _listening_pid(bootstraps["b"]) == pid
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(WatermarkError) as failed:
            probe_watermarks(cluster, [("a.orders", 0), ("a.orders", 1)], timeout=3.0)
        waited = time.monotonic() - started
        # The kernel still takes its connections: the check must not call that a listener
        # of another protocol (it did: "the broker closed it at the first request").
        with pytest.raises(ClusterUnreachableError) as unreachable:
            check_reachable(cluster, timeout=3.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert (str(unreachable.value), unreachable.value.cause) == (
        f"cluster 'b' ({bootstraps['b']}) is not reachable: no broker answers there", "down")
    assert str(failed.value) == (
        f"cluster 'b' ({bootstraps['b']}): no answer within 3 s listing the offsets of "
        "a.orders[0] and 1 more")
    assert 3.0 <= waited < 3.0 + 5.0


def test_a_source_that_stops_answering_fails_the_checkpoints_by_name(
        brokers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing consumer groups on a source that answers nothing returns no group and an
    error: the checkpoint step fails naming the cluster, instead of checkpointing no
    group in silence. An admin answer that does not come within its wait fails naming
    the cluster and what was asked, not with a bare ``TimeoutError``."""
    from confluent_kafka import TopicCollection

    from mirrorflow.checkpoint import checkpoints
    from mirrorflow.kafka import clients

    bootstraps, kafka = brokers
    create_topic(bootstraps["b"], "orders", 1)
    commit(bootstraps["b"], "app", "orders", {0: 0})
    path = config_file(tmp_path / "mm2.properties", bootstraps, "b->a.enabled = true")
    config = load_config(path)
    flow = config.flow("b->a")
    assert checkpoints.select_groups(config, flow) == ["app"]
    monkeypatch.setattr(checkpoints, "TIMEOUT_S", 2.0)  # librdkafka's 30 s in a test's time
    b = config.cluster("b")
    pid = kafka["b"].pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(clients.ClusterUnreachableError) as listing:
            checkpoints.select_groups(config, flow)
        asked = clients.admin_client(b).describe_topics(TopicCollection(["orders"]),
                                                        request_timeout=60)["orders"]
        with pytest.raises(clients.ClusterUnreachableError) as waited:
            clients.answer(asked, b, "describing topic 'orders'", 0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert str(listing.value) == (f"cluster 'b' ({bootstraps['b']}): cannot list its consumer "
                                  "groups: Local: Timed out")
    assert str(waited.value) == (f"cluster 'b' ({bootstraps['b']}): no answer within 5.5 s "
                                 "describing topic 'orders'")
    assert (listing.value.cause, waited.value.cause) == ("down", "down")
