"""A warm Spark: the local Spark Connect server, used by ``mirrorflow run`` (an ``sc://``
master) and by the DAG's mirror task (a ``spark_connect`` connection): runs start no JVM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.kafka import config_file, create_topic, produce, read_partition, varied_records
from mirrorflow.dev import connect_server
from mirrorflow.dev.localcluster import free_port
from mirrorflow.quality import reports

pytestmark = [pytest.mark.broker, pytest.mark.spark]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[connect_server.ConnectServer]:
    started = connect_server.ConnectServer("127.0.0.1", free_port(),
                                           tmp_path_factory.mktemp("connect"), "local[2]")
    connect_server.start(started)
    yield started
    assert connect_server.stop(started)
    assert started.pid() is None and not started.answering()


def test_local_server_of_a_config_and_a_run_through_it(server, two_clusters, tmp_path: Path,
                                                       monkeypatch) -> None:
    from mirrorflow.config.loader import load_config
    from mirrorflow.dev.localcluster import connect_servers

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 3)
    produce(a, "orders", varied_records(300), 3)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       f"mirrorflow.spark.master = {server.url}\n")
    # `mirrorflow local up` would start this very server for this config.
    assert [s.url for s in connect_servers(load_config(path), server.state_dir)] == [server.url]
    assert server.pid() is not None
    monkeypatch.setenv(reports.REPORTS_ENV, str(tmp_path / "reports"))
    run = subprocess.run([sys.executable, "-m", "mirrorflow.cli", "run", str(path), "--flow",
                          "a->b", "--json"], capture_output=True, text=True, check=False,
                         timeout=300, env={**os.environ})
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["records"] == 301 and result["validation"]["success"]  # + the heartbeat
    # Progress on stderr (not a terminal: plain lines), the JSON alone on stdout.
    assert (f"planned {result['plan_id']}: 301 records over 4 partitions of 2 topics\n"
            in run.stderr)
    assert "written 301 records; proof passed: 301 records verified\n" in run.stderr
    quiet = subprocess.run([sys.executable, "-m", "mirrorflow.cli", "run", str(path), "--flow",
                            "a->b", "--quiet"], capture_output=True, text=True, check=False,
                           timeout=300, env={**os.environ})
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "mirrored 1 records" in quiet.stdout  # the run's heartbeat
    assert "planned" not in quiet.stderr and "written" not in quiet.stderr
    for p in range(3):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)
    # Its JVM has the heap and collector settings docs/deployment.md gives.
    args = Path(f"/proc/{server.pid()}/cmdline").read_bytes().split(b"\0")
    assert {b"-Xmx1g", b"-XX:GCTimeRatio=4", b"-XX:G1HeapRegionSize=4m",
            b"-XX:G1PeriodicGCInterval=10000"} <= set(args)
    # The server ran the Spark work: no spark-submit, no JVM of the run's own.
    assert "SparkSubmit" not in subprocess.run(["ps", "-eo", "args"], capture_output=True,
                                                text=True, check=True).stdout.replace(
        "org.apache.spark.sql.connect.service.SparkConnectServer", "")
    # The range reads seek each partition they read, and Kafka's consumer logs each seek
    # and each assignment at INFO: the range source keeps them out of the server's log
    # (ConsumerLogs), whose lines of its own reads are there.
    logged = server.log_file.read_text()
    assert logged.count("RangeReader: read ") >= 4  # the mirror's and the proof's, twice
    assert "Seeking to offset" not in logged and "Assigned to partition(s)" not in logged


@pytest.mark.airflow
@pytest.mark.timeout(600)
def test_dag_mirror_task_runs_on_a_spark_connect_connection(server, airflow_db, two_clusters,
                                                            tmp_path: Path, monkeypatch) -> None:
    """`airflow dags test` in its own process, as `make demo` runs it (this test process
    holds a classic Spark session, beside which PySpark refuses a Spark Connect one)."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(100), 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n"
                       "a->b.mirrorflow.spark.conn.id = warm_spark\n")
    env = {**os.environ, "MIRRORFLOW_CONFIG": str(path),
           reports.REPORTS_ENV: str(tmp_path / "reports"),
           "AIRFLOW_CONN_WARM_SPARK": connect_server.airflow_connection(server.host,
                                                                        server.port)}
    airflow = Path(sys.executable).parent / "airflow"
    run = subprocess.run([str(airflow), "dags", "test", "mirror__a__b"], capture_output=True,
                         text=True, check=False, timeout=500, env=env)
    assert run.returncode == 0, run.stdout[-3000:]
    for p in range(2):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)
    monkeypatch.setenv(reports.REPORTS_ENV, env[reports.REPORTS_ENV])
    (summary,) = [s for _, s in reports.summaries("a->b")]
    assert summary["records"] == 100 and summary["validation"]["verified_records"] == 100
    assert (f"mirroring plan {summary['plan_id']} on the Spark Connect server "
            f"sc://127.0.0.1:{server.port}") in run.stdout + run.stderr


def test_a_submit_after_a_connect_session_in_the_same_process(two_clusters, tmp_path: Path,
                                                              monkeypatch) -> None:
    """PySpark marks a process that opened a Spark Connect session in its environment
    (what a bench or an Airflow worker running both kinds of flows does); a spark-submit
    from it must not inherit the marks and look for a Connect server."""
    from mirrorflow.run import run_cycle

    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:1")
    monkeypatch.setenv(reports.REPORTS_ENV, str(tmp_path / "reports"))
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    produce(a, "orders", varied_records(20), 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    result = run_cycle(path, "a->b", master="local[2]")
    assert result.records == 20 and result.validation["success"]
    assert read_partition(b, "a.orders", 0) == read_partition(a, "orders", 0)
    assert os.environ["SPARK_REMOTE"] == "sc://127.0.0.1:1"  # the process keeps its marks


_SESSION_PROBE = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(message)s")
from mirrorflow.config.loader import load_config
from mirrorflow.spark.session import flow_session_key, get_session
config = load_config(sys.argv[1])
flow = config.flow(sys.argv[2])
session = get_session(flow.get("mirrorflow.spark.master"),
                      session_key=flow_session_key(config, flow))
seen = session.conf.get("spark.mirrorflow.test.mark", None)
session.conf.set("spark.mirrorflow.test.mark", sys.argv[3])
count = session.range(3).count()
if sys.argv[4:] == ["release"]:
    session.stop()
print(json.dumps({"id": session.session_id, "seen": seen, "count": count}))
"""


def test_a_flows_runs_share_one_connect_session_across_processes(server, two_clusters,
                                                                  tmp_path: Path) -> None:
    """Each Airflow task and each ``mirrorflow run`` is a process of its own; the runs of
    one flow attach to one Connect session (and so to its Python workers), one that names
    it (a mark set in the session) and no other flow's; a session closed on the server
    gives way to a new one."""
    from mirrorflow.spark.session import SESSION_ROTATION_S, flow_session_url

    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       f"b->a.enabled = true\nmirrorflow.spark.master = {server.url}\n")

    def probe(flow: str, mark: str, *release: str) -> tuple[dict, str]:
        done = subprocess.run([sys.executable, "-c", _SESSION_PROBE, str(path), flow, mark,
                               *release], capture_output=True, text=True, check=False,
                              timeout=120, env={**os.environ})
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout), done.stderr

    left = SESSION_ROTATION_S - time.time() % SESSION_ROTATION_S
    if left < 60:  # the probes share one window of ids
        time.sleep(left + 1)
    first, _ = probe("a->b", "first")
    second, _ = probe("a->b", "second", "release")
    other, _ = probe("b->a", "other")
    assert second == {"id": first["id"], "seen": "first", "count": 3}
    assert other["id"] != first["id"] and other["seen"] is None
    # The server refuses a released session's id: the next run opens a new session.
    after, log = probe("a->b", "after")
    assert after["id"] != first["id"] and after["seen"] is None and after["count"] == 3
    assert (f"the Spark Connect session of {server.url}/ is closed; this run opens a new "
            "one") in log
    # The id: fixed within a window, another in the next; a URL's own id and settings kept.
    at = 1_000 * SESSION_ROTATION_S
    url = flow_session_url("sc://h:15002/;token=t", "k", at)
    assert url.startswith("sc://h:15002/;session_id=") and url.endswith(";token=t")
    assert flow_session_url("sc://h:15002/;token=t", "k", at + SESSION_ROTATION_S - 1) == url
    assert flow_session_url("sc://h:15002/;token=t", "k", at + SESSION_ROTATION_S) != url
    assert flow_session_url("sc://h:15002", "k", at) == url.replace(";token=t", "")
    assert flow_session_url("sc://h:1/;session_id=x", "k", at) == "sc://h:1/;session_id=x"


def test_new_code_is_a_new_session(two_clusters, tmp_path: Path) -> None:
    """A flow's runs share a session; other code (an upgrade) is another session, which
    the code before it never configured."""
    import shutil

    from mirrorflow.config.loader import load_config
    from mirrorflow.spark.session import PACKAGE_DIR, flow_session_key, package_digest

    same, upgraded = tmp_path / "same", tmp_path / "upgraded"
    for copy in (same, upgraded):
        shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (upgraded / "run.py").write_text((upgraded / "run.py").read_text() + "\n# upgraded\n")
    assert package_digest(same) == package_digest() != package_digest(upgraded)
    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    assert package_digest() in flow_session_key(config, config.flow("a->b"))


def test_a_connect_master_that_does_not_answer_fails_at_once_naming_it() -> None:
    """Nothing listens at the URL (a server stopped, or killed by its heap): one error
    naming it, not the client's minutes of retries."""
    from mirrorflow.spark.session import SparkConnectUnavailableError, get_session

    port = free_port()
    with pytest.raises(SparkConnectUnavailableError,
                       match=rf"^the Spark Connect server sc://127\.0\.0\.1:{port} does not "
                             r"answer: Connection refused$"):
        get_session(f"sc://127.0.0.1:{port};user_id=x")
