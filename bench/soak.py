"""``make soak``: mirrorflow as a service (issue 26).

Three local Apache Kafka clusters (a, b, c), four flows (a->b, b->a, and the third cluster
fed by both: a->c, b->c), each a DAG on a 1-minute schedule run by the real Airflow services
(``airflow standalone``: scheduler, DAG processor, triggerer and API server on a SQLite
metadata database file) against a warm Spark Connect server. A load generator writes
``SOAK_RATE`` records/s (default 2,000) with keys, headers and current timestamps over the
sources' 20 topics of 4 partitions, for ``SOAK_MINUTES`` (default 30), from when every flow
has finished three runs (a service already running, its runs on their slots, when the load
comes; the first runs' own length, which creates the remote topics and the Spark Connect
sessions, is reported on its own) and the load has run for ``SOAK_WARMUP_MINUTES``
(default 3: the fresh JVMs compile its paths; reported on its own too); in the middle the
broker of cluster b (a target of two flows, the source of two) is stopped for 60 s and
started again. A ``read_committed``
consumer per target records each record's end-to-end lag (its source timestamp to its first
visibility). Then a second pass of ``SOAK_CONTINUOUS_MINUTES`` (default 10) with
``mirrorflow.schedule = @continuous``, each run's ``mirror`` repeating its cycle for
``SOAK_REPEAT_SECONDS`` (default 60; ``mirrorflow.mirror.repeat.seconds``).

At the end every source partition is compared with its remote partition on every target
(each record exactly once, in order) and ``bench/soak.json`` is written with a short table:
lag, DAG run durations and how much of them is Airflow's queueing, failed and overlapping
runs, and the disk used by reports and Airflow's database.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from process_cpu import ProcessCpu
from soak_figures import (
    SLOT_GRACE_S,
    covered,
    cycles_per_run,
    du,
    late_minutes,
    overlapped,
    percentile,
    report_bytes,
    started_late,
    table,
)
from soak_traffic import (
    CATCH_UP_S,
    FLOWS,
    PARTITIONS,
    SOURCES,
    Load,
    Tail,
    exactly_once,
    topics_of,
)

from mirrorflow.config.loader import load_config
from mirrorflow.dev import connect_server, localcluster
from mirrorflow.dev.local_airflow import LocalAirflow, LocalAirflowError, db_time
from mirrorflow.dev.localcluster import free_port

ROOT = Path(__file__).resolve().parents[1]
OUTAGE_S = 60
# Around the outage (from before it to after it): runs that fail and records that wait
# because of it.
OUTAGE_BEFORE_S, OUTAGE_AFTER_S = 60, 120
FIRST_RUNS_TIMEOUT_S = 900
# Runs each flow finishes before the load starts: the first ones all start together when
# the DAGs are unpaused (each runs its latest past time at once), and bunched runs share
# the cores and the Spark pool, and so come late to their next slot (five minutes of runs
# of 30-106 s in a soak that started the load after one run); by the third they start at
# their own second of the minute (mirrorflow.schedule.spread.seconds).
SETTLE_RUNS = 3
SETTLE_S = 120
# Minutes of load before the measured pass (SOAK_WARMUP_MINUTES). In the load's first
# minutes the fresh JVMs of the brokers and the Connect server compile its paths (in a short
# soak their compiler threads took about 80 CPU-s of the 2 cores' 360 in the first three),
# and Spark's Kafka source creates a pooled consumer for each partition it reads the first
# time (docs/operations.md): runs then lasted 40-60 s against 13 s after. A service's JVMs
# are warm and its consumers pooled (for 15 minutes, so a trickle in every partition keeps
# them). The warm-up's own figures are reported apart (warmup_*); its records are compared
# too.
WARMUP_MINUTES = 3.0
# The @continuous pass's mirrorflow.mirror.repeat.seconds: each run's mirror task repeats
# its cycle for this long (docs/operations.md), paying a run's Airflow part once a minute.
REPEAT_S = int(os.environ.get("SOAK_REPEAT_SECONDS", "60"))


def write_config(path: Path, ports: dict[str, int], connect_port: int, schedule: str,
                 repeat_s: int = 0) -> None:
    lines = ["clusters = a, b, c",
             *[f"{alias}.bootstrap.servers = 127.0.0.1:{port}" for alias, port in ports.items()],
             *[f"{s}->{t}.enabled = true" for s, t in FLOWS],
             "topics = load-.*", f"mirrorflow.schedule = {schedule}",
             f"mirrorflow.spark.master = sc://127.0.0.1:{connect_port}",
             "replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
             "checkpoints.topic.replication.factor = 1",
             "heartbeats.topic.replication.factor = 1",
             f"mirrorflow.mirror.repeat.seconds = {repeat_s}"]
    path.write_text("\n".join(lines) + "\n")


class Airflow(LocalAirflow):
    """The local Airflow services over the soak's config, its flows' DAGs unpaused."""

    def __init__(self, home: Path, config: Path, reports: Path, connect_port: int) -> None:
        super().__init__(home, ROOT, config, reports, {
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW_CONN_SPARK_DEFAULT": connect_server.airflow_connection("127.0.0.1",
                                                                            connect_port)})

    def drain(self, timeout: float = 900.0) -> None:
        """Wait until no run of the flows is queued or running, the caller having switched
        their schedule off in the config (the DAG processor re-reads it every 30 s; a
        paused DAG would instead freeze its running run, retries and all)."""
        started = time.monotonic()
        quiet_since = None
        while time.monotonic() < started + timeout:
            active = self.query("select count(*) from dag_run where state in "
                                "('running', 'queued')")[0][0]
            now = time.monotonic()
            quiet_since = (quiet_since or now) if not active else None
            if quiet_since is not None and now - quiet_since >= 15 and now - started >= 75:
                return
            time.sleep(5)
        stuck = self.query("select dag_id, run_id, task_id, state, start_date from "
                           "task_instance where state in ('running', 'queued', "
                           "'up_for_retry', 'up_for_reschedule')")
        raise RuntimeError(f"the flows' DAG runs did not end within {timeout:.0f}s; tasks "
                           f"not done: {stuck}")

    def wait_for_dags(self, count: int, timeout: float = 180.0) -> None:
        """Until the DAG processor has stored ``count`` DAGs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.query("select count(*) from dag where dag_id like 'mirror__%'"
                              )[0][0] >= count:
                    return
            except LocalAirflowError:  # no dag table yet
                pass
            time.sleep(2)
        raise RuntimeError(f"Airflow did not load {count} DAGs in {timeout:.0f}s; see "
                           f"{self.home / 'standalone.log'}")

    def wait_for_settled(self, count: int) -> dict[str, float]:
        """Until ``count`` flows have each finished :data:`SETTLE_RUNS` runs successfully;
        each one's first run's seconds."""
        deadline = time.monotonic() + FIRST_RUNS_TIMEOUT_S
        while time.monotonic() < deadline:
            done: dict[str, list[float]] = {}
            for run in sorted(self.runs(), key=lambda run: run["start"]):
                if run["state"] == "success":
                    done.setdefault(run["dag_id"], []).append(run["seconds"])
            if len(done) >= count and all(len(s) >= SETTLE_RUNS for s in done.values()):
                return {dag: seconds[0] for dag, seconds in sorted(done.items())}
            time.sleep(5)
        raise RuntimeError(f"not every flow finished {SETTLE_RUNS} runs within "
                           f"{FIRST_RUNS_TIMEOUT_S}s; see {self.home / 'standalone.log'}")

    def runs(self) -> list[dict]:
        """Every DAG run and the queued and running seconds of its tasks."""
        runs = [dict(zip(("dag_id", "run_id", "state", "start", "end"), row, strict=True))
                for row in self.query("select dag_id, run_id, state, start_date, end_date "
                                      "from dag_run where start_date is not null")]
        tasks = self.query("select dag_id, run_id, queued_dttm, start_date, end_date, "
                           "try_number from task_instance where start_date is not null")
        spent: dict[tuple[str, str], list] = {}
        for dag_id, run_id, queued, start, end, tries in tasks:
            item = spent.setdefault((dag_id, run_id), [0.0, 0.0, 0, []])
            if queued and start:
                item[0] += max(0.0, (db_time(start) - db_time(queued)).total_seconds())
            if start and end:
                item[1] += (db_time(end) - db_time(start)).total_seconds()
                item[3].append((db_time(start), db_time(end)))
            item[2] += max(0, (tries or 1) - 1)
        for run in runs:
            run["queued_s"], run["running_s"], run["retries"], spans = spent.get(
                (run["dag_id"], run["run_id"]), [0.0, 0.0, 0, []])
            run["seconds"] = ((db_time(run["end"]) - db_time(run["start"])).total_seconds()
                              if run["end"] else None)
            # Time in which none of the run's tasks ran: the scheduler's gaps between them.
            run["idle_s"] = (None if run["seconds"] is None
                             else max(0.0, run["seconds"] - covered(spans)))
        return runs


    def task_seconds(self, since: float) -> dict[str, list[float]]:
        """Each task's durations over the runs that succeeded, started from ``since``."""
        found: dict[str, list[float]] = {}
        for task_id, seconds, start in self.query(
                "select t.task_id, t.duration, r.start_date from task_instance t join "
                "dag_run r on t.dag_id = r.dag_id and t.run_id = r.run_id where t.state = "
                "'success' and t.duration is not null and r.state = 'success'"):
            if db_time(start).timestamp() >= since:
                found.setdefault(task_id, []).append(seconds)
        return found


def soak(state: Path, minutes: float, continuous_minutes: float, rate: float,
         warmup_minutes: float) -> dict:
    for owned in ("local", "airflow", "reports"):  # an earlier soak's
        shutil.rmtree(state / owned, ignore_errors=True)
    state.mkdir(parents=True, exist_ok=True)
    ports = {alias: free_port() for alias in ("a", "b", "c")}
    connect_port = free_port()
    config_path, reports = state / "soak.properties", state / "reports"
    write_config(config_path, ports, connect_port, "* * * * *")
    config = load_config(config_path)
    brokers = localcluster.up(config, state / "local")
    bootstraps = {b.alias: b.bootstrap for b in brokers}
    airflow = Airflow(state / "airflow", config_path, reports, connect_port)
    tails: dict[str, Tail] = {}
    cpu, continuous_cpu = ProcessCpu(), ProcessCpu()  # each pass's
    try:
        for source in SOURCES:
            admin = AdminClient({"bootstrap.servers": bootstraps[source]})
            for future in admin.create_topics([NewTopic(t, PARTITIONS, 1)
                                               for t in topics_of(source)]).values():
                future.result(60)
        patterns = {"b": r"^a\.load-.*", "a": r"^b\.load-.*", "c": r"^(a|b)\.load-.*"}
        airflow.start()
        airflow.wait_for_dags(len(FLOWS))
        airflow.cli("dags", "unpause", "--yes", "--treat-dag-id-as-regex", "^mirror__")
        first_runs = airflow.wait_for_settled(len(FLOWS))
        db_start = du(state / "airflow" / "airflow.db")
        tails = {alias: Tail(bootstraps[alias], pattern) for alias, pattern in patterns.items()}
        for tail in tails.values():
            tail.start()
        loads = [Load(bootstraps[s], s, rate / len(SOURCES)) for s in SOURCES]
        warm_start = time.time()
        for load in loads:
            load.start()
        time.sleep(warmup_minutes * 60)  # see WARMUP_MINUTES
        cpu.start()
        started = time.time()
        time.sleep(minutes * 30)
        broker_b = next(b for b in brokers if b.alias == "b")
        outage = time.time()
        localcluster.stop(broker_b)
        time.sleep(OUTAGE_S)
        localcluster.start(broker_b)
        time.sleep(max(0.0, started + minutes * 60 - time.time()))
        cron_end = time.time()
        cron_cpu = cpu.result()
        write_config(config_path, ports, connect_port, "none")
        airflow.drain()  # no run cut short by the restart
        airflow.stop()
        # The runs under load: from the first that started after the warm-up.
        warm_runs = [run for run in airflow.runs() if run["seconds"] is not None
                     and warm_start <= db_time(run["start"]).timestamp() < started]
        cron_runs = [run for run in airflow.runs()
                     if db_time(run["start"]).timestamp() >= started]
        cron_tasks = airflow.task_seconds(started)
        # The switch to @continuous as docs/operations.md gives it: Airflow's continuous
        # timetable, given a DAG that ran on a cron schedule, keeps proposing the last cron
        # run's date ("run already exists; skipping dagrun creation"), so the DAGs' Airflow
        # history goes first (mirrorflow's own state is on the clusters).
        write_config(config_path, ports, connect_port, "@continuous", REPEAT_S)
        for source, target in FLOWS:
            airflow.cli("dags", "delete", "--yes", f"mirror__{source}__{target}")
        airflow.start()
        # A repeating mirror task holds its Spark pool slot for its whole window: a slot
        # per flow (docs/operations.md).
        airflow.cli("pools", "set", "mirrorflow_spark", str(len(FLOWS)), "Spark jobs")
        airflow.wait_for_dags(len(FLOWS))
        airflow.cli("dags", "unpause", "--yes", "--treat-dag-id-as-regex", "^mirror__")
        continuous_start = time.time()
        continuous_cpu.start()
        time.sleep(continuous_minutes * 60)
        continuous_cpu.stopped.set()
        continuous_end = time.time()
        for load in loads:
            load.stopped.set()
        for load in loads:
            load.join()
        deadline = time.time() + CATCH_UP_S
        while time.time() < deadline and not _caught_up(config):
            time.sleep(10)
        ended = time.time()
        airflow.stop()
        continuous_runs = airflow.runs()
        continuous_tasks = airflow.task_seconds(continuous_start)
        runs = cron_runs + continuous_runs
        db_end = du(state / "airflow" / "airflow.db")
        for tail in tails.values():
            tail.stopped.set()
        for tail in tails.values():
            tail.join()
        checked = exactly_once(bootstraps)
    finally:
        cpu.stopped.set()
        continuous_cpu.stopped.set()
        for tail in tails.values():
            tail.stopped.set()
        airflow.stop()
        localcluster.down(config, state / "local")

    def lags(since: float, until: float, produced_after: float,
             produced_before: float = float("inf")) -> list[float]:
        return [lag for tail in tails.values()
                for at, lag in zip(tail.arrived, tail.lags, strict=True)
                if since <= at < until and produced_after <= at - lag < produced_before]

    cron_lags = lags(started, cron_end, started)
    around = (outage - OUTAGE_BEFORE_S, outage + OUTAGE_S + OUTAGE_AFTER_S)
    # Records produced away from the outage: before it, or after it and its aftermath.
    calm_lags = [lag for tail in tails.values()
                 for at, lag in zip(tail.arrived, tail.lags, strict=True)
                 if started <= at < cron_end and at - lag >= started
                 and not around[0] <= at - lag <= around[1]]
    # The continuous pass begins with what the switch's pause let pile up: its lag is that
    # of the records produced once the pass has run for SETTLE_S.
    continuous_lags = lags(continuous_start, ended, continuous_start + SETTLE_S)
    cron_done = [r for r in cron_runs if r["seconds"] is not None]
    seconds = [r["seconds"] for r in cron_done]
    # Runs none of whose time is around the outage.
    calm_seconds = [r["seconds"] for r in cron_done
                    if db_time(r["end"]).timestamp() < around[0]
                    or db_time(r["start"]).timestamp() > around[1]]
    continuous_seconds = [r["seconds"] for r in continuous_runs if r["seconds"] is not None]
    on_slot = [r["seconds"] for r in cron_done
               if (late := started_late(r)) is not None and late <= SLOT_GRACE_S]
    peaks = (cpu.peak_rss_mib(), continuous_cpu.peak_rss_mib())
    return {
        "minutes": minutes, "continuous_minutes": continuous_minutes, "rate": rate,
        "continuous_repeat_s": REPEAT_S,
        "continuous_cycles_per_run_p50": percentile(cycles_per_run(reports, continuous_start),
                                                    0.5),
        "records_produced": checked["records_compared"],
        "records_refused_at_source": sum(load.failed for load in loads),
        "records_lost": checked["records_lost"],
        "records_duplicated": checked["records_duplicated"],
        "partitions_out_of_order": checked["partitions_out_of_order"],
        "lag_p50_s": percentile(cron_lags, 0.5), "lag_p99_s": percentile(cron_lags, 0.99),
        "lag_max_s": percentile(cron_lags, 1.0),
        "lag_p50_outside_outage_s": percentile(calm_lags, 0.5),
        "lag_p99_outside_outage_s": percentile(calm_lags, 0.99),
        "continuous_lag_p50_s": percentile(continuous_lags, 0.5),
        "continuous_lag_p99_s": percentile(continuous_lags, 0.99),
        "dag_run_p50_s": percentile(seconds, 0.5), "dag_run_p99_s": percentile(seconds, 0.99),
        "dag_run_max_s": percentile(seconds, 1.0),
        "dag_run_p50_outside_outage_s": percentile(calm_seconds, 0.5),
        "dag_run_p99_outside_outage_s": percentile(calm_seconds, 0.99),
        "dag_run_on_slot_p50_s": percentile(on_slot, 0.5),
        "dag_run_on_slot_p99_s": percentile(on_slot, 0.99),
        "runs_on_slot": len(on_slot), "runs_late": len(cron_done) - len(on_slot),
        "late_minutes": late_minutes(cron_done),
        "first_run_s": first_runs,
        "warmup_minutes": warmup_minutes,
        "warmup_lag_p99_s": percentile(lags(warm_start, cron_end, warm_start, started), 0.99),
        "warmup_dag_run_p50_s": percentile([r["seconds"] for r in warm_runs], 0.5),
        "warmup_dag_run_max_s": percentile([r["seconds"] for r in warm_runs], 1.0),
        "dag_run_queued_p50_s": percentile([r["queued_s"] for r in cron_done], 0.5),
        "dag_run_task_running_p50_s": percentile([r["running_s"] for r in cron_done], 0.5),
        "dag_run_no_task_running_p50_s": percentile([r["idle_s"] for r in cron_done], 0.5),
        "task_p50_s": {task: percentile(seconds, 0.5)
                       for task, seconds in sorted(cron_tasks.items())},
        "runs": len(runs), "runs_failed": sum(r["state"] == "failed" for r in runs),
        "runs_failed_outside_outage": sum(
            r["state"] == "failed" and not around[0] <= db_time(r["start"]).timestamp()
            <= around[1] for r in runs),
        "runs_retried": sum(r["retries"] > 0 for r in runs), "runs_overlapped": overlapped(runs),
        "report_bytes_per_run_first": report_bytes(reports, started, started + 300),
        "report_bytes_per_run_last": report_bytes(reports, cron_end - 300, cron_end),
        "reports_bytes_end": du(reports), "airflow_db_bytes_start": db_start,
        "airflow_db_bytes_end": db_end,
        "continuous_runs": len(continuous_runs),
        "continuous_dag_run_p50_s": percentile(continuous_seconds, 0.5),
        "continuous_dag_run_p99_s": percentile(continuous_seconds, 0.99),
        "continuous_task_p50_s": {task: percentile(seconds, 0.5)
                                  for task, seconds in sorted(continuous_tasks.items())},
        # CPU seconds by kind of process over the 1-minute schedule's pass.
        "cpu_s_cron": cron_cpu, "cron_runs": len(cron_runs),
        # ... and over the @continuous pass (not its catch-up), with the runs it started.
        "cpu_s_continuous": continuous_cpu.result(),
        # The largest one process of each kind grew, over both passes (the Connect server's
        # JVM: one process, every flow's jobs).
        "peak_rss_mib": {kind: max(p.get(kind, 0) for p in peaks)
                         for kind in set().union(*peaks)},
        "continuous_runs_in_pass": sum(
            continuous_start <= db_time(r["start"]).timestamp() < continuous_end
            for r in continuous_runs),
    }


def _caught_up(config) -> bool:
    """Every flow's committed position at its source partitions' end. (Not the remote
    partitions' ends: their transaction markers make them longer than the records.)"""
    from mirrorflow.errors import MirrorflowError
    from mirrorflow.kafka.watermarks import probe_watermarks
    from mirrorflow.source.offsets import OffsetStore

    try:
        for source, target in FLOWS:
            parts = [(t, p) for t in topics_of(source) for p in range(PARTITIONS)]
            ends = probe_watermarks(config.cluster(source), parts)
            done = OffsetStore(config.cluster(target), source).positions()
            if any(done.get(tp, -1) + 1 < ends[tp].high for tp in parts):
                return False
    except (MirrorflowError, KeyError, TimeoutError):  # a cluster still coming back
        return False
    return True


def main() -> int:
    minutes = float(os.environ.get("SOAK_MINUTES", "30"))
    warmup = float(os.environ.get("SOAK_WARMUP_MINUTES", str(WARMUP_MINUTES)))
    continuous = float(os.environ.get("SOAK_CONTINUOUS_MINUTES", "10"))
    rate = float(os.environ.get("SOAK_RATE", "2000"))
    state = Path(os.environ.get("SOAK_DIR", ROOT / ".soak"))
    result = soak(state, minutes, continuous, rate, warmup)
    (ROOT / "bench" / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0 if result["records_lost"] == result["records_duplicated"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
