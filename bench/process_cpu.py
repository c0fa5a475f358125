"""Where a machine's CPU goes: by kind of process, a sampler of ``/proc`` for ``make soak``
(:class:`ProcessCpu`); for the whole machine over one measured pass, for ``make bench``
(:class:`MachineCpu`).

Every second it reads each process's user and system time and adds what it used since the
last look to its kind (a broker, the Spark Connect server, its Python workers, an Airflow
task process and its supervisor, each Airflow service, this process). What the processes
running at the start had used before is not counted; a process started later counts in
full; one that ends between two looks loses at most its last second. Each look also reads
each process's resident memory: the largest one process of each kind reached
(:attr:`ProcessCpu.peak_rss`).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

HZ = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
# A process's kind: the first of these found in its command line (Airflow names its
# processes with setproctitle: "airflow worker -- LocalExecutor: ...", "airflow
# scheduler", ...).
KINDS = (("kafka.Kafka", "brokers"), ("SparkConnectServer", "spark_connect_jvm"),
         ("pyspark.daemon", "spark_python_workers"), ("pyspark.worker", "spark_python_workers"),
         ("airflow worker", "airflow_task_processes"),
         ("airflow supervisor", "airflow_task_processes"),
         ("api_server", "airflow_api_server"), ("api-server", "airflow_api_server"),
         ("airflow scheduler", "airflow_scheduler"),
         ("dag-processor", "airflow_dag_processor"), ("triggerer", "airflow_triggerer"),
         ("airflow", "airflow_other"))


def kind_of(cmdline: bytes) -> str | None:
    text = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return next((kind for mark, kind in KINDS if mark in text), None)


class ProcessCpu(threading.Thread):
    """CPU seconds by kind of process while it runs (:attr:`seconds`); this process's own
    (the load generator and the lag consumers) as ``soak``. The peak resident bytes of one
    process of each kind (:attr:`peak_rss`): the Connect server's JVM is one process."""

    def __init__(self, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.interval, self.stopped = interval, threading.Event()
        self.seconds: Counter[str] = Counter()
        self.peak_rss: Counter[str] = Counter()
        self._seen: dict[int, tuple[str | None, float]] = {}

    def run(self) -> None:
        self.sample()  # what the processes running now used before: not counted
        self.seconds.clear()
        while not self.stopped.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                used = (int(fields[11]) + int(fields[12])) / HZ
                if pid not in self._seen or used < self._seen[pid][1]:  # new, or pid reused
                    kind = ("soak" if pid == os.getpid()
                            else kind_of((entry / "cmdline").read_bytes()))
                    self._seen[pid] = (kind, 0.0)
            except (OSError, IndexError):
                continue
            kind, before = self._seen[pid]
            if kind is not None:
                self.seconds[kind] += used - before
                self._seen[pid] = (kind, used)
                try:
                    rss = int((entry / "statm").read_text().split()[1]) * PAGE
                except (OSError, IndexError):
                    continue
                self.peak_rss[kind] = max(self.peak_rss[kind], rss)

    def result(self) -> dict[str, float]:
        return {kind: round(seconds, 1) for kind, seconds in self.seconds.most_common()}

    def peak_rss_mib(self) -> dict[str, int]:
        """The peak resident MiB of one process of each kind."""
        return {kind: round(rss / 2**20) for kind, rss in self.peak_rss.most_common()}


class MachineCpu:
    """The whole machine's busy CPU-seconds (every process: brokers, the contender, this
    process) between entering and leaving, from ``/proc/stat``: what one contender's pass
    cost the machine, and how much of its cores it kept busy (:attr:`share`). A pass that
    keeps every core busy can only go faster by needing less CPU."""

    def __init__(self) -> None:
        self.seconds = self.wall = 0.0

    @staticmethod
    def _busy() -> float:
        times = psutil.cpu_times()
        return sum(times) - times.idle - getattr(times, "iowait", 0.0)

    def __enter__(self) -> MachineCpu:
        self._started, self._busy_before = time.perf_counter(), self._busy()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = self._busy() - self._busy_before
        self.wall = time.perf_counter() - self._started

    @property
    def share(self) -> float:
        """Busy CPU-seconds over what the machine's cores had in the same wall time."""
        return self.seconds / max(self.wall * (os.cpu_count() or 1), 1e-9)
