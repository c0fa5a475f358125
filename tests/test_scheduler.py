"""Runs of one flow never race (issue 37), under Airflow's real scheduler: `airflow
standalone` (scheduler, DAG processor, triggerer, API server, LocalExecutor) on a database
of its own, a backfill of two dates at the default ``--max-active-runs`` beside the
scheduled run, more records, the same backfill again with ``--reprocess-behavior
completed``, and a manual trigger. Every DAG run ends green, no task fails, and a
read_committed consumer of the remote topic sees every source record once."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers.kafka import config_file, create_topic, produce, read_partition, varied_records
from mirrorflow.dev.local_airflow import LocalAirflow

pytestmark = [pytest.mark.airflow, pytest.mark.broker, pytest.mark.spark]

DAG_ID = "mirror__a__b"
TERMINAL = {"success", "failed"}


class Services(LocalAirflow):
    """The local Airflow services on an Airflow home of their own, stopped on exit."""

    def __init__(self, home: Path, repo: Path, config: Path, reports: Path) -> None:
        super().__init__(home, repo, config, reports, {
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
        while DAG_ID not in self.cli("dags", "list", "-o", "plain"):
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the DAG was never parsed"
            time.sleep(2)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def json(self, *args: str) -> list[dict]:
        """A CLI command's JSON output (its log lines go to the same stream)."""
        lines = [line for line in self.cli(*args, "-o", "json").splitlines()
                 if line.startswith("[{") or line.strip() == "[]"]
        return json.loads(lines[-1]) if lines else []

    def runs(self) -> list[dict]:
        return self.json("dags", "list-runs", DAG_ID)

    def wait_for_runs(self, count: int, timeout: float, backfilled_after: str = "") -> list[dict]:
        """Once at least ``count`` runs exist and every one has ended (and every backfill
        run started after ``backfilled_after``: a reprocessing backfill runs the same run
        ids again)."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.runs()
            if len(runs) >= count and all(r["state"] in TERMINAL for r in runs) and all(
                    (r["start_date"] or "") > backfilled_after for r in runs
                    if r["run_id"].startswith("backfill__")):
                return runs
            assert time.monotonic() < deadline, (runs, self.log.read_text()[-3000:])
            time.sleep(5)

    def task_states(self, run_id: str) -> dict[str, str]:
        rows = self.json("tasks", "states-for-dag-run", DAG_ID, run_id)
        return {row["task_id"]: row["state"] for row in rows}


@pytest.fixture
def services(airflow_db, two_clusters, tmp_path: Path, repo: Path) -> Iterator[Services]:
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "a->b.mirrorflow.schedule = @hourly\nemit.heartbeats.enabled = false\n"
                       "mirrorflow.retry.delay.seconds = 5\n"
                       # Tasks beside the race under test, each a process per run: off.
                       "emit.checkpoints.enabled = false\nsync.topic.configs.enabled = false\n"
                       "sync.topic.acls.enabled = false\n")
    with Services(tmp_path / "airflow", repo, path, tmp_path / "reports") as running:
        yield running


@pytest.mark.timeout(1200)
def test_backfills_and_a_manual_run_never_race(services: Services, two_clusters) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 3)
    produce(a, "orders", varied_records(1000), 3)
    services.cli("dags", "unpause", DAG_ID)  # the scheduler adds the latest hour's run
    services.cli("backfill", "create", "--dag-id", DAG_ID, "--from-date",
                 "2026-11-20T00:00:00", "--to-date", "2026-11-20T01:00:00")
    first = services.wait_for_runs(3, 600)
    produce(a, "orders", varied_records(500, 1000), 3)
    again = datetime.now(UTC).isoformat()
    services.cli("backfill", "create", "--dag-id", DAG_ID, "--from-date",
                 "2026-11-20T00:00:00", "--to-date", "2026-11-20T01:00:00",
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
