"""A Spark standalone cluster on this machine, started from the pyspark install.

The pip distribution of pyspark has no ``sbin/start-master.sh``, but it has the jars and
``bin/spark-class``, which is all a master and its workers need. Used by the benchmark and
a test to run the mirror job the way a real cluster runs it: ``spark://`` master, executors
in their own JVMs, the ``mirrorflow`` package shipped with ``--py-files``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from mirrorflow.dev.localcluster import free_port
from mirrorflow.errors import MirrorflowError

READY_TIMEOUT_S = 60.0


class StandaloneClusterError(MirrorflowError):
    """The master or a worker did not come up."""


def spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _alive_workers(ui_port: int) -> int:
    """Workers the master lists as ALIVE (its web UI's JSON view)."""
    import json

    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
        return sum(1 for w in json.load(resp).get("workers", []) if w.get("state") == "ALIVE")


@contextlib.contextmanager
def standalone_cluster(work_dir: Path, workers: int = 2, cores: int = 1,
                       memory: str = "2g") -> Iterator[str]:
    """Master and ``workers`` workers on loopback; yields the ``spark://`` URL."""
    work_dir.mkdir(parents=True, exist_ok=True)
    port, ui_port = free_port(), free_port()
    env = {**os.environ, "SPARK_LOG_DIR": str(work_dir), "SPARK_LOCAL_IP": "127.0.0.1"}
    procs: list[subprocess.Popen] = []

    def launch(name: str, *args: str) -> None:
        with open(work_dir / f"{name}.log", "w") as log:
            procs.append(subprocess.Popen([spark_class(), *args], env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))

    master = f"spark://127.0.0.1:{port}"
    try:
        launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
               "--port", str(port), "--webui-port", str(ui_port))
        for i in range(workers):
            launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host",
                   "127.0.0.1", "--cores", str(cores), "--memory", memory, "--webui-port",
                   str(free_port()), "--work-dir", str(work_dir / f"worker-{i}"), master)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError, ValueError):
                if _alive_workers(ui_port) >= workers:
                    break
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise StandaloneClusterError(
                    f"the standalone cluster at {master} did not get {workers} workers within "
                    f"{READY_TIMEOUT_S:.0f}s; logs in {work_dir}")
            time.sleep(0.5)
        yield master
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
