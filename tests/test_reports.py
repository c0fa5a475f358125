"""Reports and the validation's bookkeeping, without brokers: sampling, verdict round trip,
suite files, the terminal table and the flow's index page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirrorflow.quality import reports
from mirrorflow.quality.validate import (
    DEFAULT_EXPECTATIONS_DIR,
    PartitionVerdict,
    Validation,
    ValidationError,
    sample,
    user_suites,
)
from mirrorflow.source.plan import Plan, Range


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
