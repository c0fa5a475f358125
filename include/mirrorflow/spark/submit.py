"""Building the ``spark-submit`` command of the mirror job (the CLI's path to Spark)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mirrorflow.jvm import jvm_dir
from mirrorflow.spark.session import PACKAGE_DIR, SPARK_CONF, connector_jars, package_zip

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


@dataclass(frozen=True)
class ClassArchive:
    """A class-data-sharing archive (the JVM's dynamic AppCDS) of the classes a mirror
    job's driver JVM loads. Mapping them from it instead of loading and verifying them
    from the jars takes seconds off every spark-submit run (measured, a run of 8 records:
    21-24 s -> 17-20 s). The first run writes it as its JVM exits, under a name of its
    own that :meth:`settle` moves into place once that JVM exited normally; later runs
    map it. The archive's name changes with pyspark, the range source's jars and the java
    binary (its path and time); a JVM that finds it does not match ignores it (with a
    warning)."""

    path: Path
    fresh: Path | None = None  # where this run writes it, when there is none yet

    @property
    def java_option(self) -> str:
        return (f"-XX:ArchiveClassesAtExit={self.fresh}" if self.fresh
                else f"-XX:SharedArchiveFile={self.path}")

    def settle(self, exited_normally: bool) -> None:
        """After the job: keep a fresh archive when its JVM exited normally; a kept one
        removes those of an earlier pyspark, connector or JDK, and what runs killed
        while they wrote theirs left behind."""
        if self.fresh is None or not self.fresh.exists():
            return
        if not exited_normally:
            self.fresh.unlink()
            return
        os.replace(self.fresh, self.path)
        for stale in self.path.parent.glob("spark-driver-*.jsa"):
            if stale != self.path:
                stale.unlink(missing_ok=True)
        for partial in self.path.parent.glob("spark-driver-*.*.writing"):
            pid = partial.name.split(".")[-2]
            if pid.isdigit() and not _alive(int(pid)):
                partial.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def class_archive(master: str) -> ClassArchive | None:
    """The driver's class archive for a job whose driver runs here (a ``local`` master),
    in ``class-archive/`` beside the JVM classpaths; None where that folder cannot be
    written and no archive exists yet."""
    import pyspark

    if not master.startswith("local"):
        return None
    java = (Path(os.environ["JAVA_HOME"]) / "bin" / "java" if os.environ.get("JAVA_HOME")
            else Path(shutil.which("java") or "java")).resolve()
    # A JDK upgraded in place keeps its path: its binary's time tells it apart.
    built = java.stat().st_mtime_ns if java.exists() else 0
    key = hashlib.sha256("\n".join([pyspark.__version__, str(java), str(built),
                                    *connector_jars()]).encode()).hexdigest()[:16]
    folder = jvm_dir() / "class-archive"
    path = folder / f"spark-driver-{key}.jsa"
    if path.exists():
        return ClassArchive(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return None
    return ClassArchive(path, folder / f"{path.stem}.{os.getpid()}.writing")


@contextlib.contextmanager
def driver_class_archive(master: str) -> Iterator[ClassArchive | None]:
    """The driver's class archive (:func:`class_archive`) for the job submitted in the
    block, settled as the block ends: a fresh archive is kept when the block ended
    without an exception (the job's JVM exited normally), dropped otherwise."""
    archive = class_archive(master)
    try:
        yield archive
    except BaseException:
        if archive is not None:
            archive.settle(exited_normally=False)
        raise
    if archive is not None:
        archive.settle(exited_normally=True)


def submit_conf(archive: ClassArchive | None) -> dict[str, str]:
    """The job's Spark settings, with the driver's class archive where there is one."""
    if archive is None:
        return dict(SPARK_CONF)
    return {**SPARK_CONF, "spark.driver.extraJavaOptions": archive.java_option}


def job_arguments(config_path: str, flow_name: str, plan_id: str,
                  steps: tuple[str, ...] = ("mirror", "validate"),
                  run_id: str | None = None) -> list[str]:
    args = ["--config", str(Path(config_path).resolve()), "--flow", flow_name,
            "--plan-id", plan_id, "--steps", ",".join(steps)]
    return args + (["--run-id", run_id] if run_id else [])


def submit_command(config_path: str, flow_name: str, plan_id: str, master: str,
                   work_dir: Path, steps: tuple[str, ...] = ("mirror", "validate"),
                   run_id: str | None = None, archive: ClassArchive | None = None) -> list[str]:
    """spark-submit of the job; the package zip is written into ``work_dir``."""
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    confs = [arg for key, value in submit_conf(archive).items()
             for arg in ("--conf", f"{key}={value}")]
    return [
        spark_submit_binary(), "--master", master, "--name", f"mirrorflow {flow_name}",
        "--conf", f"spark.pyspark.python={python}", *confs,
        "--jars", ",".join(connector_jars()),
        "--py-files", str(package_zip(work_dir)),
        str(JOB_SCRIPT), *job_arguments(config_path, flow_name, plan_id, steps, run_id),
    ]
