"""The generated DAG, run with real Airflow (dag.test()), real Spark and real brokers."""

from __future__ import annotations

import logging
import logging.handlers
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from helpers.kafka import (
    commit,
    config_file,
    create_topic,
    produce,
    read_partition,
    topic_partitions,
    topics,
    varied_records,
)
from mirrorflow.checkpoint import remote
from mirrorflow.config.loader import load_config
from mirrorflow.kafka.watermarks import probe_watermarks
from mirrorflow.quality import reports
from mirrorflow.source.offsets import OffsetStore

pytestmark = [pytest.mark.airflow, pytest.mark.broker, pytest.mark.spark]


def flow_dag(path: Path, monkeypatch: pytest.MonkeyPatch, dag_id: str = "mirror__a__b"):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("MIRRORFLOW_CONFIG", str(path))
    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert bag.import_errors == {}
    return bag.dags[dag_id]


def states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def run_beside(path: Path, monkeypatch: pytest.MonkeyPatch, fault) -> tuple:
    """The flow's DAG run with ``fault`` in a thread beside it; the run and its mirror task."""
    thread = threading.Thread(target=fault, daemon=True)
    thread.start()
    run = flow_dag(path, monkeypatch).test()
    thread.join(5)
    return run, next(ti for ti in run.get_task_instances() if ti.task_id == "mirror")


PLANTED = "pl4nted-s3cret-0451"


def everything_a_run_wrote(bootstraps: dict[str, str], roots: list[Path]) -> Iterator[tuple]:
    """(where, bytes) for every file under ``roots`` and every record on the clusters."""
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                yield str(path), path.read_bytes()
    for alias, bootstrap in bootstraps.items():
        for topic in topics(bootstrap):
            for p in range(topic_partitions(bootstrap, topic)):
                for key, value, headers, _ in read_partition(bootstrap, topic, p):
                    yield f"{alias}:{topic}[{p}]", b"".join(
                        [key or b"", value or b""] + [v or b"" for _, v in headers or []])


def asset_events(source_run_id: str) -> list[tuple[str, str, str]]:
    """(task, asset URI, plan id) of every asset event a task of the run emitted."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return sorted((task, uri, (extra or {}).get("plan_id")) for task, uri, extra in
                      session.query(AssetEvent.source_task_id, AssetModel.uri,
                                    AssetEvent.extra).select_from(AssetEvent).join(
                          AssetModel, AssetModel.id == AssetEvent.asset_id).filter(
                          AssetEvent.source_run_id == source_run_id).all())


def xcoms(dag_id: str, run_id: str) -> list[tuple[str, str]]:
    """The (task, key) of every XCom the run's tasks pushed."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return sorted(session.query(XComModel.task_id, XComModel.key).filter(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id).all())


@pytest.mark.timeout(600)  # whole DAG runs with Spark jobs, beside a parallel test
def test_dag_mirrors_checkpoints_and_senses_heartbeat(airflow_db, two_clusters, tmp_path,
                                                      monkeypatch, capfd, caplog) -> None:
    """The full DAG, with secrets planted in the config (a literal one and one from the
    environment, both ignored by PLAINTEXT clients): after the run, no log line, report,
    metric, XCom, rendered template, Airflow database row or Kafka record holds them."""

    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("PLANTED_SECRET", PLANTED + "-env")
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(600), 2)
    commit(a, "billing", "orders", {0: 120, 1: 7})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "sync.group.offsets.enabled = true\n"
                       "config.providers = env\nconfig.providers.env.class = "
                       "org.apache.kafka.common.config.provider.EnvVarConfigProvider\n"
                       f"a.sasl.password = {PLANTED}\n"
                       "b.producer.ssl.key.password = ${env:PLANTED_SECRET}\n")
    dag = flow_dag(path, monkeypatch)

    run = dag.test()
    assert str(run.state) == "success", states(run)
    assert states(run)["await_heartbeat"] == "success"
    for p in range(2):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)
    assert remote.translate_offsets(load_config(path).cluster("b"), "a", "billing") == {
        ("a.orders", 0): 120, ("a.orders", 1): 7}
    report = reports.read("a->b", run.run_id)
    assert report["records"] == 601 and report["heartbeat"]["arrived"]
    assert report["checkpoints"] == 2 and report["group_sync"][0]["group"] == "billing"
    assert report["validation"]["success"] and report["validation"]["verified_records"] == 601
    assert Path(report["validation"]["data_docs"]).exists()
    assert xcoms(dag.dag_id, run.run_id) == [
        (task, "return_value") for task in (
            "await_heartbeat", "checkpoint", "commit", "mirror", "plan", "report",
            "sync_group_offsets", "sync_topic_configs", "validate")]

    # A second run (as a re-run or backfill would) mirrors nothing twice.
    produce(a, "orders", varied_records(10, 600), 2)
    again = dag.test(logical_date=run.logical_date - timedelta(days=1))
    assert str(again.state) == "success", states(again)
    for p in range(2):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)

    out, err = capfd.readouterr()
    # Every task's output reached the report whole: no warning of a missing part.
    assert "no whole output" not in out + err + caplog.text
    written = [("stdout", out.encode()), ("stderr", err.encode()),
               ("log records", caplog.text.encode()),
               *everything_a_run_wrote(two_clusters, [airflow_db, tmp_path / "reports"])]
    assert len(written) > 20
    for where, data in written:
        assert PLANTED.encode() not in data, f"the planted secret is in {where}"


def test_failed_completeness_check_fails_the_run_before_commit(airflow_db, two_clusters,
                                                               tmp_path, monkeypatch,
                                                               warm_spark) -> None:
    from confluent_kafka import Producer

    from mirrorflow.source.plan import plan_run
    from mirrorflow.source.plan_store import PlanStore

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(50), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\nmirrorflow.retry.delay.seconds = 0\n")
    config = load_config(path)
    flow = config.flow("a->b")
    pending, _ = plan_run(config, flow, "earlier")
    producer = Producer({"bootstrap.servers": b})  # into the remote topic, not from a
    producer.produce("a.orders", value=b"foreign", partition=0)
    producer.flush(10)

    run = flow_dag(path, monkeypatch).test()
    got = states(run)
    # The copy succeeded; the data-quality verdict is validate's.
    assert str(run.state) == "failed" and got["mirror"] == "success", got
    assert got["validate"] == "failed" and got["commit"] == "upstream_failed", got
    assert OffsetStore(config.cluster("b"), "a").positions() == {}
    assert asset_events(run.run_id) == []  # nothing committed: nothing for downstream DAGs
    assert PlanStore(config, flow).pending().plan_id == pending.plan_id
    failed = reports.read("a->b", run.run_id)["validation"]
    assert not failed["success"] and failed["failures"] == [
        "a.orders[0]: 1 records between offsets 0 and 51 were not written by a mirror flow "
        "(the first at offset 0)"]
    assert Path(failed["data_docs"]).exists()  # the failed proof's, for the operator


@pytest.mark.timeout(600)
def test_topics_parameter_keeps_the_heartbeats_in_the_plan(airflow_db, two_clusters, tmp_path,
                                                          monkeypatch, warm_spark) -> None:
    """Narrowed to `orders` by the run's `topics` parameter, with heartbeats on (the
    default): the heartbeat topic stays in the plan, so `await_heartbeat` finds the beat."""
    a, b = two_clusters["a"], two_clusters["b"]
    for topic in ("orders", "payments"):
        create_topic(a, topic, 1)
        produce(a, topic, varied_records(30), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true")
    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(tmp_path / "reports"))
    run = flow_dag(path, monkeypatch).test(run_conf={"topics": ["orders"]})
    got = states(run)
    assert str(run.state) == "success", got
    assert got["await_heartbeat"] == "success", got
    summary = reports.read("a->b", run.run_id)
    assert sorted((p["topic"], p["records"]) for p in summary["partitions"]) == [
        ("heartbeats", 1), ("orders", 30)]
    assert read_partition(b, "a.orders", 0) == read_partition(a, "orders", 0)


def test_nothing_to_mirror_starts_no_spark_job(airflow_db, two_clusters, tmp_path,
                                               monkeypatch) -> None:
    create_topic(two_clusters["a"], "orders", 1)  # empty: the plan has no range
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(tmp_path / "reports"))
    run = flow_dag(path, monkeypatch).test()
    got = states(run)
    assert str(run.state) == "success", got
    assert got["mirror"] == got["validate"] == "skipped", got
    assert got["commit"] == got["report"] == "success", got
    assert reports.read("a->b", run.run_id)["records"] == 0


def test_reset_requires_confirmation_then_moves_positions(airflow_db, two_clusters, tmp_path,
                                                          monkeypatch) -> None:
    a = two_clusters["a"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(20), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\nmirrorflow.retry.delay.seconds = 0\n")
    dag = flow_dag(path, monkeypatch)
    refused = dag.test(run_conf={"reset": "latest"})
    assert states(refused)["plan"] == "failed"
    store = OffsetStore(load_config(path).cluster("b"), "a")
    assert store.positions() == {}
    done = dag.test(run_conf={"reset": "latest", "confirm_reset": "a->b"},
                    logical_date=refused.logical_date - timedelta(hours=1))
    got = states(done)
    assert str(done.state) == "success", got
    assert got["mirror"] == "skipped"  # reset to the end: nothing left to mirror
    assert store.positions() == {("orders", 0): 19}


@pytest.mark.timeout(600)  # whole DAG runs with Spark jobs, beside a parallel test
def test_mirror_task_killed_then_retried_by_airflow(airflow_db, two_clusters, tmp_path,
                                                     monkeypatch) -> None:
    """A real fault: the Spark job is killed mid-write; Airflow retries the mirror task,
    which resumes from the positions the killed job committed with its data."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "clicks", 2)
    total = 150_000
    produce(a, "clicks", [(f"k{i}".encode(), b"x" * 512, None, 1_700_000_000_000 + i)
                          for i in range(total)], 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\nmirrorflow.retry.delay.seconds = 0\n"
                       "mirrorflow.transaction.records = 20000\n")
    cluster_b = load_config(path).cluster("b")
    killed = threading.Event()

    def kill_spark_once_records_land() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if "a.clicks" in topics(b):
                ends = probe_watermarks(cluster_b, [("a.clicks", 0), ("a.clicks", 1)])
                if sum(m.high for m in ends.values()) > 20_000:
                    # This test's job only (its config path), not a parallel test's.
                    subprocess.run(["pkill", "-KILL", "-f", f"SparkSubmit .*{path}"],
                                   check=False)
                    killed.set()
                    return
            time.sleep(0.2)

    run, mirror = run_beside(path, monkeypatch, kill_spark_once_records_land)
    assert killed.is_set(), "the Spark job finished before it could be killed"
    assert str(run.state) == "success", states(run)
    assert mirror.try_number >= 2
    for p in range(2):
        assert read_partition(b, "a.clicks", p) == read_partition(a, "clicks", p)


def test_a_task_failing_after_the_commit_fails_the_run(airflow_db, two_clusters, tmp_path,
                                                       monkeypatch, capfd, warm_spark) -> None:
    """A run whose checkpoints fail after the commit (here: the checkpoints topic asks for
    more replicas than the target has brokers) ends failed, not green behind the
    ``all_done`` report: the checkpoint task fails on each try, alone (the commit is not
    redone); the report, written with the commit's figures, fails naming the task."""
    create_topic(two_clusters["a"], "orders", 1)
    produce(two_clusters["a"], "orders", varied_records(5), 1)
    commit(two_clusters["a"], "app", "orders", {0: 3})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n"
                       "checkpoints.topic.replication.factor = 3\n"
                       "mirrorflow.retry.delay.seconds = 0\n")
    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(tmp_path / "reports"))
    run = flow_dag(path, monkeypatch).test()
    got = states(run)
    assert str(run.state) == "failed", got
    assert (got["commit"], got["checkpoint"], got["report"]) == (
        "success", "failed", "failed"), got
    committed = next(ti for ti in run.get_task_instances() if ti.task_id == "commit")
    assert committed.try_number == 1
    written = reports.read("a->b", run.run_id)  # before the report task failed
    assert written["records"] == 5 and "failed" not in written and written["note"] is None
    assert read_partition(two_clusters["b"], "a.orders", 0) == read_partition(
        two_clusters["a"], "orders", 0)  # once, whatever the retries
    printed = capfd.readouterr().out
    assert ("flow a->b: the run committed, but its task checkpoint failed (see its log)"
            ) in printed
    assert ("TopicCreationError: cluster 'b': cannot create topic 'a.checkpoints.internal' "
            "(1 partitions, replication factor 3): Unable to replicate the partition 3 "
            "time(s)") in printed


@pytest.mark.timeout(600)
def test_a_run_that_repeats_its_cycle_commits_every_plan_once_and_reports_them_all(
        airflow_db, two_clusters, tmp_path, monkeypatch, warm_spark) -> None:
    """``mirrorflow.mirror.repeat.seconds``: while records keep arriving, one DAG run's
    ``mirror`` commits its proved plan and plans, mirrors and proves again, until the run
    is that old; then the tasks after it act on the last plan (validate, commit, the
    syncs). Every record once and in order, each plan committed by the run, the
    report and the metrics counting every cycle, its proof and Data Docs the last cycle's;
    heartbeats once a run, by its plan. The next run, with nothing arriving, ends its
    cycles on an empty plan, which its commit task commits."""
    import json

    from mirrorflow.source.plan_records import PlanNotPendingError
    from mirrorflow.source.plan_store import PlanStore

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(100), 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "a->b.mirrorflow.mirror.repeat.seconds = 45\n")
    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(tmp_path / "reports"))
    dag = flow_dag(path, monkeypatch)
    # The Data Docs rendered, from the records of the logger that says so (a handler of its
    # own: Airflow's task runner sets up the root logger's handlers for each task).
    renders, verdicts = logging.handlers.BufferingHandler(10_000), logging.getLogger(
        "mirrorflow.quality.verdicts")
    verdicts.setLevel(logging.INFO)
    monkeypatch.setattr(verdicts, "handlers", [*verdicts.handlers, renders])
    monkeypatch.setattr(verdicts, "disabled", False)
    stop, produced = threading.Event(), [100]

    def keep_producing() -> None:  # 20 records every half second, while the run lasts
        while not stop.wait(0.5):
            produce(a, "orders", varied_records(20, produced[0]), 2)
            produced[0] += 20

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        run = dag.test()
    finally:
        stop.set()
        producer.join(10)
    assert str(run.state) == "success", states(run)
    assert (states(run)["mirror"], states(run)["validate"], states(run)["commit"]) == (
        "success", "success", "success")
    mirrored = next(ti for ti in run.get_task_instances() if ti.task_id == "mirror")
    output = mirrored.xcom_pull(task_ids="mirror")
    cycles = output["cycles"]
    report = reports.read("a->b", run.run_id)
    assert cycles >= 2 and len(report["cycles"]) == cycles - 1, report.get("cycles")
    assert (output["plan_id"], output["verified_records"]) == (
        report["plan_id"], report["validation"]["verified_records"])
    assert report["metadata"]["synced"] == ["configs", "acls"]
    assert all(c["proof"] == "passed" and c["records"] > 0 for c in report["cycles"])
    store = PlanStore(load_config(path), load_config(path).flow("a->b"))
    # The store keeps the newest plans (KEEP_PLANS) and their commit marks.
    for plan_id in ([c["plan_id"] for c in report["cycles"]] + [report["plan_id"]])[-10:]:
        with pytest.raises(PlanNotPendingError,
                           match=re.escape(f"already committed by run {run.run_id};")):
            store.require_pending(plan_id)
    assert report["validation"]["plan_id"] == report["plan_id"]
    assert Path(report["validation"]["data_docs"]).exists()
    rendered = [r.args[0] for r in renders.buffer if r.msg.startswith("rendering the Data Docs")]
    assert rendered == [report["plan_id"]]  # the last cycle's only: each would replace the last
    # One asset event per committed plan: the cycles' by mirror, the last plan's by commit
    # (each wrote to a.orders; only the first plan carried the run's heartbeat).
    plans = [c["plan_id"] for c in report["cycles"]] + [report["plan_id"]]
    orders = f"kafka://{b}/a.orders"
    assert [e for e in asset_events(run.run_id) if e[1] == orders] == sorted(
        [("mirror", orders, p) for p in plans[:-1]] + [("commit", orders, plans[-1])])
    ends = OffsetStore(load_config(path).cluster("b"), "a").positions()
    assert ends[("heartbeats", 0)] == 0  # the run's one heartbeat, emitted by its plan
    assert report["records"] == sum(ends.values()) + 3  # positions: the last offsets
    assert {(p["topic"], p["partition"]): (p["planned_start"], p["records"])
            for p in report["partitions"]} == {
        **{("orders", p): (0, ends[("orders", p)] + 1) for p in range(2)},
        ("heartbeats", 0): (0, 1)}

    produce(a, "orders", varied_records(50, produced[0]), 2)
    produced[0] += 50
    again = dag.test(logical_date=run.logical_date - timedelta(days=1))
    assert str(again.state) == "success", states(again)
    assert states(again)["commit"] == "success"
    second = reports.read("a->b", again.run_id)
    assert len(second["cycles"]) == 1
    assert second["records"] == produced[0] + 2 - report["records"]
    assert store.pending() is None  # its last plan, empty, was committed too
    assert OffsetStore(load_config(path).cluster("b"), "a").positions() == {
        **{("orders", p): produced[0] // 2 - 1 for p in range(2)}, ("heartbeats", 0): 1}
    for p in range(2):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)
    assert read_partition(b, "a.heartbeats", 0) == read_partition(a, "heartbeats", 0)
    counters = json.loads((reports.flow_dir("a->b") / "metrics.json").read_text())["counters"]
    assert sum(v for k, v in counters.items()
               if k.startswith("record_count{")) == produced[0] + 2


@pytest.mark.timeout(600)
def test_a_cycle_killed_after_an_earlier_one_committed_is_resumed_by_the_retry(
        airflow_db, two_clusters, tmp_path, monkeypatch) -> None:
    """A repeating run (``mirrorflow.mirror.repeat.seconds``) whose Spark job is killed in
    its second cycle, after its first committed: Airflow's retry of ``mirror`` resumes the
    run's pending plan (the first is committed), and the run's report holds the cycle the
    killed attempt committed. Every record once, in order; counted once."""
    import json

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(100), 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\nmirrorflow.retry.delay.seconds = 0\n"
                       # longer than a loaded machine's first spark-submit: the run ends on
                       # an empty plan, once nothing more arrives
                       "a->b.mirrorflow.mirror.repeat.seconds = 600\n")
    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(tmp_path / "reports"))
    offsets = OffsetStore(load_config(path).cluster("b"), "a")
    killed, produced = threading.Event(), [100]

    def kill_the_second_cycle() -> None:
        job = f"SparkSubmit .*{path}"  # this test's job only (its config path)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and subprocess.run(
                ["pgrep", "-f", job], capture_output=True, check=False).returncode:
            time.sleep(0.2)
        produce(a, "orders", varied_records(40, produced[0]), 2)  # for the second cycle
        produced[0] += 40
        while time.monotonic() < deadline and not offsets.positions():  # the first's commit
            time.sleep(0.2)
        while time.monotonic() < deadline:
            if subprocess.run(["pkill", "-KILL", "-f", job], check=False).returncode == 0:
                killed.set()
                return
            time.sleep(0.1)

    run, mirror = run_beside(path, monkeypatch, kill_the_second_cycle)
    assert killed.is_set(), "no second cycle's Spark job was killed"
    assert str(run.state) == "success", states(run)
    assert mirror.try_number == 2
    report = reports.read("a->b", run.run_id)
    first = report["cycles"][0]
    assert first["records"] == 100 and first["proof"] == "passed"
    ends = offsets.positions()
    assert report["records"] == sum(ends.values()) + 2 == produced[0]
    for p in range(2):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)
    counters = json.loads((reports.flow_dir("a->b") / "metrics.json").read_text())["counters"]
    assert sum(v for k, v in counters.items() if k.startswith("record_count{")) == produced[0]


def test_a_runs_plan_drops_the_cycles_an_earlier_execution_of_the_run_kept(
        two_clusters, tmp_path, monkeypatch) -> None:
    """A run cleared whole and run again starts with no kept cycles: the execution that
    committed them reported and counted them; its ``plan`` drops them, so the new
    execution's report cannot count them twice."""
    from mirrorflow import repeat
    from mirrorflow.airflow.run_tasks import plan

    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(tmp_path / "reports"))
    create_topic(two_clusters["a"], "orders", 1)
    produce(two_clusters["a"], "orders", varied_records(5), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    repeat.keep("a->b", "run-1", {"plan_id": "p-0", "records": 7, "cycles": []})
    planned = plan(str(path), "a->b", {}, "run-1")
    assert repeat.kept("a->b", "run-1") is None
    assert (planned["ranges"], planned["offsets"], planned["resumed"]) == (1, 5, False)
