"""Downstream DAGs run on mirrored data (issue 69), under Airflow's real scheduler:
`airflow standalone` with the flow's DAG and the README's downstream DAG, scheduled on
``Asset("kafka://<target>/<remote topic>")``. It runs after, and only after, a run that
mirrored new records to that topic; its triggering event's extras name the flow, the plan
and the remote offsets written; a run that mirrored nothing, or only to another topic,
or whose commit task is cleared and run again, adds no event to it."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.kafka import config_file, create_topic, produce, read_partition, varied_records
from mirrorflow.dev import connect_server
from mirrorflow.dev.local_airflow import LocalAirflow

pytestmark = [pytest.mark.airflow, pytest.mark.broker, pytest.mark.spark]

FLOW_DAG, DOWNSTREAM = "mirror__a__b", "orders_report"
README_DAG = re.compile(r"```python\n( *from airflow\.sdk import .*?)```", re.DOTALL)


def readme_dag(repo: Path, uri: str) -> str:
    """The README's downstream DAG, on ``uri`` instead of its example's."""
    code = textwrap.dedent(README_DAG.search((repo / "README.md").read_text()).group(1))
    assert code.count("kafka://kafka-us:9092/primary.orders") == 1, code
    return code.replace("kafka://kafka-us:9092/primary.orders", uri)


class Services(LocalAirflow):
    """The local Airflow services with the flow's DAG and the downstream one."""

    def __enter__(self) -> Services:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def runs(self, dag_id: str) -> list[tuple[str, str]]:
        return self.query("select run_id, state from dag_run where dag_id = ? "
                          "order by id", dag_id)

    def wait(self, dag_id: str, count: int, timeout: float = 300) -> list[tuple[str, str]]:
        """Once ``dag_id`` has ``count`` runs and all have ended: its runs."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.runs(dag_id)
            if len(runs) >= count and all(s in ("success", "failed") for _, s in runs):
                return runs
            assert time.monotonic() < deadline, (dag_id, runs, self.log.read_text()[-3000:])
            time.sleep(2)

    def events(self) -> list[tuple[str, dict]]:
        """Every asset event, oldest first: (URI, extras)."""
        return [(uri, json.loads(extra)) for uri, extra in self.query(
            "select a.uri, e.extra from asset_event e join asset a on a.id = e.asset_id "
            "order by e.id")]

    def triggered_by(self, run_id: str) -> list[dict]:
        """The extras of the events that triggered ``run_id`` of the downstream DAG."""
        return [json.loads(extra) for (extra,) in self.query(
            "select e.extra from dagrun_asset_event d join asset_event e on e.id = d.event_id "
            "join dag_run r on r.id = d.dag_run_id where r.dag_id = ? and r.run_id = ?",
            DOWNSTREAM, run_id)]


@pytest.fixture
def services(airflow_db, two_clusters, tmp_path: Path, repo: Path,
             spark_connect: connect_server.ConnectServer) -> Iterator[Services]:
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(repo / "dags" / "mirror_flows.py", dags)
    (dags / "orders_report.py").write_text(readme_dag(
        repo, f"kafka://{two_clusters['b']}/a.orders"))
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "a->b.mirrorflow.schedule = none\nemit.heartbeats.enabled = false\n"
                       "emit.checkpoints.enabled = false\nsync.topic.configs.enabled = false\n"
                       "sync.topic.acls.enabled = false\nmirrorflow.retry.delay.seconds = 5\n")
    with Services(tmp_path / "airflow", repo, path, tmp_path / "reports", {
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW_CONN_SPARK_DEFAULT": connect_server.airflow_connection(
                "127.0.0.1", spark_connect.port),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5"}) as running:
        deadline = time.monotonic() + 240
        while len(running.query("select dag_id from dag where dag_id in (?, ?)",
                                 FLOW_DAG, DOWNSTREAM)) < 2:
            assert running.process.poll() is None, running.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the DAGs were never parsed"
            time.sleep(2)
        for dag_id in (FLOW_DAG, DOWNSTREAM):
            running.cli("dags", "unpause", dag_id)
        yield running


@pytest.mark.timeout(1200)
def test_a_downstream_dag_runs_after_and_only_after_new_records_land(
        services: Services, two_clusters) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    orders, payments = f"kafka://{b}/a.orders", f"kafka://{b}/a.payments"
    create_topic(a, "orders", 2)
    create_topic(a, "payments", 1)
    produce(a, "orders", varied_records(30), 2)

    # A run that mirrors 30 records of orders: one event, one downstream run.
    services.cli("dags", "trigger", FLOW_DAG)
    (first, state), = services.wait(FLOW_DAG, 1)
    assert state == "success"
    (run, state), = services.wait(DOWNSTREAM, 1)
    assert state == "success"
    (event,) = services.events()
    assert event[0] == orders
    extra = event[1]
    assert (extra["flow"], extra["run_id"], extra["source_topic"], extra["records"]) == (
        "a->b", first, "orders", 30)
    assert extra["partitions"] == {
        str(p): {"first_offset": 0, "last_offset": len(read_partition(b, "a.orders", p)) - 1,
                 "records": len(read_partition(b, "a.orders", p))} for p in range(2)}
    assert services.triggered_by(run) == [extra]

    # Nothing new: no event, no downstream run. Then records of payments only: an event
    # of a.payments, none of a.orders, still no downstream run.
    services.cli("dags", "trigger", FLOW_DAG)
    services.wait(FLOW_DAG, 2)
    produce(a, "payments", varied_records(5), 1)
    services.cli("dags", "trigger", FLOW_DAG)
    runs = services.wait(FLOW_DAG, 3)
    assert [s for _, s in runs] == ["success"] * 3
    assert [(uri, e["run_id"], e["records"]) for uri, e in services.events()] == [
        (orders, first, 30), (payments, runs[2][0], 5)]

    # Every run's commit, cleared and run again: each plan is committed, no new event.
    services.cli("tasks", "clear", FLOW_DAG, "-t", "^commit$", "-y")
    deadline = time.monotonic() + 300
    while services.query("select count(*) from task_instance where dag_id = ? and "
                         "task_id = 'commit' and state != 'success'", FLOW_DAG)[0][0]:
        assert time.monotonic() < deadline, services.runs(FLOW_DAG)
        time.sleep(2)
    services.wait(FLOW_DAG, 3)
    assert len(services.events()) == 2
    time.sleep(10)  # a downstream run the scheduler would make: none
    assert len(services.runs(DOWNSTREAM)) == 1


@pytest.mark.timeout(600)
def test_a_run_emits_lineage_from_source_topics_to_remote_topics(
        airflow_db, two_clusters, tmp_path: Path, repo: Path,
        spark_connect: connect_server.ConnectServer) -> None:
    """With apache-airflow-providers-openlineage and its file transport (``airflow dags
    test``, a process of its own, as the provider's listener is registered when Airflow
    loads its plugins): the commit task's event has each source topic the run read as an
    input and the remote topic it wrote as an output, in the Kafka provider's namespace."""
    import os
    import subprocess
    import sys

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(10), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "a->b.topics = orders\nemit.heartbeats.enabled = false\n"
                       "emit.checkpoints.enabled = false\n")
    events = tmp_path / "lineage.jsonl"
    env = {**os.environ, "MIRRORFLOW_CONFIG": str(path),
           "MIRRORFLOW_REPORTS_DIR": str(tmp_path / "reports"),
           "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
           "AIRFLOW_CONN_SPARK_DEFAULT": connect_server.airflow_connection(
               "127.0.0.1", spark_connect.port),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "mirrorflow-test",
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
               {"type": "file", "log_file_path": str(events), "append": True})}
    done = subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "test",
                           FLOW_DAG], env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(read_partition(b, "a.orders", 0)) == 10
    emitted = [json.loads(line) for line in events.read_text().splitlines()]
    completed = [e for e in emitted if e["eventType"] == "COMPLETE"
                 and e["job"]["name"] == f"{FLOW_DAG}.commit"]
    assert len(completed) == 1, [(e["eventType"], e["job"]["name"]) for e in emitted]
    (commit,) = completed
    assert [(d["namespace"], d["name"]) for d in commit["inputs"]] == [(f"kafka://{a}", "orders")]
    assert [(d["namespace"], d["name"]) for d in commit["outputs"]] == [
        (f"kafka://{b}", "a.orders")]
