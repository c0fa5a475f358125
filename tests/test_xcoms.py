"""What a flow's DAG tasks hand each other through XCom stays bounded at 10,000 partitions:
the whole output is kept beside the run's report and read from there."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from mirrorflow.airflow.xcoms import brief, handoff, received
from mirrorflow.config.loader import parse_config
from mirrorflow.quality import metrics, reports
from mirrorflow.run import PartitionReport, RunResult


class TaskInstance:
    """Answers ``xcom_pull`` with what the task returned (Airflow's role here)."""

    def __init__(self, pushed: dict) -> None:
        self.pushed = pushed

    def xcom_pull(self, task_ids: str):
        return self.pushed.get(task_ids)


def test_ten_thousand_partitions_hand_off_a_bounded_xcom_and_the_whole_through_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(reports.REPORTS_ENV, str(tmp_path))
    parts = [PartitionReport(f"t{i // 4}", i % 4, f"a.t{i // 4}", 0, 3, 3, 300, 0, 0, 2,
                             {"p50": 10.0}, {"p50": 20.0}, 0.01) for i in range(10_000)]
    committed = asdict(RunResult("a->b", "run-1", "p1", False, partitions=parts,
                                 breaks=[{"topic": p.topic, "partition": p.partition,
                                          "cause": "new"} for p in parts],
                                 records=30_000, lag={f"t{i // 4}[{i % 4}]": 7
                                                      for i in range(10_000)}))
    assert len(json.dumps(committed)) > 3_000_000
    short = handoff("a->b", "run-1", "commit", committed)
    assert len(json.dumps(short)) < 16_384
    assert short["records"] == 30_000 and short["plan_id"] == "p1"
    assert short["partitions"][0]["topic"] == "t0" and short["partitions"][-1] == \
        "... 9980 more"
    assert short["lag"]["..."] == "9980 more" and len(short["lag"]) == 21
    ti = TaskInstance({"commit": short})
    assert received("a->b", "run-1", "commit", ti) == committed
    assert received("a->b", "run-1", "checkpoint", ti) is None  # returned nothing
    # A worker that does not share the reports directory gets the brief.
    shutil.rmtree(reports.run_dir("a->b", "run-1") / reports.PARTS)
    assert received("a->b", "run-1", "commit", ti) == short


def test_the_report_takes_a_failed_commit_tasks_kept_result_only_for_this_plan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit task that failed after its commit kept the commit's result: the report
    takes it for the plan this run's ``plan`` task made, and not after the run was cleared
    and planned anew (the kept result is the earlier attempt's plan, committed then)."""
    from mirrorflow.airflow.report_task import committed_output

    monkeypatch.setenv(reports.REPORTS_ENV, str(tmp_path))
    kept = asdict(RunResult("a->b", "run-1", "p1", False, records=5))
    handoff("a->b", "run-1", "commit", kept)
    assert committed_output("a->b", "run-1", TaskInstance({"plan": {"plan_id": "p1"}})) == kept
    assert committed_output("a->b", "run-1", TaskInstance({"plan": {"plan_id": "p2"}})) is None
    assert committed_output("a->b", "run-1", TaskInstance({})) is None  # plan failed too
    done = dict(kept, records=6)
    short = handoff("a->b", "run-1", "commit", done)
    assert committed_output("a->b", "run-1", TaskInstance(
        {"plan": {"plan_id": "p9"}, "commit": short})) == done


def test_lag_alerts_of_ten_thousand_partitions_name_the_first_twenty() -> None:
    flow = parse_config("clusters = a, b\na.bootstrap.servers = a:1\nb.bootstrap.servers = "
                        "b:1\na->b.enabled = true\n"
                        "mirrorflow.alert.max.lag.records = 5\n").flow("a->b")
    found = brief(metrics.alerts(flow, {"lag": {f"t{i}[0]": 7 for i in range(10_000)}}))
    assert found[0] == ("flow a->b: t0[0] lags 7 records behind the source, above "
                        "mirrorflow.alert.max.lag.records = 5")
    assert len(found) == 21 and found[-1] == "... 9980 more"
    assert brief("x" * 5000) == "x" * 2000 + "... (5000 characters)"
