"""The completeness proof against Apache Kafka and real Spark: a faithful mirror passes;
foreign, altered, deleted, duplicated and reordered records, a checkpoint claiming more
than was mirrored and a failing user expectation each fail, naming the place."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from helpers.kafka import config_file, create_topic, produce, read_partition, varied_records
from mirrorflow.cli import main
from mirrorflow.config.loader import load_config
from mirrorflow.kafka.internal_topics import CompactedTopic
from mirrorflow.kafka.records import Checkpoint
from mirrorflow.quality import reports
from mirrorflow.quality.validate import validate_plan
from mirrorflow.quality.verdicts import ValidationError
from mirrorflow.run import run_cycle
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import plan_run
from mirrorflow.source.plan_records import Plan, Range
from mirrorflow.source.plan_store import PlanStore

pytestmark = [pytest.mark.broker, pytest.mark.spark]

RECORDS = 400  # 200 per partition of "orders"


def produce_to(bootstrap: str, topic: str, partition: int, rows: list) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value, headers, ts in rows:
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts,
                         partition=partition)
    assert producer.flush(30) == 0


@pytest.fixture
def source(two_clusters: dict[str, str], tmp_path: Path):
    """'orders' (2 partitions, varied records) on a; the MM2 config a->b."""
    a = two_clusters["a"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(RECORDS), 2)
    expectations = tmp_path / "expectations"
    expectations.mkdir()
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true\n",
                       "emit.heartbeats.enabled = false\n"
                       # several input partitions per range: the check numbers across them
                       "mirrorflow.records.per.spark.partition = 100\n"
                       f"mirrorflow.validate.expectations.dir = {expectations}\n")
    return two_clusters, path, expectations


def fresh_copy(clusters: dict[str, str], change=None) -> tuple[Plan, dict]:
    """Copy 'orders' into a new topic on b (changing partition 1 with ``change``), and the
    plan and mirror result that say the copy is the mirror of offsets 0..199: the spans
    claim remote offsets 0..199, upstream offset u at remote offset u."""
    a, b = clusters["a"], clusters["b"]
    copy = f"copy-{uuid.uuid4().hex[:6]}"
    create_topic(b, copy, 2)
    for p in range(2):
        rows = read_partition(a, "orders", p)
        produce_to(b, copy, p, change(rows) if change and p == 1 else rows)
    n = RECORDS // 2
    plan = Plan(f"test-{copy}", "a->b", f"run-{copy}", 0,
                tuple(Range("orders", p, 0, n, copy, 0) for p in range(2)))
    result = {"ranges": [{"topic": "orders", "partition": p, "remote_topic": copy,
                          "records": n, "owned": [[0, n - 1]], "syncs": [[0, 0], [n - 1, n - 1]]}
                         for p in range(2)]}
    return plan, result


def check(spark, path: Path, plan: Plan, result: dict):
    config = load_config(path)
    return validate_plan(spark, config, config.flow("a->b"), plan, result, plan.run_id)


def test_faithful_copy_passes_with_data_docs_and_summary(spark, source) -> None:
    clusters, path, _ = source
    plan, result = fresh_copy(clusters)
    validation = check(spark, path, plan, result)
    assert validation.success, validation.failures
    assert validation.verified_records == RECORDS and validation.verified_fraction == 1.0
    assert all(r.digest_match and r.target_records == 200 for r in validation.ranges)
    assert validation.expectations == {"mirrorflow.completeness": True,
                                       "mirrorflow.checkpoints": True}
    validation.wait_for_docs()  # rendered in the background, off the verdict's path
    docs = Path(validation.data_docs)
    assert docs.exists() and "mirrorflow.completeness" in docs.read_text()
    assert (docs.parent / "static").is_symlink()
    summary = reports.read("a->b", plan.run_id)
    assert summary["validation"]["success"]
    assert "completeness: passed" in reports.render(summary)
    assert plan.run_id in reports.write_index("a->b").read_text()


def test_data_docs_that_cannot_be_written_leave_the_verdict_and_a_warning(
        tmp_path, caplog, monkeypatch) -> None:
    from mirrorflow.quality.suites import build_docs, run_suites

    monkeypatch.setenv(reports.REPORTS_ENV, str(tmp_path / "reports"))
    blocked = tmp_path / "docs"
    blocked.write_text("a file where the run's Data Docs would go")
    outcome, results = run_suites([], [], 0, None, [], "run-1")
    assert outcome == {"mirrorflow.completeness": True, "mirrorflow.checkpoints": True}
    with caplog.at_level(logging.WARNING, logger="mirrorflow.quality.validate"):
        build_docs(results, blocked, "a->b", "run-1")
    assert (f"the Data Docs of run run-1 were not written to "
            f"{tmp_path / 'reports' / 'a__b' / 'run-1'}: ") in caplog.text
    assert blocked.read_text() == "a file where the run's Data Docs would go"


def _alter(rows):
    rows[17] = (rows[17][0], b"altered", rows[17][2], rows[17][3])
    return rows


@pytest.mark.parametrize("change, counts, source_offset, target_offset", [
    (_alter, {"altered": 1, "missing": 1}, 17, 17),
    (lambda rows: rows[:50] + rows[51:], {"missing": 1}, 50, 50),
    (lambda rows: [*rows[:10], rows[10], *rows[10:]], {"duplicates": 1, "missing": 1,
                                                       "foreign": 1}, 11, 11),
    (lambda rows: [*rows[:3], rows[4], rows[3], *rows[5:]], {}, 3, 3),
], ids=["altered", "deleted", "duplicated", "reordered"])
def test_corrupted_copy_fails_naming_the_place(spark, source, change, counts, source_offset,
                                              target_offset) -> None:
    clusters, path, _ = source
    plan, result = fresh_copy(clusters, change)
    validation = check(spark, path, plan, result)
    assert not validation.success
    good, bad = validation.ranges
    assert good.digest_match and not bad.digest_match
    for name in ("missing", "duplicates", "altered", "foreign"):
        assert getattr(bad, name) == counts.get(name, 0), name
    assert (bad.first_bad_source_offset, bad.first_bad_target_offset) == (source_offset,
                                                                          target_offset)
    assert any(f.startswith("orders[1] -> copy-") and
               f"first mismatch at source offset {source_offset}" in f
               for f in validation.failures), validation.failures
    if counts.get("foreign"):  # the duplicate pushed the last record past the spans
        assert bad.first_foreign_offset == RECORDS // 2
        assert f"were not written by a mirror flow (the first at offset {RECORDS // 2})" in \
            " ".join(validation.failures)
    assert not validation.expectations["mirrorflow.completeness"]


def test_checkpoint_claiming_more_than_was_mirrored_fails(spark, source) -> None:
    clusters, path, _ = source
    config = load_config(path)
    OffsetStore(config.cluster("b"), "a").commit({("orders", 0): 99, ("orders", 1): 99})
    topic = CompactedTopic(config.cluster("b"), "a.checkpoints.internal", 1, 1)
    topic.ensure()
    ahead = Checkpoint("billing", "a.orders", 0, 150, 150, "")
    rewound = Checkpoint("billing", "a.orders", 1, 40, 40, "")  # the group moved back: fine
    # A group ahead of the mirror (live traffic) is translated to the mirrored end: fine.
    leading = Checkpoint("reports", "a.orders", 1, 170, 100, "")
    topic.write([(c.key(), c.value()) for c in (ahead, rewound, leading)])
    plan, result = fresh_copy(clusters)
    validation = check(spark, path, plan, result)
    assert not validation.success
    assert validation.failures == [
        "checkpoint of group 'billing' for orders[0] points consumers at remote offset 150, "
        "past the flow's mirrored records (remote offsets up to 99, upstream up to 99)"]
    assert not validation.expectations["mirrorflow.checkpoints"]


def test_user_expectations_run_over_the_mirrored_records(spark, source) -> None:
    clusters, path, expectations = source
    (expectations / "keys.json").write_text(json.dumps({"name": "topics named", "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "topic"}}]}))
    (expectations / "values.json").write_text(json.dumps({"expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "value"}}]}))
    plan, result = fresh_copy(clusters)
    validation = check(spark, path, plan, result)
    assert validation.expectations["topics named"]
    assert not validation.expectations["values"]  # the data has tombstones
    assert validation.failures == ["expectation suite 'values' failed (see the Data Docs)"]


def test_sampling_verifies_a_share_of_the_ranges(spark, source) -> None:
    clusters, path, _ = source
    path.write_text(path.read_text() + "mirrorflow.validate.fraction = 0.5\n")
    plan, result = fresh_copy(clusters, _alter)
    validation = check(spark, path, plan, result)
    assert [r.verified for r in validation.ranges].count(True) == 1
    assert validation.verified_fraction == 0.5
    assert "fraction setting 0.5" in reports.render({"validation": validation.to_dict()})


def test_foreign_record_in_the_remote_topic_fails_the_run_and_commits_nothing(
        spark, source, capsys: pytest.CaptureFixture) -> None:
    clusters, path, _ = source
    a, b = clusters["a"], clusters["b"]
    first = run_cycle(path, "a->b", spark=spark)
    assert first.validation["success"] and first.validation["verified_records"] == RECORDS
    produce(a, "orders", varied_records(100, RECORDS), 2)
    config = load_config(path)
    flow = config.flow("a->b")
    # Someone produces straight into the remote topic between two runs.
    produce_to(b, "a.orders", 0, [(b"k", b"not from a", None, 1_700_000_000_000)])
    foreign_at = read_partition(b, "a.orders", 0, with_offsets=True)[-1][0]
    plan, _ = plan_run(config, flow, "second")
    positions = OffsetStore(config.cluster("b"), "a").positions()

    assert main(["run", str(path), "--flow", "a->b"]) == 1
    err = capsys.readouterr().err
    assert "failed its completeness check" in err
    assert (f"a.orders[0]: 1 records between offsets {foreign_at} and "
            f"{plan.ranges[0].target_start + 50}") in err  # 50 records and a marker later
    assert f"were not written by a mirror flow (the first at offset {foreign_at})" in err
    assert OffsetStore(config.cluster("b"), "a").positions() == positions
    assert PlanStore(config, flow).pending().plan_id == plan.plan_id
    assert not reports.read("a->b")["validation"]["success"]
    with pytest.raises(ValidationError, match=r"a\.orders\[0\]: 1 records between offsets"):
        run_cycle(path, "a->b", spark=spark)  # the next run checks again


def writer_aggregates(spark, path: Path, n: int) -> dict[int, dict]:
    """Per partition of 'orders', the aggregates the mirror's JVM writer reports for
    offsets 0..n-1, written to a fresh remote topic (remote offset = source offset)."""
    from mirrorflow.lease import FlowLease
    from mirrorflow.source.plan import plan_run
    from mirrorflow.spark.mirror import mirror

    config = load_config(path)
    flow = config.flow("a->b")
    with FlowLease(config, flow, "aggregates"):
        plan, _ = plan_run(config, flow, "aggregates")
        result = mirror(spark, config, flow, plan)
    assert [(r["start"], r["end"], r["first_downstream"]) for r in result["ranges"]] == [
        (0, n, 0), (0, n, 0)]
    return {r["partition"]: r["source_digest"] for r in result["ranges"]}


def spark_aggregates(spark, path: Path, n: int) -> dict[int, tuple[int, int]]:
    """Per partition of 'orders', Spark's own xor of the placement hashes of offsets
    0..n-1 written at the same remote offsets: with and without timestamps."""
    from pyspark.sql import functions as F

    from mirrorflow.quality.digests import record_digest
    from mirrorflow.spark.kafka_source import read_groups

    frame = read_groups(spark, load_config(path).cluster("a"),
                        [[("orders", p, 0, n)] for p in range(2)])
    rows = frame.groupBy("partition").agg(*[
        F.bit_xor(F.xxhash64(record_digest(F, F.lit(ts)), "offset")).alias(str(ts))
        for ts in (True, False)]).collect()
    return {row["partition"]: (row["True"], row["False"]) for row in rows}


@pytest.mark.parametrize("change", [None, lambda rows: rows[:50] + rows[51:]],
                         ids=["faithful", "one-missing"])
def test_writer_aggregates_stand_in_for_the_source_read(spark, source, change) -> None:
    """Given the writer's aggregates the proof reads only the target, and reaches the
    verdict reading the source gives: Spark SQL's xxhash64 and the JVM writer's (Spark's own
    XXH64) agree bit for bit; a difference makes it read the source to name what differs."""
    clusters, path, _ = source
    n = RECORDS // 2
    written = writer_aggregates(spark, path, n)
    assert [written[p]["records"] for p in range(2)] == [n, n]
    assert spark_aggregates(spark, path, n) == {
        p: (written[p]["xor"], written[p]["xor_no_ts"]) for p in range(2)}
    plan, result = fresh_copy(clusters, change)
    read = check(spark, path, plan, result)
    for r in result["ranges"]:
        r["source_digest"] = written[r["partition"]]
    given = check(spark, path, plan, result)
    assert [(v.source_records, v.source_digest, v.target_digest) for v in given.ranges] == \
        [(v.source_records, v.source_digest, v.target_digest) for v in read.ranges]
    assert (given.success, given.failures) == (read.success, read.failures)
    assert given.success == (change is None)
    if change:
        assert given.ranges[1].missing == read.ranges[1].missing == 1


def test_more_ranges_than_write_tasks_are_checked_together_and_a_loss_still_named(
        spark, source) -> None:
    """Ranges beyond the flow's ``mirrorflow.write.tasks`` (here one) share the check's
    Spark tasks: the two ranges are read as one input partition, and the record deleted
    from the copy is still named by its offset."""
    from mirrorflow.quality import compare

    clusters, path, _ = source
    path.write_text(path.read_text().replace("mirrorflow.records.per.spark.partition = 100\n",
                                             "a->b.mirrorflow.write.tasks = 1\n"))
    config = load_config(path)
    ranges = [("orders", p, 0, RECORDS // 2) for p in range(2)]
    assert compare.proof_read(spark, config.cluster("a"), ranges, 2_000_000,
                              flow=config.flow("a->b")).rdd.getNumPartitions() == 1
    plan, result = fresh_copy(clusters, lambda rows: rows[:50] + rows[51:])
    validation = check(spark, path, plan, result)
    good, bad = validation.ranges
    assert (good.digest_match, bad.digest_match, bad.missing, bad.duplicates) == \
        (True, False, 1, 0)
    assert (bad.first_bad_source_offset, bad.first_bad_target_offset) == (50, 50)


def test_a_task_process_renders_data_docs_with_the_templates_its_preload_compiled(
        tmp_path) -> None:
    """A process forked after mirrorflow.airflow.preload (as each Airflow task is: here the
    validate task's) writes a run's Data Docs, from the suites' results as the Spark job
    kept them (JSON), without compiling a Jinja template: GX's page views share the
    templates the preload compiled (each view of its own compiled 24 of them again)."""
    probe = (
        "import json, os, jinja2\n"
        "import mirrorflow.airflow.preload\n"
        "from mirrorflow.quality.reports import docs_build_dir\n"
        "from mirrorflow.quality.suites import build_docs, run_suites\n"
        "compiled = []\n"
        "compile = jinja2.Environment.compile\n"
        "jinja2.Environment.compile = lambda *a, **k: compiled.append(1) or compile(*a, **k)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    docs = docs_build_dir('a->b', 'run-1')\n"
        "    outcome, results = run_suites([], [], 0, None, [], 'run-1')\n"
        "    build_docs(json.loads(json.dumps(results)), docs, 'a->b', 'run-1')\n"
        "    print('compiled:', len(compiled), outcome, flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n")
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True,
        text=True, check=True, timeout=180,
        env={**os.environ, reports.REPORTS_ENV: str(tmp_path / "reports")}).stdout
    assert [line for line in out.splitlines() if line.startswith("compiled:")] == [
        "compiled: 0 {'mirrorflow.completeness': True, 'mirrorflow.checkpoints': True}"]
    index = tmp_path / "reports" / "a__b" / "run-1" / "index.html"
    assert "mirrorflow.completeness" in index.read_text()
    pages = list(index.parent.glob("validations/**/*.html"))
    assert len(pages) == 2 and all("Expectation Validation Result" in p.read_text() for p in pages)


def test_great_expectations_is_imported_without_what_only_one_expectation_uses() -> None:
    """A fresh process (as each Airflow task is): GX imported for the proof leaves
    scipy.stats and altair unimported, and the expectation that uses them gets both."""
    probe = (
        "import importlib.util, sys\n"
        "from mirrorflow.quality.gx_import import import_gx\n"
        "import_gx()\n"
        "print([type(sys.modules[m]).__name__ for m in ('scipy.stats', 'altair')],"
        " importlib.util.find_spec('altair').name)\n"
        "from great_expectations.expectations.core import "
        "expect_column_kl_divergence_to_be_less_than as kl\n"
        "print(round(float(kl.stats.entropy([0.5, 0.5], [0.9, 0.1])), 4), kl.alt.Chart.__name__,"
        " type(sys.modules['scipy.stats']).__name__, type(sys.modules['altair']).__name__)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()
    assert out == ["['_ImportedOnFirstUse', '_ImportedOnFirstUse'] altair",
                   "0.5108 Chart module module"]
