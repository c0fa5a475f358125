"""Local Kafka clusters: one single-node Apache Kafka (KRaft) broker per cluster alias.

Used by ``mirrorflow local up|down|status`` for the demo and ``make airflow``, by the
test fixtures and by the benchmark. Only clusters whose bootstrap address is on loopback
are started, each on exactly its port, as one JVM that is both broker and controller
(``process.roles = broker,controller``), with a bounded heap. Each broker has a folder
under the state directory: its ``server.properties`` (written once, with the controller
port chosen then), its log dirs (formatted on the first start, so data survives ``down``
then ``up``), its log file and its PID file. ``down`` stops only processes whose PID file
this module wrote and whose command line is still that broker's.

The jars come from ``jvm/pom.xml``'s ``broker`` classpath (:mod:`mirrorflow.jvm`).
"""

from __future__ import annotations

import contextlib
import functools
import random
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mirrorflow import jvm
from mirrorflow.config.model import ClusterConfig, MirrorConfig
from mirrorflow.dev.processes import terminate
from mirrorflow.errors import MirrorflowError
from mirrorflow.spark.session import is_loopback

DEFAULT_STATE_DIR = Path(".mirrorflow")
READY_TIMEOUT_S = 60.0
HEAP = "512m"


class LocalClusterError(MirrorflowError):
    """A local broker could not be started, reached or stopped."""


@dataclass(frozen=True)
class LocalBroker:
    """A local single-node KRaft broker for one cluster alias.

    ``properties`` are added to (and win over) the generated ``server.properties`` at
    its first start, e.g. SASL or SSL listeners; ``format_args`` go to ``kafka-storage
    format`` (e.g. ``--add-scram`` credentials); ``client`` is the librdkafka config used
    to tell when the broker answers (for a broker whose listener needs credentials);
    ``java_options`` go to the broker's JVM after the heap (the tests' brokers compile with
    C1 only: a broker moving a few thousand records spends more CPU in C2 than in work)."""

    alias: str
    host: str
    port: int
    state_dir: Path
    properties: Mapping[str, str] = field(default_factory=dict)
    format_args: tuple[str, ...] = ()
    client: Mapping[str, str] = field(default_factory=dict)
    java_options: tuple[str, ...] = ()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def home(self) -> Path:
        return self.state_dir / self.alias

    @property
    def server_properties(self) -> Path:
        return self.home / "server.properties"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "broker.log"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    def pid(self) -> int | None:
        """The PID of our running broker, or None (stale PID files are ignored)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if self._is_ours(pid) else None

    def _is_ours(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return (b"kafka.Kafka" in cmdline
                and str(self.server_properties.resolve()).encode() in cmdline)


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


def answers_metadata(bootstrap: str, timeout: float = 2.0,
                     client: Mapping[str, str] | None = None) -> bool:
    """True when a Kafka broker at ``bootstrap`` answers a metadata request."""
    return _answering_cluster(bootstrap, timeout, client) is not None


def _answering_cluster(bootstrap: str, timeout: float = 2.0,
                      client: Mapping[str, str] | None = None) -> str | None:
    """The id of the Kafka cluster whose broker answers a metadata request at
    ``bootstrap``, or None when none does."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                         "log_level": 0, **(client or {})})
    try:
        return admin.list_topics(timeout=timeout).cluster_id or ""
    except Exception:
        return None


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host.strip("[]"), port)) == 0


def _server_properties(broker: LocalBroker) -> str:
    """The broker's configuration; ``broker.properties`` win, and may name the controller's
    listener as ``{controller}``. The controller's port is chosen at the first start and
    kept (the formatted log dirs record it); the broker's port is the config's, now."""
    controller = _kept_controller(broker) or f"{broker.host}:{free_port(broker.host)}"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": controller,
        "listeners": f"PLAINTEXT://{broker.bootstrap},CONTROLLER://{controller}",
        "advertised.listeners": f"PLAINTEXT://{broker.bootstrap}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(broker.data_dir.resolve()),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Deleted topics' files go soon: tests delete and recreate topics often.
        "file.delete.delay.ms": "1000",
        **{k: v.replace("{controller}", controller) for k, v in broker.properties.items()},
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _kept_controller(broker: LocalBroker) -> str | None:
    try:
        lines = broker.server_properties.read_text().splitlines()
    except OSError:
        return None
    key = "controller.quorum.bootstrap.servers="
    return next((line[len(key):] for line in lines if line.startswith(key)), None)


def _java(broker: LocalBroker, main: str, *args: str, server: bool = False) -> list[str]:
    """A JVM of the broker classpath: the broker itself with a bounded heap, or a short
    tool run with the quick-start compiler only."""
    log4j = broker.home / "log4j2.properties"
    flags = ([f"-Xmx{HEAP}", f"-Xms{HEAP}", *broker.java_options] if server
             else ["-XX:TieredStopAtLevel=1"])
    return ["java", *flags, f"-Dlog4j2.configurationFile={log4j.resolve()}",
            "-cp", jvm.classpath("broker"), main, *args]


def _format(broker: LocalBroker) -> None:
    """Write the broker's configuration, and format its log dirs once."""
    broker.home.mkdir(parents=True, exist_ok=True)
    (broker.home / "log4j2.properties").write_text(
        jvm.log4j_config(broker.log_file))
    broker.server_properties.write_text(_server_properties(broker))
    if (broker.data_dir / "meta.properties").exists():
        return
    cluster_id = subprocess.run(_java(broker, "kafka.tools.StorageTool", "random-uuid"),
                                capture_output=True, text=True, check=True).stdout.strip()
    proc = subprocess.run(
        _java(broker, "kafka.tools.StorageTool", "format", "--standalone", "-t", cluster_id,
              "-c", str(broker.server_properties.resolve()), *broker.format_args),
        capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LocalClusterError(f"cluster {broker.alias!r}: formatting {broker.data_dir} "
                                f"failed: {(proc.stderr or proc.stdout).strip()[-500:]}")


def _formatted_cluster_id(broker: LocalBroker) -> str:
    """The id of the cluster the broker's log dirs were formatted for (``meta.properties``)."""
    for line in (broker.data_dir / "meta.properties").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id":
            return value.strip()
    raise LocalClusterError(f"cluster {broker.alias!r}: {broker.data_dir / 'meta.properties'} "
                            "names no cluster.id")


def start(broker: LocalBroker, timeout: float = READY_TIMEOUT_S) -> int:
    """Start one broker (formatting it on the first start) and wait until it answers
    metadata. Returns its PID."""
    existing = broker.pid()
    if existing is not None:
        return existing
    if _port_in_use(broker.host, broker.port):
        raise LocalClusterError(
            f"cluster {broker.alias!r}: port {broker.port} on {broker.host} is already in use "
            "by a process mirrorflow did not start")
    _format(broker)
    with open(broker.home / "stdout.log", "ab") as out:
        process = subprocess.Popen(
            _java(broker, "kafka.Kafka", str(broker.server_properties.resolve()), server=True),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    broker.pid_file.write_text(f"{process.pid}\n")
    ours = _formatted_cluster_id(broker)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            broker.pid_file.unlink(missing_ok=True)
            raise LocalClusterError(
                f"cluster {broker.alias!r}: broker exited with status {process.returncode}; "
                f"see {broker.log_file}")
        # Only our cluster's answer means our broker is up: the port was free when checked,
        # but another process may take it in the seconds before this JVM binds it (a test
        # run's other broker restarted on it, say), and its answer would make a caller
        # stop, wipe or write to that other cluster as if it were this one.
        found = _answering_cluster(broker.bootstrap, timeout=1.0, client=broker.client)
        if found == ours:
            return process.pid
        if found is not None:
            stop(broker)
            raise LocalClusterError(
                f"cluster {broker.alias!r}: port {broker.port} on {broker.host} is answered "
                f"by another Kafka cluster ({found}), not the broker mirrorflow formatted in "
                f"{broker.data_dir} ({ours})")
        time.sleep(0.1)
    stop(broker)
    raise LocalClusterError(
        f"cluster {broker.alias!r}: broker did not answer on {broker.bootstrap} within "
        f"{timeout:.0f}s; see {broker.log_file}")


def stop(broker: LocalBroker, timeout: float = 30.0) -> bool:
    """Stop a broker this module started (a clean shutdown, then SIGKILL after
    ``timeout``). Returns False when none was running."""
    pid = broker.pid()
    broker.pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    terminate(pid, timeout, lambda: broker._is_ours(pid))
    return True


def connect_servers(config: MirrorConfig, state_dir: Path) -> list:
    """The local Spark Connect servers the enabled flows' ``mirrorflow.spark.master``
    names (``sc://`` on loopback)."""
    from mirrorflow.dev.connect_server import local_server

    found = {}
    for flow in config.enabled_flows():
        server = local_server(flow.get("mirrorflow.spark.master"), state_dir)
        if server is not None:
            found[server.url] = server
    return list(found.values())


def up(config: MirrorConfig, state_dir: Path = DEFAULT_STATE_DIR) -> list[LocalBroker]:
    """Start every local cluster of the config, its local Spark Connect server if it
    names one and its local schema registries. On failure, stop what this call started,
    in reverse order, and say so in the error: a failed ``up`` leaves nothing running
    that it started (a Connect server alone is a JVM of 1 GiB of heap)."""
    from mirrorflow.dev import connect_server, local_registries

    started: list[tuple[str, Callable[[], object]]] = []

    def start_once(name: str, running: bool, begin: Callable[[], object],
                   end: Callable[[], object]) -> None:
        begin()
        if not running:
            started.append((name, end))

    brokers = local_brokers(config, state_dir)
    try:
        for broker in brokers:
            start_once(f"cluster {broker.alias}", broker.pid() is not None,
                       functools.partial(start, broker), functools.partial(stop, broker))
        for server in connect_servers(config, state_dir):
            start_once(f"Spark Connect {server.url}", server.pid() is not None,
                       functools.partial(connect_server.start, server),
                       functools.partial(connect_server.stop, server))
        for registry in local_registries.local_registries(config, state_dir):
            start_once(f"schema registry {registry.url}", registry.pid() is not None,
                       functools.partial(local_registries.start, registry),
                       functools.partial(local_registries.stop, registry))
    except MirrorflowError as exc:
        stopped = _stop_started(started)
        raise type(exc)(f"{exc}; stopped what this call had started: "
                        f"{', '.join(stopped) or 'nothing'}") from exc
    except BaseException:
        _stop_started(started)
        raise
    return brokers


def _stop_started(started: list[tuple[str, Callable[[], object]]]) -> list[str]:
    """Stop what ``up`` started, newest first; their names."""
    for _, end in reversed(started):
        end()
    return [name for name, _ in reversed(started)]


def down(config: MirrorConfig, state_dir: Path = DEFAULT_STATE_DIR) -> list[str]:
    """Stop the local clusters (and Spark Connect server) of the config that this module
    started; their names."""
    from mirrorflow.dev import connect_server, local_registries

    stopped = [s.url for s in connect_servers(config, state_dir) if connect_server.stop(s)]
    stopped += [r.url for r in local_registries.local_registries(config, state_dir)
                if local_registries.stop(r)]
    return [b.alias for b in local_brokers(config, state_dir) if stop(b)] + stopped


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


# Ports picked for local servers (brokers, their controllers, Spark Connect servers) lie
# below the kernel's ephemeral range, from which every outgoing connection's local port
# comes: a server started again on its port (a test's broker restarted, a controller's
# kept port) could otherwise find it held by some client's connection, and a client
# reconnecting to the port while the server was down could connect to itself.
PORT_RANGE_START = 20000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_PORT_TRIES = 100
# The operating system's randomness: processes started alike (test workers whose random
# module a plugin seeds the same) must not try the same ports in the same order.
_PORT_CHOICE = random.SystemRandom()


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing at ``host`` listens on or connects from now, below the kernel's
    ephemeral range (the kernel's own pick where that range leaves no room below it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    address = host.strip("[]")
    end = _ephemeral_start()
    if end - PORT_RANGE_START >= _PORT_TRIES:
        for port in _PORT_CHOICE.sample(range(PORT_RANGE_START, end), _PORT_TRIES):
            with socket.socket(family) as sock:
                try:
                    sock.bind((address, port))
                except OSError:
                    continue
                return port
    with socket.socket(family) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unreadable)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


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
