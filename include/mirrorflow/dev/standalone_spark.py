"""A Spark standalone cluster on this machine, started from the pyspark install.

The pip distribution of pyspark has no ``sbin/start-master.sh``, but it has the jars and
``bin/spark-class``, which is all a master and its workers need. Used by a test to run
the mirror job the way a real cluster runs it: ``spark://`` master, executors
in their own JVMs, the ``mirrorflow`` package shipped with ``--py-files``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from mirrorflow.dev.localcluster import free_port
from mirrorflow.errors import MirrorflowError

READY_TIMEOUT_S = 120.0
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI_PORT = re.compile(r"started service 'MasterUI' on port (\d+)")


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


def _log_tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


@contextlib.contextmanager
def standalone_cluster(work_dir: Path, workers: int = 2, cores: int = 1,
                       memory: str = "2g") -> Iterator[str]:
    """Master and ``workers`` workers on loopback; yields the ``spark://`` URL.

    The master's URL and web UI port are read from its log, not assumed: Spark moves to
    the next port when the one asked for was taken meanwhile (a busy test machine), and a
    worker pointed at the port asked for would never register. Workers start once the
    master listens, so their first registration attempt succeeds (a worker that misses
    the master backs off for up to 90 s).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_LOG_DIR": str(work_dir), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    procs: list[subprocess.Popen] = []
    deadline = time.monotonic() + READY_TIMEOUT_S

    def launch(name: str, *args: str) -> None:
        with open(work_dir / f"{name}.log", "w") as log:
            procs.append(subprocess.Popen([spark_class(), *args], env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))

    def fail(what: str, log: Path) -> StandaloneClusterError:
        return StandaloneClusterError(
            f"the standalone cluster in {work_dir} {what} within {READY_TIMEOUT_S:.0f}s; "
            f"{log.name}: {_log_tail(log)}")

    def wait_until(ready: Callable[[], bool], what: str, log: Path) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError):
                if ready():
                    return
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise fail(what, log)
            time.sleep(0.5)

    master_log = work_dir / "master.log"
    found: dict[str, str] = {}

    def master_listens() -> bool:
        text = master_log.read_text(errors="replace")
        url, ui = _MASTER_URL.search(text), _MASTER_UI_PORT.search(text)
        if url and ui:
            found.update(url=url.group(1), ui=ui.group(1))
        return bool(found)

    try:
        launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
               "--port", str(free_port()), "--webui-port", str(free_port()))
        wait_until(master_listens, "had no master listening", master_log)
        master = found["url"]
        for i in range(workers):
            launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host",
                   "127.0.0.1", "--cores", str(cores), "--memory", memory, "--webui-port",
                   str(free_port()), "--work-dir", str(work_dir / f"worker-{i}"), master)
        wait_until(lambda: _alive_workers(int(found["ui"])) >= workers,
                   f"did not get {workers} workers at {master}", work_dir / "worker-0.log")
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
