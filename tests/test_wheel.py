"""The built wheel, not the checkout: installed into a fresh virtualenv, its CLI, DAG
factory and Spark job run a flow through the DAG on a Spark standalone cluster, from a
working directory outside the source tree.

The fresh virtualenv gets only the wheel; its dependencies come from the project's
virtualenv through a ``.pth`` path line (installing Airflow, PySpark and Great
Expectations anew would take minutes of CI time, and proves nothing about this package).
A path added that way is not a site directory, so the checkout's editable install (a
``.pth`` of its own there) is not seen: ``mirrorflow`` can only come from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from helpers.kafka import config_file, create_topic, produce, read_partition, varied_records

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.airflow]


def fresh_venv(repo: Path, work: Path) -> Path:
    """A virtualenv holding the built wheel of ``repo``; returns its bin folder."""
    dist = work / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(repo), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(dist)], check=True,
                   capture_output=True, timeout=300)
    (wheel,) = dist.glob("mirrorflow-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")],
                   check=True, timeout=120)
    bin_dir = work / "venv" / "bin"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(bin_dir / "python"), "-c", purelib], check=True,
                               capture_output=True, text=True).stdout.strip())
    (site / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install",
                    "--no-deps", "-q", str(wheel)], check=True, capture_output=True, timeout=300)
    return bin_dir


@pytest.mark.timeout(900)
def test_the_wheel_runs_a_flow_through_the_dag_on_standalone_spark(
        repo: Path, airflow_db, two_clusters: dict[str, str], tmp_path: Path) -> None:
    from mirrorflow.dev.standalone_spark import standalone_cluster

    bin_dir = fresh_venv(repo, tmp_path / "install")
    python = str(bin_dir / "python")
    where = subprocess.run([python, "-c", "import mirrorflow; print(mirrorflow.__file__)"],
                           check=True, capture_output=True, text=True).stdout.strip()
    assert Path(where).is_relative_to(tmp_path / "install" / "venv"), where

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(400), 2)
    work = tmp_path / "elsewhere"  # not the checkout: nothing may be found relative to it
    (work / "dags").mkdir(parents=True)
    shutil.copy(repo / "dags" / "mirror_flows.py", work / "dags")
    path = config_file(work / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    check = subprocess.run([str(bin_dir / "mirrorflow"), "config", "check", str(path)],
                           capture_output=True, text=True, cwd=work, timeout=120)
    assert check.returncode == 0 and "a->b" in check.stdout, check.stderr

    with standalone_cluster(tmp_path / "spark", workers=1, cores=2, memory="1g") as master:
        env = {**os.environ, "MIRRORFLOW_CONFIG": str(path),
               "AIRFLOW__CORE__DAGS_FOLDER": str(work / "dags"),
               "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": master}),
               "MIRRORFLOW_JVM_DIR": str(repo / ".jvm"),  # an installation's jars
               "MIRRORFLOW_REPORTS_DIR": str(work / "reports"),
               "PYSPARK_PYTHON": python,
               "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
                       f"{os.environ['PATH']}"}
        run = subprocess.run([python, "-m", "airflow", "dags", "test", "mirror__a__b"],
                             capture_output=True, text=True, cwd=work, env=env, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    for p in range(2):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)
    (summary_file,) = (work / "reports" / "a__b").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["records"] == 400 and summary["validation"]["verified_records"] == 400
