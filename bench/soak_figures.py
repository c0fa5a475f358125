"""The soak's figures (``bench/soak.py``): percentiles, the runs' timing on their slots,
the reports' and the database's size, and the table it prints."""

from __future__ import annotations

import itertools
import json
import statistics
from datetime import datetime
from pathlib import Path

from mirrorflow.dev.local_airflow import db_time

# A run that started within this of its time (its logical date: the cron time plus the
# flow's spread offset) is on its slot; a later one started late, after the flow's previous
# run ended past that time (the runs' two states: docs/operations.md).
SLOT_GRACE_S = 5.0


def covered(spans: list[tuple[datetime, datetime]]) -> float:
    """Seconds covered by the union of the spans."""
    total, reach = 0.0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += (end - start).total_seconds()
            reach = end
        elif end > reach:
            total += (end - reach).total_seconds()
            reach = end
    return total


def percentile(values, q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def started_late(run: dict) -> float | None:
    """Seconds from a scheduled run's time (in its run id) to its start; None for others."""
    if not run["run_id"].startswith("scheduled__"):
        return None
    due = datetime.fromisoformat(run["run_id"].removeprefix("scheduled__"))
    return (db_time(run["start"]) - due).total_seconds()


def late_minutes(runs: list[dict]) -> int:
    """Minutes of the schedule in which at least one flow's run started late."""
    return len({db_time(run["start"]).replace(second=0, microsecond=0) for run in runs
                if (started_late(run) or 0.0) > SLOT_GRACE_S})


def overlapped(runs: list[dict]) -> int:
    count = 0
    for dag_id in {r["dag_id"] for r in runs}:
        spans = sorted((db_time(r["start"]), db_time(r["end"])) for r in runs
                       if r["dag_id"] == dag_id and r["end"])
        count += sum(1 for (_, end), (start, _) in itertools.pairwise(spans) if start < end)
    return count


def cycles_per_run(reports: Path, since: float) -> list[int]:
    """Cycles of each run reported from ``since`` (mirrorflow.mirror.repeat.seconds)."""
    return [len(json.loads(path.read_text()).get("cycles", [])) + 1
            for path in reports.glob("*/*/summary.json") if path.stat().st_mtime >= since]


def report_bytes(reports: Path, since: float, until: float) -> float | None:
    """Bytes on disk per run report written between the two times."""
    sizes = []
    for run in reports.glob("*/*/summary.json"):
        if since <= run.stat().st_mtime < until:
            sizes.append(sum(p.stat().st_size for p in run.parent.rglob("*") if p.is_file()))
    return round(statistics.mean(sizes)) if sizes else None


def du(path: Path) -> int:
    """Bytes of a file, or of the files under a directory."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def table(result: dict) -> str:
    rows = [("records produced (compared on every flow)", result["records_produced"]),
            ("lost / duplicated / partitions out of order",
             f"{result['records_lost']} / {result['records_duplicated']} / "
             f"{result['partitions_out_of_order']}"),
            ("lag p50 / p99 / max, 1-minute schedule (s)",
             f"{result['lag_p50_s']} / {result['lag_p99_s']} / {result['lag_max_s']}"),
            ("lag p50 / p99 of records produced away from the outage, 1-minute schedule (s)",
             f"{result['lag_p50_outside_outage_s']} / {result['lag_p99_outside_outage_s']}"),
            ("lag p50 / p99, @continuous (s)",
             f"{result['continuous_lag_p50_s']} / {result['continuous_lag_p99_s']}"),
            ("DAG run p50 / p99, @continuous (s)",
             f"{result['continuous_dag_run_p50_s']} / {result['continuous_dag_run_p99_s']}"),
            ("cycles a run p50, @continuous (repeat s)",
             f"{result['continuous_cycles_per_run_p50']} ({result['continuous_repeat_s']})"),
            ("DAG run p50 / p99 / max (s)",
             f"{result['dag_run_p50_s']} / {result['dag_run_p99_s']} / {result['dag_run_max_s']}"),
            ("DAG run p50 / p99 away from the outage (s)",
             f"{result['dag_run_p50_outside_outage_s']} / "
             f"{result['dag_run_p99_outside_outage_s']}"),
            ("DAG run p50 / p99 of the runs on their slots (started within "
             f"{SLOT_GRACE_S:.0f} s of their time) (s)",
             f"{result['dag_run_on_slot_p50_s']} / {result['dag_run_on_slot_p99_s']}"),
            ("runs on their slots / started late; minutes with a late run",
             f"{result['runs_on_slot']} / {result['runs_late']}; {result['late_minutes']}"),
            ("each flow's first run, before the load (s)",
             ", ".join(f"{dag} {sec:.1f}" for dag, sec in result["first_run_s"].items())),
            ("warm-up, the load's first minutes before the pass: DAG run p50 / max (s); lag "
             "p99 (s)",
             f"{result['warmup_minutes']} min: {result['warmup_dag_run_p50_s']} / "
             f"{result['warmup_dag_run_max_s']}; {result['warmup_lag_p99_s']}"),
            ("of a run (p50): tasks queued / tasks running (s, summed over tasks) / no task "
             "running (the scheduler's gaps)",
             f"{result['dag_run_queued_p50_s']} / {result['dag_run_task_running_p50_s']} / "
             f"{result['dag_run_no_task_running_p50_s']}"),
            ("task p50 (s), 1-minute schedule",
             ", ".join(f"{task} {sec}" for task, sec in result["task_p50_s"].items())),
            ("task p50 (s), @continuous",
             ", ".join(f"{task} {sec}"
                       for task, sec in result["continuous_task_p50_s"].items())),
            ("runs / failed (outside the outage) / retried / overlapped",
             f"{result['runs']} / {result['runs_failed']} ({result['runs_failed_outside_outage']})"
             f" / {result['runs_retried']} / {result['runs_overlapped']}"),
            ("report bytes per run, first / last 5 minutes",
             f"{result['report_bytes_per_run_first']} / {result['report_bytes_per_run_last']}"),
            ("Airflow database bytes, start / end",
             f"{result['airflow_db_bytes_start']} / {result['airflow_db_bytes_end']}"),
            *[(f"CPU seconds a{name} run, by process",
               ", ".join(f"{kind} {seconds / max(1, result[runs]):.1f}"
                         for kind, seconds in result[cpu].items()))
              for name, cpu, runs in ((" 1-minute-schedule", "cpu_s_cron", "cron_runs"),
                                      ("n @continuous", "cpu_s_continuous",
                                       "continuous_runs_in_pass"))]]
    return "\n".join(["| measure | figure |", "| --- | ---: |",
                      *[f"| {name} | {value} |" for name, value in rows]])
