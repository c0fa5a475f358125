"""A failed spark-submit job says why (issue 67): each write-side error the job raises (a
record too large, records lost to retention, a fenced writer; a refused transaction is in
test_security, on its SASL brokers) is the CLI's one error line and the Airflow ``mirror``
task's exception, with its own type and message and the driver's log, kept with the run's
report, named at its end; nothing is committed, and the next run finishes the plan."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from helpers.failed_jobs import airflow_error, cli_error, driver_log, fencing
from helpers.kafka import (
    config_file,
    create_topic,
    delete_records,
    produce,
    read_partition,
    resume_position,
    varied_records,
)
from mirrorflow.config.loader import load_config
from mirrorflow.errors import DataLossError
from mirrorflow.quality import reports
from mirrorflow.run import run_cycle
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import plan_run
from mirrorflow.source.plan_store import PlanStore
from mirrorflow.source.write_task import RecordTooLargeError, WriterFencedError

pytestmark = [pytest.mark.broker, pytest.mark.spark]

TOO_LARGE = ("cannot write orders[0] offset 17 to a.orders: the record is 50075 bytes as a "
             "record batch, larger than a.orders's max.message.bytes = 20000 on cluster 'b'; ")
LOST = ("source lost[0]: offsets 0..9 of the planned range 0..29 were removed by retention "
        "before they were mirrored; nothing after them was written. Set b->a.failOnDataLoss "
        "= false to skip them (driver log: ")
FENCED = (r"^writing orders\[0\] -> a\.orders\[0\]: the transaction of upstream offsets "
          r"(\d+)\.\.\1: write slot 0's producer \(mirrorflow\|a->b\|write-0\) was fenced on "
          r"cluster 'b' by a newer one of the plan \(another attempt of it\) or for outliving "
          r"transaction\.timeout\.ms; its open transaction is aborted and this attempt stops, "
          r"the newer attempt or the next run finishes the plan \(.*"
          r"(ProducerFenced|InvalidProducerEpoch)Exception.*\) \(driver log: .*\)$")


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


def lost_before_written(two_clusters: dict[str, str], tmp_path: Path) -> Path:
    """Flow b->a's pending plan of topic lost (0..29), its first 10 records removed from
    the source before they are written; the flow's file."""
    b = two_clusters["b"]
    create_topic(b, "lost", 1)
    produce(b, "lost", varied_records(30), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters,
                       "b->a.enabled = true\nb->a.topics = lost",
                       "emit.heartbeats.enabled = false\n")
    config = load_config(path)
    plan_run(config, config.flow("b->a"), "planned")
    delete_records(b, "lost", 0, 10)
    return path


def one_record_a_transaction(two_clusters: dict[str, str], tmp_path: Path) -> tuple[Path, list]:
    """Topic orders (1,000 records) and its remote topic, written one record a transaction,
    so that a fencer finds the writer with a transaction open; the flow's file and the
    records."""
    create_topic(two_clusters["a"], "orders", 1)
    create_topic(two_clusters["b"], "a.orders", 1)
    records = varied_records(1000)
    produce(two_clusters["a"], "orders", records, 1)
    return config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n"
                       "mirrorflow.transaction.records = 1\n"), records


def positions(path: Path, target: str = "b", source: str = "a") -> dict:
    return OffsetStore(load_config(path).cluster(target), source).positions()


def test_a_failed_spark_submit_job_says_why_and_keeps_its_driver_log(
        two_clusters, tmp_path: Path) -> None:
    """Through ``mirrorflow run`` (spark-submit): the write task's own errors (a record
    too large, records lost to retention), each as the CLI's one error line, naming the
    driver's log kept with the run's report; nothing is committed."""
    path = too_large_at_17(two_clusters, tmp_path)
    too_large = cli_error(path, "a->b", "too-large")
    assert too_large.startswith(TOO_LARGE)
    log = driver_log(too_large)
    assert log.parent.name == "too-large" and log.name == "spark-driver.log"
    assert "RecordTooLargeError: cannot write orders[0] offset 17" in log.read_text()
    assert "SparkContext: Successfully stopped SparkContext" in log.read_text()
    store = PlanStore(load_config(path), load_config(path).flow("a->b"))
    assert store.failure(store.pending().plan_id)["error"] == "RecordTooLargeError"

    path = lost_before_written(two_clusters, tmp_path)
    lost = cli_error(path, "b->a", "lost")
    assert lost.startswith(LOST)
    assert "DataLossError: source lost[0]" in driver_log(lost).read_text()
    assert positions(path, "a", "b") == {}


def test_a_fenced_writer_fails_the_job_by_name_and_the_next_run_finishes_the_plan(
        spark, two_clusters, tmp_path: Path) -> None:
    """A producer of the write slot's transactional id starts while the job writes (an
    attempt of the plan the job does not know of): the job fails with WriterFencedError
    naming the slot, its transactional id and the open transaction; the fenced
    transaction's records are never visible, and the next run writes the rest once."""
    path, records = one_record_a_transaction(two_clusters, tmp_path)
    b = two_clusters["b"]
    with fencing(b, "mirrorflow|a->b|write-0", "a.orders") as fenced:
        message = cli_error(path, "a->b", "fenced")
    assert fenced.is_set()
    written = fenced_at(message, b)
    assert "WriterFencedException: writing orders[0]" in driver_log(message).read_text()
    assert positions(path) == {}  # nothing committed: the run's commit never ran
    assert read_partition(b, "a.orders", 0) == records[:written]

    again = run_cycle(path, "a->b", spark=spark)
    assert again.resumed and again.records == 1000 - written
    assert again.validation["success"]
    assert read_partition(b, "a.orders", 0) == records


def fenced_at(message: str, target: str) -> int:
    """The upstream offset whose transaction a WriterFencedError names (one record a
    transaction): where the resume position the writer committed before it points."""
    found = re.match(FENCED, message)
    assert found, message
    offset = int(found.group(1))
    resume = resume_position(target, "a", "a.orders", 0)
    assert (resume[1] if resume else 0) == offset
    return offset


@pytest.mark.airflow
@pytest.mark.parametrize("case", ["too large", "lost", "fenced"])
def test_the_airflow_mirror_task_on_spark_submit_fails_with_the_jobs_own_error(
        case: str, airflow_db, two_clusters, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture) -> None:
    """The flow's DAG on a ``spark`` connection (spark-submit to local[*]): the mirror
    task's exception is the job's own error (its class and message), not the provider's
    exit status, and names the driver's log kept in the run's report folder."""
    if case == "too large":
        path, flow, error = too_large_at_17(two_clusters, tmp_path), "a->b", RecordTooLargeError
    elif case == "lost":
        path, flow, error = lost_before_written(two_clusters, tmp_path), "b->a", DataLossError
    else:
        path, flow, error = (*one_record_a_transaction(two_clusters, tmp_path)[:1], "a->b",
                             WriterFencedError)
    monkeypatch.setenv("MIRRORFLOW_CONFIG", str(path))
    dag_id = "mirror__" + flow.replace("->", "__")
    if case == "fenced":
        with fencing(two_clusters["b"], "mirrorflow|a->b|write-0", "a.orders") as fenced:
            message, run = airflow_error(dag_id, error, capfd)
        assert fenced.is_set()
        fenced_at(message, two_clusters["b"])
    else:
        message, run = airflow_error(dag_id, error, capfd)
        assert message.startswith(TOO_LARGE if case == "too large" else LOST)
    log = driver_log(message)
    assert log == reports.run_dir(flow, run.run_id) / "spark-driver.log"
    assert message.split(" (driver log: ")[0] in log.read_text()
    target, source = flow.split("->")[::-1]
    assert positions(path, target, source) == {}
