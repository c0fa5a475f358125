"""Local clusters start and stop for real: single-node Apache Kafka (KRaft) brokers."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from mirrorflow.cli import main
from mirrorflow.config.loader import load_config, parse_config
from mirrorflow.dev import localcluster
from mirrorflow.kafka import clients

pytestmark = pytest.mark.broker


def config_text(port_a: int, port_b: int) -> str:
    return (f"clusters = a, b, remote\na.bootstrap.servers = 127.0.0.1:{port_a}\n"
            f"b.bootstrap.servers = localhost:{port_b}\n"
            "remote.bootstrap.servers = kafka.example.com:9092\na->b.enabled = true\n")


def test_running_clusters_are_real_kafka(two_clusters: dict[str, str]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    config = parse_config(f"clusters = a, b\na.bootstrap.servers = {two_clusters['a']}\n"
                          f"b.bootstrap.servers = {two_clusters['b']}\na->b.enabled = true\n")
    assert clients.ensure_topic(config.cluster("a"), "t", 2)
    assert not clients.ensure_topic(config.cluster("a"), "t", 2)
    producer = Producer({"bootstrap.servers": two_clusters["a"]})
    for i in range(10):
        producer.produce("t", value=str(i).encode(), partition=i % 2)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": two_clusters["a"], "group.id": "g"})
    consumer.assign([TopicPartition("t", 0, 0)])
    values = []
    while len(values) < 5:
        msg = consumer.poll(5)
        assert msg is not None and msg.error() is None
        values.append(msg.value())
    consumer.close()
    assert values == [b"0", b"2", b"4", b"6", b"8"]
    # The other cluster is a separate broker: it has no such topic.
    assert "t" not in clients.admin_client(config.cluster("b")).list_topics(timeout=5).topics


def test_local_up_status_down_via_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from confluent_kafka import Producer

    from helpers.kafka import read_partition

    port_a, port_b = localcluster.free_port(), localcluster.free_port()
    path = tmp_path / "mm2.properties"
    path.write_text(config_text(port_a, port_b))
    state = str(tmp_path / "state")
    try:
        assert main(["local", "up", str(path), "--state-dir", state]) == 0
        out = capsys.readouterr().out
        assert f"a: running on 127.0.0.1:{port_a}" in out
        assert f"b: running on localhost:{port_b}" in out
        assert "remote" not in out  # not on loopback: never started
        assert (tmp_path / "state" / "a" / "broker.pid").exists()
        assert (tmp_path / "state" / "a" / "data" / "meta.properties").exists()
        brokers = localcluster.local_brokers(load_config(path), Path(state))
        cmdline = Path(f"/proc/{brokers[0].pid()}/cmdline").read_bytes().split(b"\0")
        assert b"kafka.Kafka" in cmdline and b"-Xmx512m" in cmdline
        assert b"process.roles=broker,controller" in (
            tmp_path / "state" / "a" / "server.properties").read_bytes()
        # up is idempotent: the running brokers are kept.
        pids = {b.alias: b.pid() for b in brokers}
        assert main(["local", "up", str(path), "--state-dir", state]) == 0
        assert pids == {b.alias: b.pid() for b in localcluster.local_brokers(load_config(path),
                                                                              Path(state))}
        # Idempotent: the first record, sent while the broker creates the topic, is
        # retried in order (a plain producer once wrote it after the other four).
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port_a}",
                             "enable.idempotence": True})
        for i in range(5):
            producer.produce("kept", str(i).encode())
        assert producer.flush(10) == 0
        capsys.readouterr()
        assert main(["local", "status", str(path), "--state-dir", state]) == 0
        assert capsys.readouterr().out.count("answering") == 2
        # down, then up: the log dirs are kept, so the records are still there.
        assert main(["local", "down", str(path), "--state-dir", state]) == 0
        assert not localcluster.answers_metadata(f"127.0.0.1:{port_a}", timeout=1)
        assert main(["local", "up", str(path), "--state-dir", state]) == 0
        assert [r[1] for r in read_partition(f"127.0.0.1:{port_a}", "kept", 0)] == [
            str(i).encode() for i in range(5)]
    finally:
        assert main(["local", "down", str(path), "--state-dir", state]) == 0
    assert "stopped: a, b" in capsys.readouterr().out
    assert not localcluster.answers_metadata(f"127.0.0.1:{port_a}", timeout=1)
    assert main(["local", "down", str(path), "--state-dir", state]) == 0
    assert "nothing was running" in capsys.readouterr().out


def test_port_taken_by_a_foreign_process_names_the_cluster(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        path = tmp_path / "mm2.properties"
        path.write_text(config_text(port, localcluster.free_port()))
        state = str(tmp_path / "state")
        assert main(["local", "up", str(path), "--state-dir", state]) == 1
        err = capsys.readouterr().err
        assert f"cluster 'a': port {port} on 127.0.0.1 is already in use" in err
        # down does not touch the foreign process, and nothing of ours is left running.
        assert main(["local", "down", str(path), "--state-dir", state]) == 0
        assert "nothing was running" in capsys.readouterr().out


def test_a_port_another_cluster_takes_before_the_broker_binds_it_fails_the_start(
        kafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another broker that takes the port between the check that it is free and the new
    JVM's bind (a test worker's broker restarted there) is not taken for ours: the start
    fails naming the port and both clusters, and stops the JVM it started."""
    from conftest import TEST_BROKER

    from helpers.kafka import QUICK_START

    taken = kafka["a"]
    broker = localcluster.LocalBroker("x", "127.0.0.1", taken.port, tmp_path,
                                      properties=TEST_BROKER, java_options=QUICK_START)
    # The race's window is the seconds a JVM takes to bind, too short to hit on purpose:
    # the check is told the port is free, as it was when it looked.
    monkeypatch.setattr(localcluster, "_port_in_use", lambda host, port: False)
    with pytest.raises(localcluster.LocalClusterError) as failed:
        localcluster.start(broker)
    ours = localcluster._formatted_cluster_id(broker)
    other = localcluster._answering_cluster(taken.bootstrap)
    assert other not in (None, "", ours)
    assert str(failed.value) == (
        f"cluster 'x': port {taken.port} on 127.0.0.1 is answered by another Kafka cluster "
        f"({other}), not the broker mirrorflow formatted in {broker.data_dir} ({ours})")
    assert broker.pid() is None and not broker.pid_file.exists()
    mine = str(broker.server_properties.resolve()).encode()
    assert not [p for p in Path("/proc").glob("[0-9]*")
                if mine in _cmdline(p)], "the JVM the start began still runs"
    assert taken.pid() is not None and localcluster.answers_metadata(taken.bootstrap)


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_free_ports_lie_below_the_ephemeral_range_and_skip_a_taken_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ports picked for local servers are not ones the kernel hands outgoing
    connections, they do not repeat when the random module is seeded the same (as
    pytest-randomly seeds every test worker's), and one that a socket holds is passed
    over."""
    start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = []
    for _ in range(20):
        random.seed(7)
        ports.append(localcluster.free_port())
    assert all(localcluster.PORT_RANGE_START <= port < start for port in ports), ports
    assert len(set(ports)) > 15, ports
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports[0]))
        held.listen(1)
        other = ports[1] if ports[1] != ports[0] else ports[0] + 1
        tried = type("Tried", (), {"sample": lambda self, population, k: [ports[0], other]})
        monkeypatch.setattr(localcluster, "_PORT_CHOICE", tried())
        assert localcluster.free_port() == other


def test_stale_pid_file_is_ignored(tmp_path: Path) -> None:
    broker = localcluster.LocalBroker("a", "127.0.0.1", localcluster.free_port(), tmp_path)
    broker.home.mkdir(parents=True)
    broker.pid_file.write_text("1\n")  # PID 1 is not our broker
    assert broker.pid() is None
    assert not localcluster.stop(broker)


def listening(pids: list[int]) -> list[str]:
    """Every listening TCP address of these processes and their children (an IPv4 address
    mapped into IPv6 as the IPv4 one)."""
    import ipaddress

    import psutil

    found = []
    for pid in pids:
        process = psutil.Process(pid)
        for each in [process, *process.children(recursive=True)]:
            for c in each.net_connections("inet"):
                if c.status == psutil.CONN_LISTEN:
                    ip = ipaddress.ip_address(c.laddr.ip)
                    found.append(f"{getattr(ip, 'ipv4_mapped', None) or ip}:{c.laddr.port}")
    return found


def test_a_failed_up_stops_what_it_started_and_up_listens_on_loopback_only(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``local up`` fails at the target's schema registry (its port answers, but not a
    registry of ours): the source's registry, the Spark Connect server and both brokers it
    had started are stopped, newest first, and named. Started whole, every socket its
    processes listen on is on loopback (the Connect server's driver too)."""
    import http.server
    import threading

    from mirrorflow.dev import connect_server, local_registries

    class Registry(http.server.BaseHTTPRequestHandler):  # answers as a registry would
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"[]")

        def log_message(self, *args) -> None:
            pass

    ports = [localcluster.free_port() for _ in range(4)]
    foreign = http.server.HTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    transfer = "a->b.transforms.T"
    path = tmp_path / "mm2.properties"
    path.write_text(
        config_text(ports[0], ports[1])
        + f"a->b.mirrorflow.spark.master = sc://127.0.0.1:{ports[2]}\n"
        + f"a->b.transforms = T\n{transfer}.type = cricket.jmoore.kafka.connect.transforms."
          "SchemaRegistryTransfer\n"
        + f"{transfer}.src.schema.registry.url = http://127.0.0.1:{ports[3]}\n"
        + f"{transfer}.dest.schema.registry.url = http://127.0.0.1:{foreign.server_port}\n")
    state = str(tmp_path / "state")
    config = load_config(path)
    server = localcluster.connect_servers(config, Path(state))[0]
    try:
        assert main(["local", "up", str(path), "--state-dir", state]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == (
            f"mirrorflow: error: http://127.0.0.1:{foreign.server_port} answers, but mirrorflow "
            f"did not start it; stopped what this call had started: schema registry "
            f"http://127.0.0.1:{ports[3]}, Spark Connect sc://127.0.0.1:{ports[2]}, cluster b, "
            f"cluster a")
        assert server.pid() is None and not server.answering()
        assert [s.pid for s in localcluster.status(config, Path(state))] == [None, None]
        foreign.shutdown()
        foreign.server_close()

        assert main(["local", "up", str(path), "--state-dir", state]) == 0
        registries = local_registries.local_registries(config, Path(state))
        pids = [b.pid() for b in localcluster.local_brokers(config, Path(state))]
        pids += [server.pid(), *(r.pid() for r in registries)]
        addresses = listening(pids)
        assert f"127.0.0.1:{ports[2]}" in addresses and len(addresses) >= 7, addresses
        assert [a for a in addresses if not a.startswith("127.")] == []
    finally:
        foreign.server_close()
        main(["local", "down", str(path), "--state-dir", state])
    assert server.pid() is None and connect_server.stop(server) is False
