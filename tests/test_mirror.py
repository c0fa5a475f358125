"""End to end with real brokers and real Spark (spark-submit, local[*])."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.kafka import (
    config_file,
    create_topic,
    delete_records,
    produce,
    read_partition,
    topics,
    varied_records,
)
from mirrorflow.cli import main
from mirrorflow.config.loader import load_config
from mirrorflow.errors import DataLossError
from mirrorflow.kafka.watermarks import probe_watermarks
from mirrorflow.quality import reports
from mirrorflow.run import run_cycle
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import plan_run
from mirrorflow.spark import submit
from mirrorflow.spark.job import run_steps

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def assert_mirrored(a: str, b: str, topic: str, partitions: int, remote: str) -> None:
    for p in range(partitions):
        assert read_partition(b, remote, p) == read_partition(a, topic, p), f"{topic}[{p}]"


def test_the_proof_reads_the_target_once_the_writers_commits_are_readable(
        spark, two_clusters: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer's commit returns before the coordinator has written its transaction
    markers, and a read_committed read (the proof's) stops short of them: a proof found a
    remote partition empty. The mirror waits until every range it wrote is readable to its
    last record, before the proof. (A spy on that wait: the markers' delay cannot be made
    to happen on purpose.)"""
    from mirrorflow.spark import mirror

    a = two_clusters["a"]
    create_topic(a, "orders", 3)
    produce(a, "orders", varied_records(300), 3)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    real = mirror.await_readable
    awaited: list[dict] = []

    def spy(cluster, ends, timeout) -> None:
        awaited.append(dict(ends))
        real(cluster, ends, timeout)
        marks = probe_watermarks(cluster, list(ends))
        assert all(marks[tp].high >= end for tp, end in ends.items()), (marks, ends)

    monkeypatch.setattr(mirror, "await_readable", spy)
    result = run_cycle(path, "a->b", spark=spark)
    assert result.validation["success"]
    assert awaited == [{("a.orders", p.partition): p.last_downstream + 1
                        for p in result.partitions}]
    assert sorted(awaited[0].values()) == sorted(
        len(read_partition(a, "orders", p)) for p in range(3))


def test_mirror_two_way_flows_incrementally(spark, two_clusters: dict[str, str],
                                            tmp_path: Path, capsys: pytest.CaptureFixture,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run submits the Spark job; the later ones run it in a session."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 3)
    create_topic(a, "payments", 2)
    create_topic(a, "secret", 1)
    create_topic(a, "b.returns", 1)
    create_topic(b, "returns", 1)
    produce(a, "orders", varied_records(3000), 3)
    produce(a, "payments", varied_records(500, 10_000), 2, **{"linger.ms": 0})
    produce(a, "secret", varied_records(10), 1)
    produce(b, "returns", varied_records(40), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters,
                       "a->b.enabled = true\nb->a.enabled = true\n"
                       "a->b.topics.exclude = secret\n",
                       "emit.heartbeats.enabled = false\n")  # "nothing new" means nothing

    # The submitted job writes its Data Docs where the run reports, also by default.
    monkeypatch.delenv("MIRRORFLOW_REPORTS_DIR")
    monkeypatch.setattr(reports, "DEFAULT_DIR", tmp_path / "reports")
    first = run_cycle(path, "a->b")
    assert first.records == 3500 and not first.resumed
    # This run wrote the driver's class archive, or mapped the one an earlier run wrote.
    assert submit.class_archive("local[*]").fresh is None
    assert Path(first.validation["data_docs"]).is_relative_to(tmp_path / "reports")
    assert Path(first.validation["data_docs"]).exists()
    assert_mirrored(a, b, "orders", 3, "a.orders")
    assert_mirrored(a, b, "payments", 2, "a.payments")
    assert not {"a.secret", "a.b.returns", "a.mm2-offsets.b.internal"} & topics(b)
    part0 = next(p for p in first.partitions if (p.topic, p.partition) == ("orders", 0))
    assert (part0.planned_start, part0.planned_end, part0.records) == (0, 1000, 1000)
    assert (part0.first_downstream, part0.last_downstream) == (0, 999)
    committed = OffsetStore(load_config(path).cluster("b"), "a").positions()
    assert committed[("orders", 0)] == 999 and committed[("payments", 1)] == 249

    # Nothing new: nothing written, no Spark job needed.
    assert main(["run", str(path), "--flow", "a->b"]) == 0
    assert "mirrored 0 records" in capsys.readouterr().out

    # New records: exactly those are written.
    produce(a, "orders", varied_records(30, 3000), 3)
    second = run_cycle(path, "a->b", spark=spark)
    assert second.records == 30
    assert_mirrored(a, b, "orders", 3, "a.orders")

    # The reverse flow mirrors b's own topic but never sends a.* back to a.
    back = run_cycle(path, "b->a", spark=spark)
    assert back.records == 40
    assert_mirrored(b, a, "returns", 1, "b.returns")
    assert "b.a.orders" not in topics(a) and "a.b.returns" not in topics(b)


def test_killed_job_then_rerun_leaves_every_record_once(spark, two_clusters: dict[str, str],
                                                       tmp_path: Path) -> None:
    """A submitted job killed mid-write; the rerun (in a session) resumes its plan."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "clicks", 2)
    total = 150_000
    payload = b"x" * 512
    produce(a, "clicks", [(f"k{i}".encode(), payload, None, 1_700_000_000_000 + i)
                          for i in range(total)], 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "a->b.mirrorflow.max.records.per.partition = 1000000\n"
                       "mirrorflow.transaction.records = 20000\n"
                       "emit.heartbeats.enabled = false\n")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen([sys.executable, "-m", "mirrorflow.cli", "run", str(path),
                             "--flow", "a->b"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cluster_b = load_config(path).cluster("b")
    deadline = time.monotonic() + 240
    written = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if "a.clicks" in topics(b):
                ends = probe_watermarks(cluster_b, [("a.clicks", 0), ("a.clicks", 1)])
                written = sum(m.high for m in ends.values())
                if written > 20_000:
                    break
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI, spark-submit, JVM and Python workers
        proc.wait()
    assert 0 < written < total, f"the kill came too late or too early: {written} written"
    assert OffsetStore(cluster_b, "a").positions() == {}  # nothing committed

    result = run_cycle(path, "a->b", spark=spark)
    assert result.resumed
    assert sum(p.skipped for p in result.partitions) > 0
    assert_mirrored(a, b, "clicks", 2, "a.clicks")
    assert OffsetStore(cluster_b, "a").positions() == {("clicks", 0): total // 2 - 1,
                                                       ("clicks", 1): total // 2 - 1}


def test_retention_after_planning_fails_the_job_with_the_writers_data_loss_error(
        spark, two_clusters: dict[str, str], tmp_path: Path) -> None:
    """Records removed between planning and the mirror's read: the Spark task's writer
    raises DataLossError naming the offsets, the driver raises it as such, and no
    position moves."""
    a = two_clusters["a"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(300), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true\n",
                       "emit.heartbeats.enabled = false\n")
    config = load_config(path)
    flow = config.flow("a->b")
    plan, _ = plan_run(config, flow, "run-1")
    assert [(r.topic, r.start, r.end) for r in plan.ranges] == [("orders", 0, 300)]
    delete_records(a, "orders", 0, 120)
    with pytest.raises(DataLossError, match=r"^source orders\[0\]: offsets 0\.\.119 of the "
                                            r"planned range 0\.\.299 were removed by retention"):
        run_steps(spark, config, flow, plan, run_id="run-1")
    assert OffsetStore(config.cluster("b"), "a").positions() == {}
