"""Reports and the validation's bookkeeping, without brokers: sampling, verdict round trip,
suite files, the terminal table and the flow's index page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirrorflow.quality import reports
from mirrorflow.quality.suites import DEFAULT_EXPECTATIONS_DIR, user_suites
from mirrorflow.quality.validate import sample
from mirrorflow.quality.verdicts import PartitionVerdict, Validation, ValidationError
from mirrorflow.source.plan_records import Plan, Range


def plan_of(n: int) -> Plan:
    return Plan("p1", "a->b", "run-1", 0,
                tuple(Range("orders", p, 0, 10, "a.orders", 0) for p in range(n)))


def test_sampling_is_stable_and_never_empty() -> None:
    plan = plan_of(10)
    assert sample(plan, 1.0) == list(plan.ranges)
    half = sample(plan, 0.5)
    assert len(half) == 5 and half == sample(plan, 0.5)
    assert len(sample(plan, 0.01)) == 1


def test_validation_round_trips_and_names_the_place() -> None:
    bad = PartitionVerdict("orders", 3, "a.orders", 100, 200, 40, 162, planned=100,
                           verified=True, source_records=100, target_records=101,
                           source_digest="1", target_digest="2", altered=1, foreign=2,
                           first_foreign_offset=140, first_bad_source_offset=150,
                           first_bad_target_offset=90)
    validation = Validation("a->b", "run-1", "p1", False, 1.0, 100, 100, [bad],
                            failures=bad.problems())
    again = Validation.from_dict(json.loads(json.dumps(validation.to_dict())))
    assert again == validation
    message = str(again.error())
    assert "orders[3] -> a.orders[3]: 101 records on the target in the flow's spans" in message
    assert ("a.orders[3]: 2 records between offsets 40 and 161 were not written by a mirror "
            "flow (the first at offset 140)") in message
    assert "1 records on the target that are not source records (altered)" in message
    assert "first mismatch at source offset 150, target offset 90" in message
    assert "plan p1 stays pending" in message


def test_suite_files(tmp_path: Path) -> None:
    assert not list(DEFAULT_EXPECTATIONS_DIR.glob("*.json"))  # nothing extra by default
    examples = user_suites(DEFAULT_EXPECTATIONS_DIR / "examples")
    assert [s["name"] for s in examples] == ["values present"]
    (tmp_path / "broken.json").write_text('{"expectations": 3}')
    with pytest.raises(ValidationError, match=r"broken\.json: no 'expectations' list"):
        user_suites(tmp_path)


def test_summary_table_and_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(reports.REPORTS_ENV, str(tmp_path))
    verdict = PartitionVerdict("orders", 0, "a.orders", 0, 10, 0, 11, planned=10, verified=True,
                               source_records=10, target_records=10, source_digest="ab",
                               target_digest="ab", lag=5)
    ok = Validation("a->b", "run-1", "p1", True, 1.0, 10, 10, [verdict])
    reports.write("a->b", "run-1", {"flow": "a->b", "run_id": "run-1", "records": 10,
                                    "partitions": [{"topic": "orders", "partition": 0,
                                                    "records": 10, "skipped": 0}],
                                    "validation": ok.to_dict()})
    reports.write("a->b", "run/2", {"flow": "a->b", "run_id": "run/2",
                                    "validation": {**ok.to_dict(), "success": False,
                                                   "failures": ["orders[0]: boom"]}})
    table = reports.render(reports.read("a->b", "run-1"))
    assert "completeness: passed" in table
    assert [c for c in table.splitlines()[3].split()] == ["orders[0]", "10", "10", "0", "10",
                                                          "yes", "5"]
    assert "! orders[0]: boom" in reports.render(reports.read("a->b"))  # newest
    page = (tmp_path / "a__b" / "index.html").read_text()
    assert page.index("run/2") < page.index("run-1") and "FAILED" in page
    with pytest.raises(FileNotFoundError, match="run 'nope'"):
        reports.read("a->b", "nope")


def test_index_and_status_read_the_runs_rows_not_every_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flow mirrored every minute for months has tens of thousands of summaries, each
    megabytes for thousands of partitions: the index page and the status view read the
    newest runs' rows (runs.json), and only the shown run's summary. Old summaries are
    never parsed (here, one made unreadable), and the rows keep the newest INDEX_RUNS."""
    from mirrorflow.airflow import status

    monkeypatch.setenv(reports.REPORTS_ENV, str(tmp_path))
    for i in range(reports.INDEX_RUNS + 5):
        reports.write("a->b", f"run-{i}", {"run_id": f"run-{i}", "records": i,
                                           "lag": {"orders[0]": i, "orders[1]": 1},
                                           "validation": {"success": True}})
        if i == 0:
            (tmp_path / "a__b" / "run-0" / reports.SUMMARY).write_text("{not json")
    rows = reports.runs("a->b")
    assert [r["run_id"] for r in rows] == [f"run-{i}" for i in range(5, reports.INDEX_RUNS + 5)]
    assert rows[-1] == {"dir": "run-54", "run_id": "run-54", "verdict": "passed", "docs": False,
                        "records": 54, "verified_records": "", "duration_s": "", "lag": 55}
    page = (tmp_path / "a__b" / "index.html").read_text()
    assert page.count("<tr class=") == reports.INDEX_RUNS and "run-4<" not in page
    assert page.index("run-54") < page.index("run-5<")
    assert reports.read("a->b")["records"] == 54
    shown = status.page()
    assert "run-54" in shown and "max 55" in shown  # the lag chart's top: run-54's 54 + 1
    # A reports directory written before runs.json: rows from the newest summaries.
    (tmp_path / "a__b" / reports.RUNS).unlink()
    assert [r["run_id"] for r in reports.runs("a->b")][-2:] == ["run-53", "run-54"]


def test_two_thousand_runs_each_write_costs_the_same_and_retention_bounds_the_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """2,000 runs of a flow with mirrorflow.reports.retention.runs = 100: every write reads
    one file (the rows), parses no summary, and leaves the newest 100 runs' reports; a
    report older than retention.days goes at the next write whatever the count."""
    import os
    import time

    monkeypatch.setenv(reports.REPORTS_ENV, str(tmp_path))
    flow_dir = tmp_path / "a__b"
    keep = reports.Retention(runs=100, days=7)
    read: list[str] = []
    real_read = Path.read_text

    def counted(self: Path, *args, **kwargs) -> str:
        read.append(self.name)
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    reads, kept = [], []
    for i in range(2000):
        read.clear()
        reports.write("a->b", f"run-{i}", {"run_id": f"run-{i}", "records": i,
                                           "validation": {"success": True}}, keep)
        reads.append(list(read))
        if i % 250 == 0 or i == 1999:
            kept.append(sum(1 for p in flow_dir.iterdir() if p.is_dir()))
    assert reads[1] == reads[10] == reads[1999] == [reports.RUNS]
    assert kept == [1, 100, 100, 100, 100, 100, 100, 100, 100]
    assert sorted(p.name for p in flow_dir.iterdir() if p.is_dir()) == sorted(
        f"run-{i}" for i in range(1900, 2000))
    assert reports.read("a->b")["run_id"] == "run-1999"
    with pytest.raises(FileNotFoundError, match="no report for run 'run-1899'"):
        reports.read("a->b", "run-1899")
    page = (flow_dir / "index.html").read_text()
    assert page.count("<tr class=") == reports.INDEX_RUNS and "run-1949<" not in page
    # Days: a report eight days old goes at the next write, under the count as it is.
    old = flow_dir / "run-1950" / reports.SUMMARY
    eight_days_ago = time.time() - 8 * 86_400
    os.utime(old, (eight_days_ago, eight_days_ago))
    reports.write("a->b", "run-2000", {"run_id": "run-2000"}, keep)
    assert not (flow_dir / "run-1950").exists() and (flow_dir / "run-1951").is_dir()
    assert "run-1950<" not in (flow_dir / "index.html").read_text()
