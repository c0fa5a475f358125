"""Airflow's own buttons never rewind or double a flow (issue 31 §1-2): an old run's task
run again, a failed proof marked success, a paused holder that wakes after another run
took the flow. Real Airflow, Spark and Apache Kafka."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_airflow_run import flow_dag, states

from helpers.kafka import (
    config_file,
    create_topic,
    produce,
    read_partition,
    resume_position,
    varied_records,
)
from mirrorflow.config.loader import load_config
from mirrorflow.run import run_cycle
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan_store import PlanStore

pytestmark = [pytest.mark.airflow, pytest.mark.broker]


def airflow_task(dag_id: str, task_id: str, run_id: str) -> subprocess.CompletedProcess:
    """``airflow tasks test DAG TASK RUN_ID``, as an operator re-runs one task."""
    airflow = Path(sys.executable).parent / "airflow"
    return subprocess.run([str(airflow), "tasks", "test", dag_id, task_id, run_id],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_an_old_runs_commit_run_again_changes_nothing(airflow_db, two_clusters, tmp_path,
                                                      monkeypatch, warm_spark) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(200), 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    config = load_config(path)
    dag = flow_dag(path, monkeypatch)
    first = dag.test()
    assert str(first.state) == "success", states(first)
    first_plan = PlanStore(config, config.flow("a->b"))
    produce(a, "orders", varied_records(300, 200), 2)
    assert run_cycle(path, "a->b", spark=warm_spark).validation["success"]  # a later run
    store = OffsetStore(config.cluster("b"), "a")
    assert store.positions() == {("orders", 0): 249, ("orders", 1): 249}

    again = airflow_task("mirror__a__b", "commit", first.run_id)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"is not pending: it was already committed by run {first.run_id}" in \
        again.stdout + again.stderr
    assert store.positions() == {("orders", 0): 249, ("orders", 1): 249}
    # The old run's mirror and validate, run again, do nothing: its plan is no longer
    # pending.
    for task_id in ("mirror", "validate"):
        done = airflow_task("mirror__a__b", task_id, first.run_id)
        assert "is not pending: it was already committed" in done.stdout + done.stderr
    assert first_plan.pending() is None

    produce(a, "orders", varied_records(100, 500), 2)
    assert run_cycle(path, "a->b", spark=warm_spark).validation["success"]  # the flow goes on
    for p in range(2):
        target = read_partition(b, "a.orders", p)
        assert len(target) == 300
        assert target == read_partition(a, "orders", p)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_failed_proof_marked_success_commits_nothing(airflow_db, two_clusters, tmp_path,
                                                       monkeypatch, warm_spark) -> None:
    from confluent_kafka import Producer

    from mirrorflow.source.plan import plan_run

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(50), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\nmirrorflow.retry.delay.seconds = 0\n")
    config = load_config(path)
    pending, _ = plan_run(config, config.flow("a->b"), "earlier")
    producer = Producer({"bootstrap.servers": b})  # a foreign record: the proof fails
    producer.produce("a.orders", value=b"foreign", partition=0)
    assert producer.flush(10) == 0
    run = flow_dag(path, monkeypatch).test()
    assert (states(run)["mirror"], states(run)["validate"]) == ("success", "failed"), states(run)

    # What "Mark success" on the failed validate lets run: the commit task, for that run.
    commit = airflow_task("mirror__a__b", "commit", run.run_id)
    assert "Task failed with exception" in commit.stdout + commit.stderr, commit.stdout[-3000:]
    assert (f"CommitRefusedError: plan {pending.plan_id} of flow a->b has no passing "
            "completeness check (failed); nothing was committed") in commit.stdout + commit.stderr
    assert OffsetStore(config.cluster("b"), "a").positions() == {}
    assert PlanStore(config, config.flow("a->b")).pending().plan_id == pending.plan_id


PAUSED_HOLDER = textwrap.dedent("""
    import os, signal, sys
    from mirrorflow.config.loader import load_config
    from mirrorflow.lease import FlowLease
    from mirrorflow.source.offsets import OffsetStore

    config = load_config(sys.argv[1])
    flow = config.flow("a->b")
    checked = FlowLease.check

    def check_then_pause(self):
        checked(self)  # the lease is held: the write is about to go out
        print("checked", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # paused here, past its lease

    FlowLease.check = check_then_pause
    with FlowLease(config, flow, "paused-run"):
        OffsetStore(config.cluster("b"), "a").commit({("orders", 0): 10})
    print("written", flush=True)
""")


def test_a_paused_holders_write_is_fenced_after_another_run_took_the_flow(
        two_clusters, tmp_path: Path) -> None:
    """The holder passes its lease check, is stopped (SIGSTOP) before its write lands,
    lapses, another run takes the flow and commits; continued (SIGCONT), its write is
    refused by the broker: the newer run's position stays."""
    from mirrorflow.lease import FlowLease

    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "mirrorflow.lease.timeout.seconds = 2\n")
    config = load_config(path)
    flow = config.flow("a->b")
    script = tmp_path / "paused_holder.py"
    script.write_text(PAUSED_HOLDER)
    child = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "checked"
        deadline = time.monotonic() + 30
        while os.waitid(os.P_PID, child.pid, os.WEXITED | os.WSTOPPED | os.WNOHANG |
                        os.WNOWAIT) is None:
            assert time.monotonic() < deadline, "the holder did not stop"
            time.sleep(0.05)
        store = OffsetStore(config.cluster("b"), "a")
        with FlowLease(config, flow, "next-run", wait_s=30):  # after the paused one lapsed
            store.commit({("orders", 0): 99})
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
    assert child.returncode == 1 and "written" not in out
    assert ("LeaseLostError: flow a->b: the lease of paused-run on cluster 'b' is held by "
            "nobody now; nothing more is written") in err, err[-3000:]
    assert store.positions() == {("orders", 0): 99}


@pytest.mark.spark
@pytest.mark.timeout(400)
def test_a_plan_pending_past_offsets_retention_resumes_from_its_spans(
        spark, two_clusters, tmp_path: Path) -> None:
    """A plan interrupted mid-write (300 of its 600 records committed), then left pending
    until Kafka dropped the progress group's offsets: the next run writes only the rest.
    Kafka drops a member-less group's offsets ``offsets.retention.minutes`` after their
    last commit (at least a minute); deleting the group leaves the same state at once."""
    from confluent_kafka.admin import AdminClient

    from mirrorflow.run import run_cycle
    from mirrorflow.source import ledger

    a, t = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    records = varied_records(600)
    produce(a, "orders", records, 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    config = load_config(path)
    interrupt_a_plan(spark, config, "a->b", 300)
    assert len(read_partition(t, "a.orders", 0)) == 300
    assert resume_position(t, "a", "a.orders", 0) is not None
    group = ledger.progress_group("a")
    admin = AdminClient({"bootstrap.servers": t})  # alive until the answer comes
    admin.delete_consumer_groups([group])[group].result(30)
    assert resume_position(t, "a", "a.orders", 0) is None

    result = run_cycle(path, "a->b", spark=spark)
    assert result.resumed and result.validation["success"]
    assert [(p.planned_start, p.records, p.skipped) for p in result.partitions] == [
        (0, 600, 300)]
    assert read_partition(t, "a.orders", 0) == read_partition(a, "orders", 0)


def interrupt_a_plan(spark, config, flow_name: str, written: int) -> None:
    """A plan of ``orders[0]`` whose first attempt's writer committed ``written`` records
    (transactions of 150) and then stopped: the JVM writer on a task cut at ``written``."""
    from dataclasses import replace

    from mirrorflow.source import ledger
    from mirrorflow.source.plan import plan_run
    from mirrorflow.spark.mirror import MIRROR_FORMAT, mirror_options, write_tasks

    flow = config.flow(flow_name)
    plan, _ = plan_run(config, flow, "interrupted")
    ledger.spans_store(config.cluster(flow.target), flow.source).ensure()  # as the driver does
    (task,) = [replace(t, end=written, chunk_records=150) for t in write_tasks(flow, plan)]
    options = mirror_options(config, flow, {("orders", 0): task}, [[("orders", 0, 0, written)]])
    spark.read.format(MIRROR_FORMAT).options(**options).load().collect()


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_records_gone_from_the_source_before_the_proof_are_named_not_retried_forever(
        spark, two_clusters, tmp_path: Path) -> None:
    """An interrupted plan's source loses its first 200 records (DeleteRecords) before
    the retry's proof reads them again: the proof compares the rest and names the lost
    offsets under failOnDataLoss; with failOnDataLoss = false the run goes on."""
    from helpers.kafka import delete_records
    from mirrorflow.quality.verdicts import ValidationError
    from mirrorflow.run import run_cycle

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    records = varied_records(600)
    produce(a, "orders", records, 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    config = load_config(path)
    interrupt_a_plan(spark, config, "a->b", 300)
    delete_records(a, "orders", 0, 200)
    with pytest.raises(ValidationError, match=(
            r"orders\[0\]: offsets 0\.\.199 were removed from the source \(retention or "
            r"DeleteRecords\) after they were mirrored and before the proof could compare "
            r"them; their 200 copies on a\.orders\[0\] are unproven\. Set "
            r"a->b\.failOnDataLoss = false")):
        run_cycle(path, "a->b", spark=spark)
    assert OffsetStore(config.cluster("b"), "a").positions() == {}

    lenient = tmp_path / "lenient.properties"
    lenient.write_text(path.read_text() + "a->b.failOnDataLoss = false\n")
    done = run_cycle(lenient, "a->b", spark=spark)
    assert done.validation["success"] and done.validation["verified_records"] == 400
    assert any("offsets 0..199 were removed" in n for n in done.validation["notes"])
    assert OffsetStore(config.cluster("b"), "a").positions() == {("orders", 0): 599}
    target = read_partition(b, "a.orders", 0)
    assert len(target) == 600 and target[200:] == read_partition(a, "orders", 0, start=200)
