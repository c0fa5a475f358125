"""Building the ``spark-submit`` command of the mirror job (the CLI's path to Spark)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import mirrorflow
from mirrorflow.spark.session import SPARK_CONF, connector_jars

PACKAGE_DIR = Path(mirrorflow.__file__).resolve().parent
# The job's entry is inside the package, so an installed wheel submits it as a checkout
# does (spark_jobs/mirror_batch.py is the same entry, for running the job by hand).
JOB_SCRIPT = PACKAGE_DIR / "spark" / "job.py"


# PySpark marks a process that opened a Spark Connect session in os.environ; a job
# submitted from that process would inherit the marks and try to reach a Connect server.
CONNECT_MODE_VARS = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")


@contextlib.contextmanager
def classic_environment() -> Iterator[None]:
    """Hide PySpark's Spark Connect marks from os.environ while a job is submitted."""
    saved = {name: os.environ.pop(name) for name in CONNECT_MODE_VARS if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def spark_submit_binary() -> str:
    """spark-submit on PATH, else the one inside the installed pyspark."""
    found = shutil.which("spark-submit")
    if found:
        return found
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def package_zip(directory: Path) -> Path:
    """The mirrorflow package as a zip for ``--py-files``, so executors of any master have it."""
    target = directory / "mirrorflow.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in PACKAGE_DIR.rglob("*.py"):
            archive.write(path, Path("mirrorflow") / path.relative_to(PACKAGE_DIR))
    return target


def job_arguments(config_path: str, flow_name: str, plan_id: str,
                  steps: tuple[str, ...] = ("mirror", "validate"),
                  run_id: str | None = None) -> list[str]:
    args = ["--config", str(Path(config_path).resolve()), "--flow", flow_name,
            "--plan-id", plan_id, "--steps", ",".join(steps)]
    return args + (["--run-id", run_id] if run_id else [])


def submit_command(config_path: str, flow_name: str, plan_id: str, master: str,
                   work_dir: Path, steps: tuple[str, ...] = ("mirror", "validate"),
                   run_id: str | None = None) -> list[str]:
    """spark-submit of the job; the package zip is written into ``work_dir``."""
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    confs = [arg for key, value in SPARK_CONF.items() for arg in ("--conf", f"{key}={value}")]
    return [
        spark_submit_binary(), "--master", master, "--name", f"mirrorflow {flow_name}",
        "--conf", f"spark.pyspark.python={python}", *confs,
        "--jars", ",".join(connector_jars()),
        "--py-files", str(package_zip(work_dir)),
        str(JOB_SCRIPT), *job_arguments(config_path, flow_name, plan_id, steps, run_id),
    ]
