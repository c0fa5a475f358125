"""A local Spark Connect server: a warm Spark that runs start no JVM.

``mirrorflow local up`` starts one when the config's ``mirrorflow.spark.master`` is an
``sc://`` address on loopback (the demo's config is), beside the local Kafka clusters, and
``mirrorflow local down`` stops it. It is ``spark-submit`` of Spark's own
``SparkConnectServer`` from the installed PySpark, with the range source's jars
(``jvm/pom.xml``), mirrorflow's session settings and this Python for its workers, bound to
exactly the configured address; its log and PID file are in the state directory.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mirrorflow.dev.processes import terminate
from mirrorflow.errors import MirrorflowError
from mirrorflow.spark.session import (
    SPARK_CONF,
    connect_address,
    connector_jars,
    is_connect,
    is_loopback,
)
from mirrorflow.spark.submit import spark_submit_binary

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
READY_TIMEOUT_S = 120.0
# The server's heap (driver and, with local[*], executors), held to 1 GiB so that the
# server's JVM stays within 1.5 GiB resident (issue 68): past its heap, it keeps some 360
# MiB of its own (Native Memory Tracking, a 10,000-partition run: class metadata 150, the
# collector's 80, symbols 36, code 35, threads and buffers the rest). With 1.5 GiB of heap
# the bench's 10,000-partition runs peaked at 1,625 to 1,740 MiB, having grown the heap to
# 1.1 GiB; with 1 GiB, at 1,255 and 1,304 MiB, no slower (17.3 and 18.4 s a next run,
# against 16.1 and 18.4). Spark's 1 GiB default ran out in make soak when records passed
# through Python workers and Spark's own Kafka source; the range source keeps only a
# slot's fetches and batches in flight. The parallel collector kept a 10,000-partition run
# lower but made test_scheduler's concurrent DAG runs 2.3 times as slow, so G1 stays.
DRIVER_MEMORY = "1g"
# G1 grows the heap until collections take less than 1/(1 + GCTimeRatio) of the time: 1/13
# by default, so a 10,000-partition first run took the heap to its maximum (1,713 MiB
# resident). At 1/5 the same run peaked at 1,113 MiB and the flow's next run at 1,407 MiB,
# no slower (the live set is small: what a slot has in flight). Regions of 4 MiB (1 MiB for
# this heap by default): a buffer of half a region or more is "humongous", and its allocation
# can start a concurrent cycle; the producer's 1 MiB batches and the consumers' fetch
# responses were, 16 of 53 collections in a 2,000,000-record run. With 4 MiB regions the
# run's collector threads used 0.4 to 0.9 CPU-s instead of 1.5 to 2.5. After 10 s without a
# collection, an idle server collects (G1PeriodicGCInterval) and gives back the heap a run of
# large records grew, which G1 otherwise keeps committed until a full collection.
DRIVER_JAVA_OPTIONS = "-XX:GCTimeRatio=4 -XX:G1HeapRegionSize=4m -XX:G1PeriodicGCInterval=10000"


class ConnectServerError(MirrorflowError):
    """The local Spark Connect server could not be started or reached."""


@dataclass(frozen=True)
class ConnectServer:
    """A local Spark Connect server at ``host:port``, its files under ``state_dir``."""

    host: str
    port: int
    state_dir: Path
    master: str = "local[*]"

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "spark-connect.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "spark-connect.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if SERVER_CLASS.encode() in cmdline and \
            f"spark.connect.grpc.binding.port={self.port}".encode() in cmdline else None

    def answering(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex((self.host, self.port)) == 0


def airflow_connection(host: str, port: int) -> str:
    """The Spark provider's Airflow connection to the Connect server at ``host:port``, as
    an ``AIRFLOW_CONN_<ID>`` value: a DAG whose mirror task uses it runs there."""
    return json.dumps({"conn_type": "spark_connect", "host": f"sc://{host}", "port": port})


def local_server(master: str, state_dir: Path) -> ConnectServer | None:
    """The server to run locally for a ``mirrorflow.spark.master``, or None when it is not
    an ``sc://`` address on loopback."""
    if not is_connect(master):
        return None
    host, port = connect_address(master)
    if not host or not is_loopback(host):
        return None
    return ConnectServer(host, port, state_dir)


def start(server: ConnectServer, timeout: float = READY_TIMEOUT_S) -> int:
    """Start the server unless it runs; wait until it accepts connections. Its PID."""
    running = server.pid()
    if running is not None:
        return running
    if server.answering():
        raise ConnectServerError(f"port {server.port} on {server.host} is in use by a process "
                                 "mirrorflow did not start")
    server.state_dir.mkdir(parents=True, exist_ok=True)
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    # Every port the server opens listens on its own loopback address: gRPC, and the
    # driver's RPC and block manager (Spark binds those to the machine's address unless
    # told), which nobody but this machine's runs should reach, unauthenticated.
    confs = {**SPARK_CONF, "spark.connect.grpc.binding.address": server.host,
             "spark.connect.grpc.binding.port": str(server.port),
             "spark.driver.bindAddress": server.host, "spark.driver.host": server.host,
             "spark.pyspark.python": python, "spark.ui.enabled": "false",
             "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS}
    command = [spark_submit_binary(), "--class", SERVER_CLASS, "--name",
               "mirrorflow Spark Connect", "--master", server.master,
               "--driver-memory", DRIVER_MEMORY,
               "--jars", ",".join(connector_jars()),
               *[arg for k, v in confs.items() for arg in ("--conf", f"{k}={v}")],
               "spark-internal"]
    with open(server.log_file, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   env={**os.environ, "PYSPARK_PYTHON": python})
    server.pid_file.write_text(f"{process.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            server.pid_file.unlink(missing_ok=True)
            raise ConnectServerError(f"the Spark Connect server exited with status "
                                     f"{process.returncode}; see {server.log_file}")
        if server.answering():
            return process.pid
        time.sleep(0.25)
    stop(server)
    raise ConnectServerError(f"the Spark Connect server did not listen on {server.url} within "
                             f"{timeout:.0f}s; see {server.log_file}")


def stop(server: ConnectServer, timeout: float = 30.0) -> bool:
    """Stop the server this module started (its whole process group), after closing this
    process's own sessions (see :func:`mirrorflow.spark.session.close_connect_sessions`)."""
    from mirrorflow.spark.session import close_connect_sessions

    close_connect_sessions()
    pid = server.pid()
    server.pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    terminate(pid, timeout, Path(f"/proc/{pid}").exists, group=True)
    return True
