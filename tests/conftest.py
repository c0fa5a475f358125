"""Shared fixtures. Airflow is pointed at a throw-away home before anything imports it."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.kafka import QUICK_START
from mirrorflow.dev.localcluster import LocalBroker

# Each xdist worker has an Airflow home (and SQLite database) of its own; a worker's
# environment is inherited from the controller, which loaded this file first.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
if os.environ.get("MIRRORFLOW_TEST_AIRFLOW_WORKER") != _WORKER:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix=f"mirrorflow-airflow-{_WORKER}-")
    os.environ["MIRRORFLOW_TEST_AIRFLOW_WORKER"] = _WORKER
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
# Module-scoped fixtures' reports; each test gets a folder of its own (reports_dir).
os.environ.setdefault("MIRRORFLOW_REPORTS_DIR", tempfile.mkdtemp(prefix="mirrorflow-reports-"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Every Spark JVM the tests start through spark-submit (in-process sessions, Connect
# servers, the DAGs' jobs) compiles with C1 only, as the test brokers do (QUICK_START): a
# test's job moves a few thousand records, and C2 compiling Spark's code paths cost it
# more CPU than the work on 2 cores. The bench and the soak run Spark as users do.
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(QUICK_START)
# SparkSubmitOperator runs `spark-submit` from PATH; the venv's is the full pyspark's.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
# py4j logs from __del__ after pytest has closed the streams; keep it quiet.
logging.getLogger("py4j").setLevel(logging.WARNING)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO / "dags"))
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(REPO / "plugins"))
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT",
                      '{"conn_type": "spark", "host": "local[*]"}')


# The longest tests (minutes each) start first: started last, one would keep a worker busy
# while the other has nothing left (xdist's worksteal hands the rest around them).
LONG_FIRST = ("test_scheduler.py", "test_recovery.py", "test_stale_runs.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name not in LONG_FIRST)


def pytest_report_header() -> str:
    from mirrorflow.jvm import kafka_version

    return f"Apache Kafka {kafka_version()} (local KRaft brokers from jvm/pom.xml)"


@pytest.fixture(autouse=True)
def reports_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own reports folder: xdist's workers share one environment, and a test
    that reads a flow's newest report must not find another worker's run of that flow."""
    folder = tmp_path / "reports"
    monkeypatch.setenv("MIRRORFLOW_REPORTS_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def logging_as_found() -> Iterator[None]:
    """Undo what a test's in-process ``mirrorflow`` command did to logging: its
    ``basicConfig`` handler writes to the stderr pytest captured for that test, which is
    closed by the time a later test logs."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    chatter = logging.getLogger("mirrorflow.librdkafka")
    chatter_level = chatter.level
    yield
    for handler in set(root.handlers) - set(handlers):
        root.removeHandler(handler)
    root.setLevel(level)
    chatter.setLevel(chatter_level)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated Airflow metadata database (SQLite) with mirrorflow's Spark pool."""
    import subprocess

    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True)
    subprocess.run([str(airflow), "pools", "set", "mirrorflow_spark", "2", "Spark jobs"],
                   check=True, capture_output=True)
    return Path(os.environ["AIRFLOW_HOME"])


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


# Test records carry fixed 2023 timestamps: time-based retention is off. Topics are never
# created by asking for them, as on most production clusters: mirrorflow creates what it
# writes, and a client an earlier test left running cannot bring a wiped topic back. An
# authorizer holds ACLs, as on most production clusters, so that topic ACL sync runs in
# every test (MM2's and mirrorflow's alike); plaintext clients are ANONYMOUS, a super user.
TEST_BROKER = {"log.retention.ms": "-1", "auto.create.topics.enable": "false",
               "authorizer.class.name":
                   "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
               "super.users": "User:ANONYMOUS",
               # The log cleaner looks for work every second, not every 15 s: the tests
               # that wait for a compaction wait that much less.
               "log.cleaner.backoff.ms": "1000"}


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalBroker]]:
    """Two Apache Kafka brokers, 'a' and 'b', shared by the tests of this worker (each
    xdist worker has its own), started through the same module as `mirrorflow local up`."""
    from concurrent.futures import ThreadPoolExecutor

    from mirrorflow.dev.localcluster import LocalBroker, free_port, start, stop

    state = tmp_path_factory.mktemp("brokers")
    brokers = {alias: LocalBroker(alias, "127.0.0.1", free_port(), state,
                                  properties=TEST_BROKER, java_options=QUICK_START)
               for alias in "ab"}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(start, brokers.values()))
    yield brokers
    for broker in brokers.values():
        stop(broker)


@pytest.fixture
def two_clusters(kafka: dict[str, LocalBroker]) -> dict[str, str]:
    """The shared brokers, emptied for this test: no topic (but Kafka's own) and
    no consumer group is left from an earlier test, so every test starts as on fresh
    brokers. A broker an earlier test stopped is started again (its data kept)."""
    from helpers.kafka import wipe
    from mirrorflow.dev.localcluster import start
    from mirrorflow.kafka.clients import close_shared

    close_shared()
    for broker in kafka.values():
        start(broker)
        wipe(broker.bootstrap)
    return {alias: broker.bootstrap for alias, broker in kafka.items()}


@pytest.fixture(scope="session")
def broker_c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A third broker, 'c', for the tests that need three clusters: started by the first of
    them on a worker and kept for the others (a start costs about 15 s)."""
    from mirrorflow.dev.localcluster import free_port, start, stop

    broker = LocalBroker("c", "127.0.0.1", free_port(), tmp_path_factory.mktemp("c"),
                         properties=TEST_BROKER, java_options=QUICK_START)
    start(broker)
    yield broker
    stop(broker)


@pytest.fixture
def three_clusters(two_clusters: dict[str, str], broker_c: LocalBroker) -> dict[str, str]:
    """The shared brokers and 'c', all emptied for this test."""
    from helpers.kafka import wipe

    wipe(broker_c.bootstrap)
    return {**two_clusters, "c": broker_c.bootstrap}


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory):
    """A warm local Spark Connect server, shared by this worker's tests that run DAGs for
    what they do around the mirror, not for how Spark is started (each DAG run on the
    default connection starts a spark-submit JVM: test_airflow_run covers that path)."""
    from mirrorflow.dev import connect_server
    from mirrorflow.dev.localcluster import free_port

    server = connect_server.ConnectServer("127.0.0.1", free_port(),
                                          tmp_path_factory.mktemp("connect"), "local[2]")
    connect_server.start(server)
    yield server
    connect_server.stop(server)


@pytest.fixture
def warm_spark(spark_connect, monkeypatch: pytest.MonkeyPatch):
    """A session on the shared Connect server, for this test's in-process runs; its DAG
    runs run their Spark work there too. The test leaves no Spark Connect session and no
    mark of one in the process (PySpark marks os.environ, which a classic session created
    later would take for a Connect one)."""
    from mirrorflow.dev import connect_server
    from mirrorflow.spark.session import close_connect_sessions, get_session
    from mirrorflow.spark.submit import CONNECT_MODE_VARS

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", connect_server.airflow_connection(
        spark_connect.host, spark_connect.port))
    yield get_session(spark_connect.url)
    close_connect_sessions()
    for name in CONNECT_MODE_VARS:
        os.environ.pop(name, None)


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(scope="session")
def spark():
    """One in-process Spark session (local[2]) with the range source's jars, as
    ``mirrorflow.spark.session`` builds them."""
    from mirrorflow.spark.session import get_session

    session = get_session("local[2]", "mirrorflow-tests")
    session.conf.set("spark.sql.shuffle.partitions", 4)
    yield session
    session.stop()
