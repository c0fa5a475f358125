"""Shared fixtures. Airflow is pointed at a throw-away home before anything imports it."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="mirrorflow-airflow-")
os.environ.setdefault("AIRFLOW_HOME", _AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MIRRORFLOW_REPORTS_DIR", tempfile.mkdtemp(prefix="mirrorflow-reports-"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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


@pytest.fixture
def two_clusters(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Two real Tansu brokers, 'a' and 'b', on free loopback ports."""
    from mirrorflow.localcluster import running_clusters

    with running_clusters(["a", "b"], tmp_path / "brokers") as bootstraps:
        yield bootstraps


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(scope="session")
def spark():
    """One in-process Spark session (local[2]) with ``kafka_range`` registered."""
    from pyspark.sql import SparkSession

    from mirrorflow.spark.source import KafkaRangeDataSource

    session = (SparkSession.builder.master("local[2]").appName("mirrorflow-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", 2000)
               .config("spark.sql.shuffle.partitions", 4)
               .getOrCreate())
    session.dataSource.register(KafkaRangeDataSource)
    yield session
    session.stop()
