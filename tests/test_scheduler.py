"""Runs of one flow never race (issue 37), under Airflow's real scheduler: `airflow
standalone` (scheduler, DAG processor, triggerer, API server, LocalExecutor) on a database
of its own, a backfill of two dates at the default ``--max-active-runs`` beside the
scheduled run, more records, the same backfill again with ``--reprocess-behavior
completed``, and a manual trigger. Every DAG run ends green, no task fails, and a
read_committed consumer of the remote topic sees every source record once. The mirror
tasks run on a warm Spark Connect server (the DAG's Spark connection), as a deployment
with one runs them: each task process is a Connect client of its own (test_airflow_run
covers the spark-submit kind of connection)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers.kafka import config_file, create_topic, produce, read_partition, varied_records
from mirrorflow.dev import connect_server
from mirrorflow.dev.local_airflow import LocalAirflow, db_time

pytestmark = [pytest.mark.airflow, pytest.mark.broker, pytest.mark.spark]

DAG_ID = "mirror__a__b"
TERMINAL = {"success", "failed"}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Services(LocalAirflow):
    """The local Airflow services on an Airflow home of their own, stopped on exit."""

    def __init__(self, home: Path, repo: Path, config: Path, reports: Path,
                 spark_port: int) -> None:
        super().__init__(home, repo, config, reports, {
            "AIRFLOW_CONN_SPARK_DEFAULT": connect_server.airflow_connection("127.0.0.1",
                                                                            spark_port),
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "600",
            # Waiting runs wait in the triggerer (standalone runs one).
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
        })

    def cli(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"airflow {' '.join(args)}: {done.stderr[-2000:]}"
        return done.stdout

    def __enter__(self) -> Services:
        self.start()
        deadline = time.monotonic() + 240
        while not self.query("select dag_id from dag where dag_id = ?", DAG_ID):
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the DAG was never parsed"
            time.sleep(2)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def runs(self) -> list[dict]:
        """The DAG's runs, read from the services' database (polling through the CLI would
        start a ~3 s process every few seconds on the two cores under test)."""
        keys = ("run_id", "state", "start_date", "backfill_id")
        return [dict(zip(keys, row, strict=True)) for row in self.query(
            "select run_id, state, start_date, backfill_id from dag_run where dag_id = ?",
            DAG_ID)]

    def wait_for_runs(self, count: int, timeout: float, backfilled_after: datetime = EPOCH
                      ) -> list[dict]:
        """Once at least ``count`` runs exist, every one has ended (and every backfill run
        started after ``backfilled_after``: a reprocessing backfill runs the same run ids
        again), and the scheduler has closed every backfill (it does so on a 30 s timer,
        and refuses a new backfill of the DAG until then)."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.runs()
            open_backfills = self.query("select id from backfill where completed_at is null")
            if len(runs) >= count and all(r["state"] in TERMINAL for r in runs) and all(
                    r["start_date"] and db_time(r["start_date"]) > backfilled_after for r in runs
                    if r["run_id"].startswith("backfill__")) and not open_backfills:
                return runs
            assert time.monotonic() < deadline, (runs, open_backfills,
                                                 self.log.read_text()[-3000:])
            time.sleep(5)

    def task_states(self, run_id: str) -> dict[str, str]:
        return dict(self.query("select task_id, state from task_instance "
                               "where dag_id = ? and run_id = ?", DAG_ID, run_id))


@pytest.fixture
def services(airflow_db, two_clusters, tmp_path: Path, repo: Path,
             spark_connect: connect_server.ConnectServer) -> Iterator[Services]:
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "a->b.mirrorflow.schedule = @hourly\nemit.heartbeats.enabled = false\n"
                       "mirrorflow.retry.delay.seconds = 5\n"
                       # Tasks beside the race under test, each a process per run: off.
                       "emit.checkpoints.enabled = false\nsync.topic.configs.enabled = false\n"
                       "sync.topic.acls.enabled = false\n")
    with Services(tmp_path / "airflow", repo, path, tmp_path / "reports",
                  spark_connect.port) as running:
        yield running


@pytest.mark.timeout(1200)
def test_backfills_and_a_manual_run_never_race(services: Services, two_clusters) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 3)
    produce(a, "orders", varied_records(1000), 3)
    services.cli("dags", "unpause", DAG_ID)  # the scheduler adds the latest hour's run
    services.create_backfill(DAG_ID, "--from-date", "2026-11-20T00:00:00",
                             "--to-date", "2026-11-20T01:00:00")
    first = services.wait_for_runs(3, 600)
    produce(a, "orders", varied_records(500, 1000), 3)
    again = datetime.now(UTC)
    services.create_backfill(DAG_ID, "--from-date", "2026-11-20T00:00:00",
                             "--to-date", "2026-11-20T01:00:00",
                             "--reprocess-behavior", "completed")
    services.cli("dags", "trigger", DAG_ID)
    runs = services.wait_for_runs(len(first) + 1, 600, backfilled_after=again)

    assert len([r for r in runs if r["run_id"].startswith("backfill__")]) == 2, runs
    assert any(r["run_id"].startswith("manual__") for r in runs), runs
    for run in runs:
        got = services.task_states(run["run_id"])
        assert run["state"] == "success", (run["run_id"], got)
        assert "failed" not in got.values() and "upstream_failed" not in got.values(), got
    for p in range(3):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)
    assert sum(len(read_partition(b, "a.orders", p)) for p in range(3)) == 1500
    # Every mirror task that ran got its imports from the scheduler's forkserver
    # (mirrorflow.airflow.preload), none made them itself.
    logs = sorted((services.home / "logs").glob(f"dag_id={DAG_ID}/*/task_id=mirror/*.log"))
    texts = [log.read_text() for log in logs]  # a reprocessed run logs again in attempt 1
    assert len(logs) >= 4 and all(
        '"event":"imports: inherited from Airflow\'s forkserver (mirrorflow.airflow.preload)"'
        in text for text in texts), logs
    assert not any("imports: made by this task process" in text for text in texts), logs
