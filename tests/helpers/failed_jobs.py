"""How a failed Spark job reaches its user: the CLI's one error line (``mirrorflow run``,
spark-submit) and the Airflow ``mirror`` task's exception, each with the driver's log it
names; and a fencer that takes a write slot's transactional id while a job writes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

DRIVER_LOG = "(driver log: "


def cli_error(path: Path, flow: str, run_id: str) -> str:
    """``mirrorflow run PATH --flow FLOW`` (spark-submit to local[*]), which must fail
    with exactly one ``mirrorflow: error:`` line on stderr: that line's message."""
    done = subprocess.run([sys.executable, "-m", "mirrorflow.cli", "run", str(path),
                           "--flow", flow, "--run-id", run_id],
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    error = [line for line in done.stderr.splitlines()
             if line.startswith("mirrorflow: error: ")]
    assert len(error) == 1, done.stderr[-3000:]
    return error[0].removeprefix("mirrorflow: error: ")


def airflow_error(dag_id: str, error: type[Exception], captured) -> tuple[str, object]:
    """Run the flow's DAG (``dag.test()``, its ``mirror`` task on the default ``spark``
    connection: spark-submit to local[*]), which must fail in ``mirror``; the message of
    the task's exception, which must be of class ``error``, and the DAG run.
    ``captured`` is pytest's ``capfd``: Airflow logs the task's traceback, whose last
    line is ``<module>.<class>: <message>``."""
    from airflow.dag_processing.dagbag import DagBag

    captured.readouterr()
    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).dags[dag_id]
    dag.get_task("mirror").retries = 0  # one spark-submit: the error is the same each try
    run = dag.test()
    mirror = next(ti for ti in run.get_task_instances() if ti.task_id == "mirror")
    assert str(mirror.state) == "failed"
    out, err = captured.readouterr()
    # The job's own lines, logged by the hook, carry a log prefix: only the traceback's
    # last line starts with the class.
    raised = [line for line in (out + err).splitlines()
              if line.startswith(f"{error.__module__}.{error.__name__}: ")]
    assert len(raised) == 1, (out + err)[-3000:]
    return raised[0].split(": ", 1)[1], run


def driver_log(message: str) -> Path:
    """The driver's log an error line names, at its end."""
    assert message.endswith(")") and DRIVER_LOG in message, message
    return Path(message.rsplit(DRIVER_LOG, 1)[1][:-1])


@contextlib.contextmanager
def fencing(bootstrap: str, transactional_id: str, topic: str) -> Iterator[threading.Event]:
    """While the body runs, a watcher reads ``topic`` (partition 0, read_uncommitted) and,
    at its first record (a writer's transaction is open), starts a producer of
    ``transactional_id``: Kafka fences the writer of that id (KIP-98). The event is set
    once the fence is done."""
    fenced, stop = threading.Event(), threading.Event()

    def watch() -> None:
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "fencer",
                           "isolation.level": "read_uncommitted",
                           "enable.auto.commit": False})
        reader.assign([TopicPartition(topic, 0, 0)])
        # Created (and connected) before the writer starts: the fence is then one call.
        fencer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
        try:
            while not stop.is_set():
                msg = reader.poll(0.02)
                if msg is not None and msg.error() is None:
                    fencer.init_transactions(30)
                    fenced.set()
                    return
        finally:
            reader.close()

    watcher = threading.Thread(target=watch, name="fencer", daemon=True)
    watcher.start()
    try:
        yield fenced
    finally:
        stop.set()
        watcher.join(60)
