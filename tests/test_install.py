"""The environment the README's commands build is the one the project needs."""

from __future__ import annotations

import re
import shutil
from importlib import metadata
from pathlib import Path


def pinned(repo: Path, name: str) -> str:
    text = (repo / "pyproject.toml").read_text()
    match = re.search(rf'"{re.escape(name)}==([^"]+)"', text)
    assert match, name
    return match.group(1)


def test_importable_pyspark_is_the_full_distribution(repo: Path) -> None:
    """The Spark provider pulls pyspark-client into the same namespace; the full one must win."""
    import pyspark

    root = Path(pyspark.__file__).parent
    assert pyspark.__version__ == pinned(repo, "pyspark")
    assert (root / "jars").is_dir() and any((root / "jars").glob("spark-core_*.jar"))
    assert (root / "bin" / "spark-submit").exists()
    assert shutil.which("spark-submit"), "spark-submit must be on PATH for SparkSubmitOperator"


def test_installed_versions_are_the_constraints(repo: Path) -> None:
    """pyproject.toml gives ranges; make installs the set constraints.txt pins."""
    lines = (repo / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lines if "==" in line)
    for name in ("apache-airflow", "confluent-kafka", "great_expectations", "pyspark",
                 "apache-airflow-providers-apache-spark"):
        assert metadata.version(name) == pins[name], name


def test_jvm_classpaths_match_the_pins(repo: Path) -> None:
    """make fetched jvm/pom.xml's two classpaths and built jvm/connector against the pinned
    Kafka and PySpark; the range source runs the project's Kafka client, and no classpath
    holds two Kafka clients."""
    from mirrorflow import jvm

    pom = (repo / "jvm" / "pom.xml").read_text()
    connector = (repo / "jvm" / "connector" / "pom.xml").read_text()
    kafka = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom).group(1)
    assert re.search(r"<kafka.version>([^<]+)</kafka.version>", connector).group(1) == kafka
    spark = re.search(r"<spark.version>([^<]+)</spark.version>", connector).group(1)
    assert spark == pinned(repo, "pyspark")
    assert jvm.kafka_version() == kafka
    names = {name: {Path(j).name for j in jvm.jars(name)} for name in ("broker", "mm2")}
    names["connector"] = {Path(j).name for j in jvm.connector_jars()}
    assert f"kafka_2.13-{kafka}.jar" in names["broker"]
    assert f"connect-mirror-{kafka}.jar" in names["mm2"]
    assert names["connector"] == {"mirrorflow-connector-0.jar", f"kafka-clients-{kafka}.jar"}
    assert all(Path(j).is_relative_to(jvm.PACKAGE_JARS) for j in jvm.connector_jars())
    # Each classpath has one Kafka client of its own: they never meet.
    for name, jars in names.items():
        assert len([j for j in jars if j.startswith("kafka-clients-")]) == 1, name
    assert "log4j-core-2.26.1.jar" in names["broker"] and "log4j-core-2.26.1.jar" in names["mm2"]


def test_makefile_and_ci_use_the_same_install(repo: Path) -> None:
    makefile = (repo / "Makefile").read_text()
    assert "pip install -e '.[dev,lineage]' -c constraints.txt" in makefile
    assert "install: $(VENV)/.installed jvm" in makefile  # make test and demo fetch the jars
    assert "dependency:copy-dependencies" in makefile
    assert f"PYSPARK_VERSION := {pinned(repo, 'pyspark')}" in makefile
    assert "make test" in (repo / ".ci" / "run").read_text()


def test_dockerfile_installs_the_way_the_readme_does(repo: Path) -> None:
    """The image cannot be built here (no Docker engine); it must use the same install."""
    dockerfile = (repo / "Dockerfile").read_text()
    assert "openjdk-17-jre" in dockerfile  # Spark needs Java 17
    assert "make install" in dockerfile
    assert "MIRRORFLOW_CONFIG=" in dockerfile
    assert "AIRFLOW__CORE__DAGS_FOLDER=/usr/local/airflow/dags" in dockerfile
    assert "FROM python:3.11" in dockerfile
    # The services' task processes inherit mirrorflow's imports, as the local ones do.
    from mirrorflow.dev.local_airflow import PRELOAD_SETTINGS

    assert [f"{k}={v}" in dockerfile for k, v in PRELOAD_SETTINGS.items()] == [True, True]
    makefile = (repo / "Makefile").read_text()  # `make airflow` too
    assert [f"airflow: export {k} = {v}" in makefile
            for k, v in PRELOAD_SETTINGS.items()] == [True, True]
