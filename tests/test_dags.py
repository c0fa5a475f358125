"""The generated DAGs load in Airflow's DagBag: one per enabled flow, no import errors."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.airflow


def dagbag_for(config: Path, dag_folder: Path, monkeypatch: pytest.MonkeyPatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("MIRRORFLOW_CONFIG", str(config))
    return DagBag(dag_folder=str(dag_folder))


def test_default_config_dag(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIRRORFLOW_CONFIG", raising=False)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(repo / "dags"))
    assert bag.import_errors == {}
    assert list(bag.dags) == ["mirror__primary__backup"]
    dag = bag.dags["mirror__primary__backup"]
    assert dag.max_active_runs == 1
    assert "source:primary" in dag.tags and "target:backup" in dag.tags
    assert "primary.<topic>" in dag.doc_md


def test_twelve_flows_one_dag_each(repo: Path, fixtures: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    started = time.perf_counter()
    bag = dagbag_for(fixtures / "geo_six_clusters.properties", repo / "dags", monkeypatch)
    elapsed = time.perf_counter() - started
    print(f"\nDagBag parse of 12 flows: {elapsed:.3f}s")
    assert bag.import_errors == {}
    assert len(bag.dags) == 12
    for dag in bag.dags.values():
        assert dag.tags, dag.dag_id
        assert {t.retries for t in dag.tasks} == {3}, dag.dag_id
        assert dag.default_args["retries"] == 3
        # The first retry 15 s after a failure, the second 30 s and the third 60 s (and
        # Airflow's jitter) later.
        assert {(t.retry_delay, t.retry_exponential_backoff, t.max_retry_delay)
                for t in dag.tasks} == {(timedelta(seconds=15), 2.0, timedelta(minutes=5))}


def test_a_task_process_parses_its_own_flows_dag_alone(
        repo: Path, fixtures: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Airflow parses the DAG file for one DAG (its task runner, before each task,
    names it in the parsing context), the file builds that flow's DAG alone; a DAG id it
    does not know builds them all (Airflow then says which is missing)."""
    from airflow.sdk.definitions._internal.dag_parsing_context import (
        _airflow_parsing_context_manager,
    )

    config = fixtures / "geo_six_clusters.properties"
    with _airflow_parsing_context_manager(dag_id="mirror__west-1__east-1", task_id="plan"):
        bag = dagbag_for(config, repo / "dags", monkeypatch)
    assert bag.import_errors == {} and list(bag.dags) == ["mirror__west-1__east-1"]
    assert [t.task_id for t in bag.dags["mirror__west-1__east-1"].tasks] == [
        "plan", "mirror", "validate", "commit", "checkpoint", "sync_topic_configs",
        "await_heartbeat", "report"]
    with _airflow_parsing_context_manager(dag_id="mirror__nowhere__else", task_id="plan"):
        assert len(dagbag_for(config, repo / "dags", monkeypatch).dags) == 12


def test_broken_config_is_one_import_error_naming_the_property(
        repo: Path, fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    shutil.copy(repo / "dags" / "mirror_flows.py", folder)
    # Another project's DAG in the same folder keeps working.
    (folder / "other.py").write_text(
        "from airflow.sdk import DAG\nwith DAG('other_project', schedule=None, tags=['x']):\n"
        "    pass\n")
    bag = dagbag_for(fixtures / "geo_enable_misspelt.properties", folder, monkeypatch)
    assert list(bag.dags) == ["other_project"]
    assert len(bag.import_errors) == 1
    (error,) = bag.import_errors.values()
    assert "property 'primary->secondary.enable'" in error


def test_parsing_imports_no_heavy_modules(repo: Path) -> None:
    import subprocess
    import sys

    config = repo / "include" / "config" / "mm2.properties"
    code = (
        "import sys, pathlib\n"
        "from mirrorflow.airflow.dags import build_flow_dags\n"
        f"build_flow_dags(pathlib.Path({str(config)!r}))\n"
        "heavy = ('pyspark', 'great_expectations', 'confluent_kafka')\n"
        "print('HEAVY=' + ','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY=\n" in out.stdout + "\n"


def test_a_task_process_inherits_every_module_its_dag_parse_needs(repo: Path) -> None:
    """A task process forked after the scheduler's preload (mirrorflow.airflow.preload)
    parses the DAG file for its own DAG, before every task: that parse imports nothing but
    the DAG file itself (the decorators it would import otherwise cost half of it)."""
    import subprocess

    config = repo / "include" / "config" / "mm2.properties"
    code = (
        "import sys\n"
        "import mirrorflow.airflow.preload\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "before = set(sys.modules)\n"
        f"bag = DagBag(dag_folder={str(repo / 'dags' / 'mirror_flows.py')!r})\n"
        "print('DAGS=' + ','.join(bag.dags))\n"
        "print('NEW=' + ','.join(sorted(set(sys.modules) - before)))\n"
    )
    env = {**os.environ, "MIRRORFLOW_CONFIG": str(config),
           "_AIRFLOW_PARSING_CONTEXT_DAG_ID": "mirror__primary__backup"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env).stdout
    assert "DAGS=mirror__primary__backup\n" in out
    (new,) = [line[len("NEW="):].split(",") for line in out.splitlines()
              if line.startswith("NEW=")]
    assert len(new) == 1 and new[0].endswith("_mirror_flows"), new


def test_tasks_follow_the_flow_properties(repo: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = a, b, c\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
                    "c.bootstrap.servers = z:1\n"
                    "a->b.enabled = true\nc->a.enabled = true\n"
                    "a->b.sync.group.offsets.enabled = true\n"
                    # heartbeats of the pair c->a and its reverse, as MM2 decides for both
                    "c->a.emit.heartbeats.enabled = false\na->c.emit.heartbeats.enabled = false\n"
                    "c->a.emit.checkpoints.enabled = false\n"
                    "c->a.mirrorflow.schedule = none\n"
                    "c->a.sync.topic.configs.enabled = false\n"
                    "c->a.sync.topic.acls.enabled = false\n"
                    "c->a.mirrorflow.task.timeout.seconds = 120\n"
                    "c->a.mirrorflow.mirror.timeout.seconds = 900\n"
                    "b->a.emit.heartbeats.enabled = true\n")
    bag = dagbag_for(path, repo / "dags", monkeypatch)
    full, bare = bag.dags["mirror__a__b"], bag.dags["mirror__c__a"]
    # The card's steps are tasks; a step the flow switches off has none. The plan task
    # claims the flow first: no claim task of its own.
    assert set(full.task_ids) == {
        "plan", "mirror", "validate", "commit", "checkpoint", "sync_group_offsets",
        "sync_topic_configs", "await_heartbeat", "report"}
    assert set(bare.task_ids) == {"plan", "mirror", "validate", "commit", "report"}
    # The run owns the flow from plan to report, which runs whatever the other tasks did
    # and waits for all of them.
    assert full.get_task("plan").upstream_task_ids == set()
    assert full.get_task("plan").downstream_task_ids == {"mirror", "commit", "await_heartbeat"}
    assert bare.get_task("plan").downstream_task_ids == {"mirror", "commit"}
    assert full.get_task("plan").mode == "reschedule"
    assert full.get_task("report").trigger_rule == "all_done"
    assert full.get_task("report").upstream_task_ids == {
        "commit", "checkpoint", "sync_group_offsets", "sync_topic_configs", "await_heartbeat"}
    assert full.get_task("report").downstream_task_ids == set()
    assert bare.get_task("report").upstream_task_ids == {"commit"}
    # The proof's verdict is validate's: nothing is committed after a failed one; the
    # syncs follow the commit, the group offsets the checkpoints they are taken from.
    assert full.get_task("mirror").downstream_task_ids == {"validate", "await_heartbeat"}
    assert full.get_task("validate").downstream_task_ids == {"commit"}
    assert full.get_task("commit").trigger_rule == "none_failed_min_one_success"
    assert full.get_task("commit").downstream_task_ids == {
        "checkpoint", "sync_topic_configs", "report"}
    assert full.get_task("checkpoint").downstream_task_ids == {"sync_group_offsets", "report"}
    # What the run mirrored is published through the flow's asset alias.
    assert [o.name for o in full.get_task("commit").outlets] == ["mirrorflow:a->b"]
    # The heartbeat is sensed beside the commit, off the run's critical path.
    sensed = full.get_task("await_heartbeat")
    assert sensed.upstream_task_ids == {"plan", "mirror"}
    assert sensed.trigger_rule == "none_failed_min_one_success"
    assert sensed.since_ms == "{{ (ti.xcom_pull(task_ids='plan') or {}).get('heartbeat_ms') }}"
    # A run planned before an upgrade (its heartbeat written by a task of its own): the
    # heartbeat is looked for from the run's start.
    started = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    sensed.since_ms = "None"
    assert sensed.since({"dag_run": SimpleNamespace(start_date=started)}) == 1_795_608_000_000
    sensed.since_ms = "1795608000123"
    assert sensed.since({}) == 1_795_608_000_123
    assert full.get_task("mirror").pool == "mirrorflow_spark"
    # The tasks returning a dict push it as one XCom, not one more per key.
    assert {t: full.get_task(t).multiple_outputs for t in (
        "validate", "commit", "checkpoint", "sync_group_offsets", "sync_topic_configs", "report")
            } == dict.fromkeys(("validate", "commit", "checkpoint", "sync_group_offsets",
                                "sync_topic_configs", "report"), False)
    assert full.get_task("mirror").conn_id == "spark_default"
    assert bare.schedule is None or str(bare.timetable.summary) in ("None", "")
    assert set(full.params) == {"topics", "max_records_per_partition", "dry_run", "reset",
                                "reset_timestamp_ms", "confirm_reset"}
    for dag in (full, bare):
        assert all(t.retries >= 2 and t.doc_md for t in dag.tasks), dag.dag_id
    # Every task but the sensors (their waits have timeouts of their own) has a limit.
    assert {t.task_id: t.execution_timeout for t in full.tasks} == {
        "await_heartbeat": None, "mirror": timedelta(hours=2),
        **dict.fromkeys(("plan", "validate", "commit", "checkpoint", "sync_group_offsets",
                         "sync_topic_configs", "report"), timedelta(minutes=10))}
    assert {t.task_id: t.execution_timeout for t in bare.tasks} == {
        "mirror": timedelta(minutes=15),
        **dict.fromkeys(("plan", "validate", "commit", "report"), timedelta(minutes=2))}


HUNG_DAG = """
import ctypes, signal, threading
from datetime import datetime, timedelta
from airflow.sdk import DAG, task

with DAG("hung", start_date=datetime(2026, 1, 1), schedule=None, tags=[{tag!r}]) as dag:
    @task(execution_timeout=timedelta(seconds=2))
    def hang_where_python_cannot_be_interrupted():
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})  # Airflow's timeout
        print("started", flush=True)
        threading.Event().wait()

    @task
    def crash_in_native_code():
        print("started", flush=True)
        ctypes.string_at(0)  # reads address 0: SIGSEGV, as a crash inside librdkafka

    {task}()
"""
RUN_HUNG_DAG = """
import sys
from airflow.dag_processing.dagbag import DagBag
DagBag(dag_folder=sys.argv[1]).dags["hung"].test()
print("the task ended", flush=True)
"""


def run_hung_task(tmp_path: Path, tag: str, task: str) -> tuple[int, str, str] | None:
    """``dag.test()`` of a DAG tagged ``tag`` holding ``task`` of :data:`HUNG_DAG`, in a
    process of its own: its exit status, stdout and stderr, or None when it still runs 8 s
    after the task started (then it is killed)."""
    import subprocess

    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "hung.py").write_text(HUNG_DAG.format(tag=tag, task=task))
    err = tmp_path / "stderr"
    with err.open("w") as stderr_file:
        process = subprocess.Popen(
            [sys.executable, "-c", RUN_HUNG_DAG, str(tmp_path / "dags")], text=True,
            stdout=subprocess.PIPE, stderr=stderr_file,
            env={**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags")})
    try:
        # Airflow's start-up takes what the machine's load makes it: the wait starts at
        # the task's line.
        while (line := process.stdout.readline()) not in ("started\n", ""):
            pass
        assert line == "started\n", err.read_text()[-2000:]
        try:
            stdout = process.communicate(timeout=8)[0]
        except subprocess.TimeoutExpired:
            return None
    finally:
        process.kill()
        process.wait()
    return process.returncode, stdout, err.read_text()


@pytest.mark.airflow
@pytest.mark.parametrize("tag", ["mirrorflow", "other"])
def test_a_task_stuck_past_its_timeout_is_ended_with_its_stacks_in_the_log(
        airflow_db: Path, tmp_path: Path, tag: str) -> None:
    """A mirrorflow DAG's task that Airflow's SIGALRM cannot stop (here: the signal is
    blocked) is ended by the plugin's watchdog 0.2 s after its 2 s execution_timeout, with
    every thread's stack written to its log; another project's DAG is left alone."""
    ended = run_hung_task(tmp_path, tag, "hang_where_python_cannot_be_interrupted")
    if tag == "other":
        assert ended is None, ended
        return
    assert ended is not None, "the watchdog did not end the task"
    status, stdout, stderr = ended
    assert status == 1, stderr[-2000:]
    assert "the task ended" not in stdout
    assert "Timeout (0:00:02.200000)!" in stderr
    assert 'in hang_where_python_cannot_be_interrupted' in stderr


@pytest.mark.airflow
def test_a_task_that_crashes_in_native_code_dies_with_its_stacks_in_the_log(
        airflow_db: Path, tmp_path: Path) -> None:
    """Airflow's DAG importer leaves a Python SIGSEGV handler installed for the whole task
    (apache/airflow#57174): a crash in native code then spins on the faulting instruction
    for good (another project's task still does, at a core's full use, so it is not run
    here). A mirrorflow task's crash ends its process (SIGSEGV), every thread's stack in
    its log, for Airflow to retry."""
    ended = run_hung_task(tmp_path, "mirrorflow", "crash_in_native_code")
    assert ended is not None, "the crash did not end the task"
    status, stdout, stderr = ended
    assert status == -signal.SIGSEGV, stderr[-2000:]
    assert "the task ended" not in stdout
    assert "Fatal Python error: Segmentation fault" in stderr
    assert "in crash_in_native_code" in stderr


def test_continuous_schedule_runs_back_to_back_one_at_a_time_and_unknown_presets_are_refused(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``mirrorflow.schedule = @continuous``: Airflow's continuous timetable (the next run
    as soon as one ends) with one active run; a preset Airflow does not know is one
    import error naming the property."""
    from airflow.sdk.definitions.timetables.simple import ContinuousTimetable

    path = tmp_path / "mm2.properties"
    path.write_text("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
                    "a->b.enabled = true\nb->a.enabled = true\n"
                    "a->b.mirrorflow.schedule = @continuous\n")
    bag = dagbag_for(path, repo / "dags", monkeypatch)
    assert bag.import_errors == {}
    continuous, cron = bag.dags["mirror__a__b"], bag.dags["mirror__b__a"]
    assert isinstance(continuous.timetable, ContinuousTimetable)
    assert continuous.max_active_runs == 1 and not continuous.catchup
    assert not isinstance(cron.timetable, ContinuousTimetable)
    assert cron.schedule == "*/5 * * * *" and continuous.schedule == "@continuous"
    path.write_text(path.read_text().replace("@continuous", "@sometimes"))
    bag = dagbag_for(path, repo / "dags", monkeypatch)
    (error,) = bag.import_errors.values()
    assert "property 'a->b.mirrorflow.schedule'" in error
    assert "one of @once, @continuous, @hourly" in error and "'@sometimes'" in error


def test_plan_waits_for_a_cluster_that_does_not_answer_then_fails_naming_it(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's first task checks both clusters before it claims anything: a cluster no
    broker of which answers is asked for ``mirrorflow.cluster.wait.seconds``, then fails
    the task naming the cluster, its address and the wait; with 0, at once. Every other
    task's retry checks them the same way before its work."""
    from mirrorflow.dev.localcluster import free_port
    from mirrorflow.kafka.clients import ClusterUnreachableError

    port = free_port()  # nothing listens there
    path = tmp_path / "mm2.properties"
    clusters = (f"clusters = a, b\na.bootstrap.servers = 127.0.0.1:{port}\n"
                f"b.bootstrap.servers = 127.0.0.1:{port}\na->b.enabled = true\n")
    unreachable = rf"^cluster 'a' \(127\.0\.0\.1:{port}\) is not reachable: no broker answers there"
    path.write_text(clusters + "mirrorflow.cluster.wait.seconds = 0\n")
    dag = dagbag_for(path, repo / "dags", monkeypatch).dags["mirror__a__b"]
    with pytest.raises(ClusterUnreachableError, match=unreachable + "$"):
        dag.get_task("plan").execute({"params": {}})
    # Every other task's retry checks them first: the hook Airflow's task runner calls
    # before execute (airflow.sdk.execution_time.task_runner._execute_task); a first try
    # trusts its run's plan.
    for task_id in ("mirror", "validate", "commit", "checkpoint", "await_heartbeat", "report"):
        before = dag.get_task(task_id)._pre_execute_hook
        before({"ti": SimpleNamespace(try_number=1)})
        with pytest.raises(ClusterUnreachableError, match=unreachable + "$"):
            before({"ti": SimpleNamespace(try_number=2)})
    assert dag.get_task("plan")._pre_execute_hook is None

    path.write_text(clusters + "a->b.mirrorflow.cluster.wait.seconds = 2\n")
    claim = dagbag_for(path, repo / "dags", monkeypatch).dags["mirror__a__b"].get_task(
        "plan")
    began = time.monotonic()
    with pytest.raises(ClusterUnreachableError, match=unreachable + r" \(asked for 2 s\)$"):
        claim.execute({"params": {}})
    assert time.monotonic() - began >= 2


def test_connections_closed_unanswered_after_the_cluster_was_down_are_its_restart(
        tmp_path: Path) -> None:
    """A restarting broker binds its port before it serves: once the cluster was down in a
    wait, a connection taken and closed unanswered is its start, asked again to the end of
    the wait (seen in a soak for a second after the outage; before it, it failed the task
    as a protocol mismatch). The same from the first check is another protocol's listener
    (test_security: it fails after a grace)."""
    import socket
    import threading

    from mirrorflow.config.loader import load_config
    from mirrorflow.dev.localcluster import free_port
    from mirrorflow.kafka.clients import ClusterUnreachableError
    from mirrorflow.kafka.reachability import await_reachable

    port = free_port()
    path = tmp_path / "mm2.properties"
    path.write_text(f"clusters = a, b\na.bootstrap.servers = 127.0.0.1:{port}\n"
                    "b.bootstrap.servers = 127.0.0.1:1\na->b.enabled = true\n")
    done = threading.Event()

    def closing_listener() -> None:  # nothing for 2 s, then a port that answers nothing
        time.sleep(2)
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
            server.settimeout(0.2)
            while not done.is_set():
                try:
                    server.accept()[0].close()
                except TimeoutError:
                    continue

    listener = threading.Thread(target=closing_listener)
    listener.start()
    try:
        with pytest.raises(ClusterUnreachableError,
                           match=rf"^cluster 'a' \(127\.0\.0\.1:{port}\) is not reachable: a "
                                 r"broker answered but the connection failed before any "
                                 r"request \(the broker closed it at the first request\): .* "
                                 r"\(asked for 6 s\)$") as info:
            await_reachable(load_config(path).cluster("a"), 6)
    finally:
        done.set()
        listener.join()
    assert info.value.cause == "closed"


def test_flows_on_one_cron_start_spread_over_its_first_minute_through_serialization(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four flows on ``* * * * *`` start 0, 15, 30 and 45 s after each minute in the order
    of their names (a flow on ``@continuous`` takes no place among them); the timetable
    survives the round trip through Airflow's serialized DAG (the plugin registers it, as
    the scheduler needs); ``mirrorflow.schedule.spread.seconds = 0`` starts them together."""
    import pendulum
    from airflow.serialization.serialized_objects import DagSerialization

    path = tmp_path / "mm2.properties"
    clusters = "clusters = a, b, c\n" + "".join(
        f"{c}.bootstrap.servers = {c}:1\n" for c in "abc")
    flows = ["a->b", "b->a", "a->c", "c->a", "b->c"]
    path.write_text(clusters + "".join(f"{f}.enabled = true\n" for f in flows)
                    + "mirrorflow.schedule = * * * * *\nc->a.mirrorflow.schedule = @continuous\n")
    bag = dagbag_for(path, repo / "dags", monkeypatch)
    assert bag.import_errors == {}
    minute = pendulum.datetime(2026, 1, 1, 0, 0, tz="UTC")
    starts = {}
    for flow in ("a->c", "b->a", "b->c"):
        # As a backfill sees it: the serialized DAG's runs between two dates.
        dag = DagSerialization.from_dict(DagSerialization.to_dict(
            bag.dags["mirror__" + flow.replace("->", "__")]))
        starts[flow] = [info.run_after.isoformat() for info in
                        dag.iter_dagrun_infos_between(minute, minute + timedelta(minutes=2))]
    assert starts == {
        "a->c": ["2026-01-01T00:00:15+00:00", "2026-01-01T00:01:15+00:00"],
        "b->a": ["2026-01-01T00:00:30+00:00", "2026-01-01T00:01:30+00:00"],
        "b->c": ["2026-01-01T00:00:45+00:00", "2026-01-01T00:01:45+00:00"]}
    later = bag.dags["mirror__b__c"]
    assert later.timetable.summary == "* * * * * +45s"
    assert "45 s after each cron time" in later.doc_md
    assert bag.dags["mirror__a__b"].schedule == "* * * * *"  # the first: Airflow's own cron

    path.write_text(path.read_text() + "mirrorflow.schedule.spread.seconds = 0\n")
    bag = dagbag_for(path, repo / "dags", monkeypatch)
    assert {bag.dags[f"mirror__{f.replace('->', '__')}"].schedule for f in flows} == {
        "* * * * *", "@continuous"}
