"""Airflow's real services on this machine: ``airflow standalone`` (scheduler, DAG
processor, triggerer, API server, LocalExecutor) on an Airflow home and SQLite database of
its own, with the project's DAGs over a mirrorflow config. The scheduler race test and
``make soak`` run flows through it.

Its API server listens on a free port, and the task runners are told so (Airflow's
execution API address otherwise stays on port 8080). Its services start sessions of their
own, out of reach of its process group: :meth:`LocalAirflow.stop` stops the whole tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from mirrorflow.airflow import PRELOAD
from mirrorflow.dev.localcluster import free_port
from mirrorflow.errors import MirrorflowError

BIN = Path(sys.executable).parent
# The scheduler's LocalExecutor workers started from a forkserver that has imported what
# the flows' tasks import (mirrorflow.airflow.preload); the Dockerfile sets the same.
PRELOAD_SETTINGS = {"AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
                    "AIRFLOW__CORE__MP_FORKSERVER_PRELOAD": PRELOAD}


class LocalAirflowError(MirrorflowError):
    """An Airflow command of the local services failed."""


class LocalAirflow:
    """``airflow standalone`` in ``home`` with ``repo``'s DAGs and plugins over
    ``config``, reports in ``reports``; ``settings`` add or override environment
    variables (``AIRFLOW__...``)."""

    def __init__(self, home: Path, repo: Path, config: Path, reports: Path,
                 settings: dict[str, str] | None = None) -> None:
        port = free_port()
        self.home, self.log = home, home / "standalone.log"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("AIRFLOW__") and k != "AIRFLOW_HOME"}
        self.env.update({
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # standalone's children
            "AIRFLOW_HOME": str(home),
            # Every process of the services, and every CLI command, waits up to a minute
            # for SQLite's write lock (Python's default: 5 s). A busy scheduler holds it
            # longer, and `airflow backfill create` failing half-way leaves a backfill of
            # part of its dates.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=60",
            "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(repo / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # Task processes inherit mirrorflow's imports (docs/deployment.md).
            **PRELOAD_SETTINGS,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "MIRRORFLOW_CONFIG": str(config),
            "MIRRORFLOW_REPORTS_DIR": str(reports),
            **(settings or {}),
        })
        self.process: subprocess.Popen | None = None

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """An Airflow CLI command; a failure on SQLite's "database is locked" (the services
        write the same file) is waited out, as a person would run the command again. A
        command that succeeded is never run again, whatever its log says."""
        deadline = time.monotonic() + 300
        while True:
            done = self._airflow(*args)
            if done.returncode == 0 or time.monotonic() > deadline or \
                    "database is locked" not in done.stderr:
                return done
            time.sleep(2)

    def create_backfill(self, dag_id: str, *args: str, timeout: float = 600.0) -> int:
        """``airflow backfill create --dag-id dag_id *args`` until it succeeds, as a person
        would run it again: the id of the backfill that succeeded. On SQLite, a command
        that fails on a lock half-way leaves a backfill of part of its dates (Airflow
        removes such a partial backfill only on the lock errors of PostgreSQL and MySQL);
        the scheduler closes it once its runs end (on a 30 s timer), and until then a new
        backfill of the DAG is refused (AlreadyRunningBackfill). Each failure's message
        is kept in ``cli-failures.log`` in the Airflow home."""
        deadline = time.monotonic() + timeout
        while True:
            done = self._airflow("backfill", "create", "--dag-id", dag_id, *args)
            if done.returncode == 0:
                return self.query("select max(id) from backfill where dag_id = ?", dag_id)[0][0]
            with (self.home / "cli-failures.log").open("a") as out:
                out.write(f"airflow backfill create {' '.join(args)}:\n{done.stderr}\n")
            if time.monotonic() > deadline or not any(
                    why in done.stderr for why in ("database is locked",
                                                   "AlreadyRunningBackfill")):
                raise LocalAirflowError(f"airflow backfill create --dag-id {dag_id} "
                                        f"{' '.join(args)}: {done.stderr[-2000:]}")
            time.sleep(5)

    def _airflow(self, *args: str) -> subprocess.CompletedProcess:
        """One ``airflow`` CLI command in the services' environment, run once."""
        return subprocess.run([str(BIN / "airflow"), *args], env=self.env,
                              capture_output=True, text=True, timeout=180, check=False)

    def cli(self, *args: str) -> str:
        """:meth:`run`, its output; a failure raises naming the command."""
        done = self.run(*args)
        if done.returncode != 0:
            raise LocalAirflowError(f"airflow {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout

    def query(self, sql: str, *params: object) -> list[tuple]:
        """The rows of one read of the services' SQLite database. Waiting on it this way
        costs a query, where each ``airflow`` CLI command costs a process of ~3 s CPU that
        the scheduler and the tasks under test would share the cores with."""
        deadline = time.monotonic() + 60
        while True:
            try:
                with contextlib.closing(sqlite3.connect(self.home / "airflow.db",
                                                        timeout=30)) as db:
                    return db.execute(sql, params).fetchall()
            except sqlite3.OperationalError as error:
                if time.monotonic() > deadline:
                    raise LocalAirflowError(f"{self.home / 'airflow.db'}: {error}") from error
                time.sleep(1)

    def start(self) -> None:
        """Migrate the database, create mirrorflow's Spark pool, start the services."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.cli("db", "migrate")
        self.cli("pools", "set", "mirrorflow_spark", "2", "Spark jobs of mirrorflow")
        with self.log.open("ab") as out:
            self.process = subprocess.Popen([str(BIN / "airflow"), "standalone"],
                                            env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        """Stop standalone and every process under it: SIGTERM, then SIGKILL what is left
        after a minute."""
        if self.process is None or self.process.poll() is not None:
            return
        tree = _descendants(self.process.pid)
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for pid in [self.process.pid, *tree]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(_alive(p) for p in tree):
                time.sleep(1)
        self.process.wait()


def db_time(value: str) -> datetime:
    """A date as Airflow's SQLite database stores it ("2026-11-25 23:05:40.405055", UTC)."""
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
