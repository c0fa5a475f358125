"""Records up to the remote topic's max.message.bytes mirror, whatever shares their write
slot; a larger one fails the run naming its offset, its size and the limit; a failed
spark-submit job says why (its own error, its driver's log named)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import record_size
from helpers.kafka import (
    alter_topic,
    config_file,
    create_topic,
    delete_records,
    produce,
    read_partition,
    varied_records,
)
from mirrorflow.config.loader import load_config
from mirrorflow.quality import reports
from mirrorflow.run import run_cycle
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import plan_run
from mirrorflow.source.plan_store import PlanStore
from mirrorflow.source.write_task import WriteError

pytestmark = [pytest.mark.broker, pytest.mark.spark]

LIMIT = 100_000


def sized(total: int, key: bytes | None = b"k") -> tuple:
    """A record whose batch of its own is exactly ``total`` bytes (incompressible)."""
    value = os.urandom(total)
    while record_size.batch_size(key, value, None) > total:
        value = value[:-1]
    assert record_size.batch_size(key, value, None) == total
    return (key, value, None, 1_700_000_000_000 + total)


def too_large_at_17(two_clusters: dict[str, str], tmp_path: Path) -> Path:
    """Topic orders whose record 17 (50,075 bytes as a batch) is too large for its remote
    topic (max.message.bytes 20,000, created so before the first run); the flow's file."""
    create_topic(two_clusters["a"], "orders", 1)
    create_topic(two_clusters["b"], "a.orders", 1, {"max.message.bytes": "20000"})
    records = varied_records(30)
    records[17] = (b"big", os.urandom(50_000), None, 1_700_000_000_017)
    produce(two_clusters["a"], "orders", records, 1)
    return config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")


def positions(path: Path) -> dict:
    return OffsetStore(load_config(path).cluster("b"), "a").positions()


def test_a_record_batch_of_one_is_sized_as_kafka_encodes_it() -> None:
    # 61 (batch) + 1 (length) + attributes, deltas (3) + key (1 + 1) + value (1 + 3)
    # + header count (1) + header ("h": 1 + 1, null value: 1).
    assert record_size.batch_size(b"k", b"abc", [("h", None)]) == 61 + 1 + 3 + 2 + 4 + 1 + 3
    assert record_size.batch_size(None, None, None) == 61 + 1 + 3 + 1 + 1 + 1
    assert record_size.varint_size(63) == 1 and record_size.varint_size(64) == 2
    assert record_size.varint_size(-1) == 1


def test_a_large_record_mirrors_beside_the_heartbeats_on_a_flows_first_run(
        two_clusters, tmp_path: Path) -> None:
    """The case of issue 67, through ``mirrorflow run`` (spark-submit to local[*]): a
    1,500,000-byte record among ordinary ones, on the flow's first run (its remote topic
    created then), in one write slot with the heartbeats topic (Kafka's default limit).
    The slot's producer took the smallest limit of its topics for every record."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1, {"max.message.bytes": "3000000"})
    records = varied_records(50)
    records += [(None, f"v{i}".encode(), None, 1_700_000_001_000 + i) for i in range(10)]
    records += [(f"k{i}".encode(), None, None, 1_700_000_002_000 + i) for i in range(10)]
    records += [(f"h{i}".encode(), b"x", [("a", None), ("a", b""), ("a", b"1"), ("a", b"1")],
                 1_700_000_003_000 + i) for i in range(10)]
    records += [(b"big", os.urandom(1_500_000), None, 1_700_000_004_000)]
    records += varied_records(20, 100)
    produce(a, "orders", records, 1, **{"message.max.bytes": 4_000_000})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true")
    done = subprocess.run([sys.executable, "-m", "mirrorflow.cli", "run", str(path), "--flow",
                           "a->b"], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "orders[0] -> a.orders[0]: offsets 0..100, 101 written" in done.stdout
    assert read_partition(b, "a.orders", 0) == records
    assert positions(path)[("orders", 0)] == 100


def test_the_limit_holds_at_its_boundary_and_follows_the_source(spark, two_clusters,
                                                                tmp_path: Path) -> None:
    """A record exactly at the remote topic's limit is written; one byte more fails the
    run naming its offset, size and the limit, committing nothing; with the source's
    limit raised, config sync raises the remote's and the pending plan goes on."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1, {"max.message.bytes": str(LIMIT + 1)})
    create_topic(b, "a.orders", 1, {"max.message.bytes": str(LIMIT)})
    at_limit = [*varied_records(5), sized(LIMIT), *varied_records(5, 5)]
    for part in (at_limit[:5], at_limit[5:6], at_limit[6:]):  # the large one a batch alone
        produce(a, "orders", part, 1, **{"message.max.bytes": 400_000})
    flows = "a->b.enabled = true\nemit.heartbeats.enabled = false"
    path = config_file(tmp_path / "mm2.properties", two_clusters, flows,
                       "sync.topic.configs.enabled = false\n")
    first = run_cycle(path, "a->b", spark=spark)
    assert first.records == 11 and first.validation["success"]
    over = sized(LIMIT + 1)
    produce(a, "orders", varied_records(3, 20), 1)
    produce(a, "orders", [over], 1, **{"message.max.bytes": 400_000})
    with pytest.raises(WriteError, match=(
            rf"^cannot write orders\[0\] offset 14 to a\.orders: the record is {LIMIT + 1} "
            rf"bytes as a record batch, larger than a\.orders's max\.message\.bytes = {LIMIT} "
            r"on cluster 'b'; raise it there \(config sync copies the source topic's\), then "
            r"rerun$")):
        run_cycle(path, "a->b", spark=spark)
    assert positions(path) == {("orders", 0): 10}
    assert read_partition(b, "a.orders", 0) == at_limit  # the failed attempt's is aborted

    path = config_file(tmp_path / "mm2.properties", two_clusters, flows)  # config sync on
    again = run_cycle(path, "a->b", spark=spark)
    assert again.resumed and again.records == 4 and again.validation["success"]
    assert read_partition(b, "a.orders", 0) == [*at_limit, *varied_records(3, 20), over]
    alter_topic(a, "orders", {"max.message.bytes": None})  # leave the topic as found


def test_a_failed_spark_submit_job_says_why_and_keeps_its_driver_log(
        two_clusters, tmp_path: Path) -> None:
    """Through ``mirrorflow run`` (spark-submit): the write task's own errors (a record
    too large, records lost to retention), each as the CLI's one error line, naming the
    driver's log kept with the run's report; nothing is committed."""
    path = too_large_at_17(two_clusters, tmp_path)

    def run(run_id: str, flow: str = "a->b") -> str:
        done = subprocess.run([sys.executable, "-m", "mirrorflow.cli", "run", str(path),
                               "--flow", flow, "--run-id", run_id],
                              capture_output=True, text=True, timeout=400)
        assert done.returncode == 1, done.stdout[-2000:]
        error = [line for line in done.stderr.splitlines()
                 if line.startswith("mirrorflow: error: ")]
        assert len(error) == 1, done.stderr[-3000:]
        return error[0]

    too_large = run("too-large")
    assert too_large.startswith(
        "mirrorflow: error: cannot write orders[0] offset 17 to a.orders: the record is "
        "50075 bytes as a record batch, larger than a.orders's max.message.bytes = 20000 on "
        "cluster 'b'; ")
    log = Path(too_large.rsplit("(driver log: ", 1)[1].rstrip(")"))
    assert log.parent.name == "too-large" and log.name == "spark-driver.log"
    assert "WriteError: cannot write orders[0] offset 17" in log.read_text()
    assert "SparkContext: Successfully stopped SparkContext" in log.read_text()
    store = PlanStore(load_config(path), load_config(path).flow("a->b"))
    assert store.failure(store.pending().plan_id)["error"] == "WriteError"

    # Flow b->a's plan, its records gone from the source before they are written.
    b = two_clusters["b"]
    create_topic(b, "lost", 1)
    produce(b, "lost", varied_records(30), 1)
    path.write_text(path.read_text() + "b->a.enabled = true\nb->a.topics = lost\n")
    config = load_config(path)
    plan_run(config, config.flow("b->a"), "planned")
    delete_records(b, "lost", 0, 10)
    lost = run("lost", "b->a")
    assert lost.startswith(
        "mirrorflow: error: source lost[0]: offsets 0..9 of the planned range 0..29 were "
        "removed by retention before they were mirrored; nothing after them was written. "
        "Set b->a.failOnDataLoss = false to skip them (driver log: ")
    assert "DataLossError: source lost[0]" in Path(
        lost.rsplit("(driver log: ", 1)[1].rstrip(")")).read_text()
    assert positions(path) == {}
    assert OffsetStore(config.cluster("a"), "b").positions() == {}


@pytest.mark.airflow
def test_the_airflow_mirror_task_on_spark_submit_fails_with_the_jobs_own_error(
        airflow_db, two_clusters, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture) -> None:
    """The flow's DAG on a ``spark`` connection (spark-submit to local[*]): the mirror
    task's exception is the job's WriteError, not the provider's exit status."""
    from airflow.dag_processing.dagbag import DagBag

    path = too_large_at_17(two_clusters, tmp_path)
    monkeypatch.setenv("MIRRORFLOW_CONFIG", str(path))
    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dag = bag.dags["mirror__a__b"]
    dag.get_task("mirror").retries = 0  # one spark-submit: the error is the same each try
    run = dag.test()
    mirror = next(ti for ti in run.get_task_instances() if ti.task_id == "mirror")
    assert str(mirror.state) == "failed"
    out, err = capfd.readouterr()
    # The task's traceback ends with its exception, as Airflow logs "Task failed with
    # exception" (the job's own lines, logged by the hook, carry a log prefix).
    raised = [line for line in (out + err).splitlines()
              if line.startswith(f"{WriteError.__module__}.WriteError: ")]
    assert len(raised) == 1, (out + err)[-3000:]
    message = raised[0].split(": ", 1)[1]
    assert message.startswith(
        "cannot write orders[0] offset 17 to a.orders: the record is 50075 bytes as a record "
        "batch, larger than a.orders's max.message.bytes = 20000 on cluster 'b'; ")
    log = Path(message.rsplit("(driver log: ", 1)[1].rstrip(")"))
    assert log == reports.run_dir("a->b", run.run_id) / "spark-driver.log"
    assert "WriteError: cannot write orders[0] offset 17" in log.read_text()
    assert positions(path) == {}
