"""Apache Kafka brokers with SASL/SCRAM over SSL and the StandardAuthorizer.

A test CA and a broker certificate are made here with openssl; each broker has an admin
(super user) and a ``mirror`` principal that holds exactly the ACLs docs/security.md
lists, and nothing else. One whole cycle (heartbeats, plan, topic config and ACL sync,
the Spark mirror and its proof, commit, checkpoints, group offset sync) must pass with
those, proving the list sufficient; the ACL sync itself is checked on the target.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from helpers.kafka import QUICK_START, commit_offsets, varied_records
from mirrorflow.dev.localcluster import LocalBroker, free_port, start, stop
from mirrorflow.kafka.clients import close_shared
from mirrorflow.run import run_cycle

pytestmark = pytest.mark.broker

SCRAM = "SCRAM-SHA-256"
USERS = {"admin": "admin-secret", "mirror": "mirror-secret", "alice": "alice-secret",
         "bob": "bob-secret"}


def make_certificates(folder: Path) -> tuple[Path, Path]:
    """A CA (``ca.pem``) and a broker key and certificate for 127.0.0.1 (``broker.pem``,
    key first, as Kafka's PEM key store reads it)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "2", "-subj", "/CN=mirrorflow-test-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key",
            "-out", "broker.csr", "-subj", "/CN=localhost")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "broker.crt", "-days", "2", "-extfile", "san.ext")
    broker_pem = folder / "broker.pem"
    broker_pem.write_text((folder / "broker.key").read_text()
                          + (folder / "broker.crt").read_text())
    return folder / "ca.pem", broker_pem


def client(ca: Path, user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM,
            "sasl.username": user, "sasl.password": USERS[user], "ssl.ca.location": str(ca)}


def secure_broker(alias: str, state: Path, ca: Path, broker_pem: Path) -> LocalBroker:
    port = free_port()
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="admin" password="{USERS["admin"]}";')
    return LocalBroker(
        alias, "127.0.0.1", port, state,
        properties={
            "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://{{controller}}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": SCRAM,
            "sasl.mechanism.inter.broker.protocol": SCRAM,
            f"listener.name.sasl_ssl.{SCRAM.lower()}.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker_pem),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The controller listener is PLAINTEXT on loopback: its principal is ANONYMOUS.
            "super.users": "User:admin;User:ANONYMOUS",
            "log.retention.ms": "-1",
        },
        format_args=tuple(arg for user, password in USERS.items() for arg in (
            "--add-scram", f"{SCRAM}=[name={user},password={password}]")),
        client=client(ca, "admin"), java_options=QUICK_START)


def allow(principal: str, resource: ResourceType, name: str, pattern: ResourcePatternType,
          *operations: AclOperation) -> list[AclBinding]:
    return [AclBinding(resource, name, pattern, f"User:{principal}", "*", op,
                       AclPermissionType.ALLOW) for op in operations]


LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER
TXN = ResourceType.TRANSACTIONAL_ID
Op = AclOperation


def mirror_acls_on_source(topics: list[str], target: str) -> list[AclBinding]:
    """What the mirror's principal holds on a source cluster (docs/security.md)."""
    acls = []
    for topic in topics:  # the mirrored topics
        acls += allow("mirror", TOPIC, topic, LITERAL, Op.READ, Op.DESCRIBE,
                      Op.DESCRIBE_CONFIGS)
    acls += allow("mirror", TOPIC, "heartbeats", LITERAL, Op.READ, Op.DESCRIBE,
                  Op.DESCRIBE_CONFIGS, Op.CREATE, Op.WRITE)
    acls += allow("mirror", TOPIC, f"mm2-offset-syncs.{target}.internal", LITERAL,
                  Op.CREATE, Op.WRITE, Op.READ, Op.DESCRIBE)
    acls += allow("mirror", GROUP, "*", LITERAL, Op.DESCRIBE)
    acls += allow("mirror", CLUSTER, "kafka-cluster", LITERAL, Op.DESCRIBE)
    return acls


def mirror_acls_on_target(source: str) -> list[AclBinding]:
    """What the mirror's principal holds on a target cluster (docs/security.md)."""
    acls = allow("mirror", TOPIC, f"{source}.", PREFIXED, Op.CREATE, Op.WRITE, Op.READ,
                 Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALTER)
    for prefix in (f"mm2-offsets.{source}.", "mirrorflow-"):
        acls += allow("mirror", TOPIC, prefix, PREFIXED, Op.CREATE, Op.WRITE, Op.READ,
                      Op.DESCRIBE)
    acls += allow("mirror", TOPIC, "heartbeats", LITERAL, Op.CREATE, Op.WRITE, Op.READ,
                  Op.DESCRIBE)
    acls += allow("mirror", TXN, "mirrorflow|", PREFIXED, Op.WRITE, Op.DESCRIBE)
    acls += allow("mirror", GROUP, f"__mirrorflow.{source}", LITERAL, Op.READ, Op.DESCRIBE)
    acls += allow("mirror", GROUP, "*", LITERAL, Op.READ, Op.DESCRIBE)
    acls += allow("mirror", CLUSTER, "kafka-cluster", LITERAL, Op.DESCRIBE, Op.ALTER)
    return acls


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, Path]]:
    folder = tmp_path_factory.mktemp("secure")
    ca, broker_pem = make_certificates(folder)
    brokers = {alias: secure_broker(alias, folder, ca, broker_pem) for alias in "ab"}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(start, brokers.values()))
    yield brokers, ca
    close_shared()
    for broker in brokers.values():
        stop(broker)


def grant(admin: AdminClient, user: str, bindings: list[AclBinding]) -> None:
    """``bindings`` (written for the principal ``mirror``) created for ``user``."""
    for future in admin.create_acls([
            AclBinding(x.restype, x.name, x.resource_pattern_type, f"User:{user}", x.host,
                       x.operation, x.permission_type) for x in bindings]).values():
        future.result(30)


def flow_lines(user: str, a: str, b: str, ca: Path, topic: str) -> list[str]:
    """The lines of flow a->b of ``topic`` over SASL_SSL as ``user``."""
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{user}" password="{USERS[user]}";')
    return ["clusters = a, b", f"a.bootstrap.servers = {a}", f"b.bootstrap.servers = {b}",
            "a->b.enabled = true", f"a->b.topics = {topic}", "replication.factor = 1",
            "offset-syncs.topic.replication.factor = 1",
            "checkpoints.topic.replication.factor = 1", "emit.heartbeats.enabled = false",
            "sync.topic.acls.enabled = false", "security.protocol = SASL_SSL",
            f"sasl.mechanism = {SCRAM}", f"sasl.jaas.config = {jaas}",
            "ssl.truststore.type = PEM", f"ssl.truststore.location = {ca}"]


def test_mirror_over_sasl_ssl_with_exactly_the_documented_acls(secure, spark,
                                                               tmp_path: Path) -> None:
    brokers, ca = secure
    a, b = brokers["a"].bootstrap, brokers["b"].bootstrap
    admin_a = AdminClient({"bootstrap.servers": a, **client(ca, "admin")})
    admin_b = AdminClient({"bootstrap.servers": b, **client(ca, "admin")})
    for future in admin_a.create_topics([NewTopic("orders", 2, 1, config={
            "retention.ms": "604800000", "cleanup.policy": "delete"})]).values():
        future.result(30)
    for future in admin_a.create_acls(
            mirror_acls_on_source(["orders"], "b")
            + allow("alice", TOPIC, "orders", LITERAL, Op.READ)
            + allow("alice", GROUP, "billing", LITERAL, Op.READ)).values():
        future.result(30)
    for future in admin_b.create_acls(mirror_acls_on_target("a")).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": a, **client(ca, "admin")})
    # Current timestamps: with retention.ms of 7 days, the broker's retention check would
    # delete segments of records stamped years ago.
    now = int(time.time() * 1000)
    for index, (key, value, headers, _) in enumerate(varied_records(200)):
        producer.produce("orders", key=key, value=value, headers=headers, timestamp=now + index,
                         partition=index % 2)
    assert producer.flush(30) == 0
    # alice's application processes half of each partition on the source.
    alice = Consumer({"bootstrap.servers": a, "group.id": "billing", **client(ca, "alice")})
    commit_offsets(alice, [TopicPartition("orders", p, 50) for p in range(2)])
    alice.close()

    mirror = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
              f'username="mirror" password="{USERS["mirror"]}";')
    path = tmp_path / "mm2.properties"
    path.write_text("\n".join([
        "clusters = a, b", f"a.bootstrap.servers = {a}", f"b.bootstrap.servers = {b}",
        "a->b.enabled = true", "replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1", "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1", "sync.group.offsets.enabled = true",
        "security.protocol = SASL_SSL", f"sasl.mechanism = {SCRAM}",
        f"sasl.jaas.config = {mirror}",
        "ssl.truststore.type = PEM", f"ssl.truststore.location = {ca}"]) + "\n")

    result = run_cycle(path, "a->b", spark=spark)

    # The orders, and the heartbeat the reverse pair's connector emits into a (MM2 runs
    # heartbeat connectors for disabled flows too), sensed on b.
    assert result.records == 200 + 1 and result.heartbeat["arrived"] is True
    reader = Consumer({"bootstrap.servers": b, "group.id": "check", **client(ca, "admin"),
                       "enable.auto.commit": False, "isolation.level": "read_committed"})
    ends = [reader.get_watermark_offsets(TopicPartition("a.orders", p), 10)[1]
            for p in range(2)]
    reader.close()
    assert ends == [101, 101]  # 100 records and the commit marker of their transaction
    # Topic configs, group offsets and alice's READ grant reached the target.
    configs = admin_b.describe_configs([_topic_resource("a.orders")])
    (entries,) = [f.result(30) for f in configs.values()]
    assert entries["retention.ms"].value == "604800000"
    billing = Consumer({"bootstrap.servers": b, "group.id": "billing", **client(ca, "admin")})
    committed = billing.committed([TopicPartition("a.orders", p) for p in range(2)], timeout=10)
    billing.close()
    assert [tp.offset for tp in committed] == [50, 50]
    granted = admin_b.describe_acls(AclBindingFilter(
        TOPIC, "a.orders", LITERAL, "User:alice", None, Op.ANY, AclPermissionType.ANY)
    ).result(30)
    assert [(acl.operation, acl.permission_type) for acl in granted] == [
        (Op.READ, AclPermissionType.ALLOW)]


def _topic_resource(name: str):
    from confluent_kafka.admin import ConfigResource

    return ConfigResource("topic", name)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_no_password_in_a_connect_servers_ui_rest_api_log_or_event_log(secure,
                                                                       tmp_path: Path) -> None:
    """A Spark Connect server of the user's own (none of mirrorflow's settings, UI and event
    log on) runs a SASL_SSL flow: the password reaches no page of its Connect and SQL tabs,
    no answer of its REST API, not its log and not its event log."""
    import json
    import os
    import re
    import sys
    import urllib.request

    from helpers.kafka import produce
    from mirrorflow.dev.connect_server import SERVER_CLASS, ConnectServer
    from mirrorflow.dev.connect_server import stop as stop_server
    from mirrorflow.spark.session import connector_jars
    from mirrorflow.spark.submit import spark_submit_binary

    brokers, ca = secure
    a, b = brokers["a"].bootstrap, brokers["b"].bootstrap
    admin = AdminClient({"bootstrap.servers": a, **client(ca, "admin")})
    # One partition: the mirror's statement is then one Kafka read, whose options the
    # Connect pages show in full (a union of several slots' reads is abbreviated there).
    admin.create_topics([NewTopic("payments", 1, 1)])["payments"].result(30)
    produce(a, "payments", varied_records(40), 1, **client(ca, "admin"))
    password = USERS["admin"]
    events, port, ui_port = tmp_path / "events", free_port(), free_port()
    events.mkdir()
    server = ConnectServer("127.0.0.1", port, tmp_path / "connect")
    server.state_dir.mkdir()
    confs = {"spark.connect.grpc.binding.address": "127.0.0.1",
             "spark.connect.grpc.binding.port": str(port), "spark.ui.enabled": "true",
             "spark.ui.port": str(ui_port), "spark.eventLog.enabled": "true",
             "spark.eventLog.dir": events.as_uri(), "spark.eventLog.compress": "false",
             "spark.pyspark.python": sys.executable}
    with open(server.log_file, "ab") as log:
        process = subprocess.Popen(
            [spark_submit_binary(), "--class", SERVER_CLASS, "--master", "local[2]",
             "--jars", ",".join(connector_jars()),
             *[arg for k, v in confs.items() for arg in ("--conf", f"{k}={v}")],
             "spark-internal"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    server.pid_file.write_text(f"{process.pid}\n")
    try:
        deadline = time.monotonic() + 120
        while not server.answering() and time.monotonic() < deadline:
            assert process.poll() is None, server.log_file.read_text()[-2000:]
            time.sleep(0.5)
        jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="admin" password="{password}";')
        path = tmp_path / "mm2.properties"
        path.write_text("\n".join([
            "clusters = a, b", f"a.bootstrap.servers = {a}", f"b.bootstrap.servers = {b}",
            "a->b.enabled = true", "a->b.topics = payments", "replication.factor = 1",
            "offset-syncs.topic.replication.factor = 1",
            "checkpoints.topic.replication.factor = 1", "emit.heartbeats.enabled = false",
            "security.protocol = SASL_SSL", f"sasl.mechanism = {SCRAM}",
            f"sasl.jaas.config = {jaas}", "ssl.truststore.type = PEM",
            f"ssl.truststore.location = {ca}", f"mirrorflow.spark.master = {server.url}"])
            + "\n")

        # As a user runs it: `mirrorflow run` (a process of its own, a Connect client).
        run = subprocess.run([sys.executable, "-m", "mirrorflow.cli", "run", str(path),
                              "--flow", "a->b", "--json"], capture_output=True, text=True,
                             check=False, timeout=300, env={**os.environ})
        assert run.returncode == 0, run.stderr[-2000:]
        result = json.loads(run.stdout)
        assert result["records"] == 40 and result["validation"]["success"]

        ui = f"http://127.0.0.1:{ui_port}"

        def get(url: str) -> str:
            with urllib.request.urlopen(url, timeout=30) as answer:
                return answer.read().decode()

        pages = {}
        for front in ("/connect/", "/SQL/"):
            pages[front] = get(ui + front)
            for link in set(re.findall(r'href="(/(?:connect|SQL)/[^"]+)"', pages[front])):
                pages[link] = get(ui + link.replace("&amp;", "&"))
        (app,) = json.loads(get(ui + "/api/v1/applications"))
        api = f"{ui}/api/v1/applications/{app['id']}"
        pages["sql"] = get(api + "/sql?details=true&planDescription=true")
        pages["jobs"] = get(api + "/jobs")
        # The pages show the run's work: its statements and queries read Kafka over SASL.
        assert any("/connect/session/" in link for link in pages), sorted(pages)
        assert any("/SQL/execution/" in link for link in pages), sorted(pages)
        shown = [name for name, page in pages.items()
                 if "kafka.sasl.jaas.config" in html_unescape(page)]
        assert any(name.startswith("/connect/session/") for name in shown), shown
        assert [name for name, page in pages.items() if password in html_unescape(page)] == []
    finally:
        stop_server(server)
    # Spark 4 writes a rolling event log: a folder of event files.
    event_log = "".join(p.read_text() for p in sorted(events.rglob("*")) if p.is_file())
    assert "SparkListenerConnectOperationStarted" in event_log
    assert "kafka.sasl.jaas.config" in event_log and "*********(redacted)" in event_log
    assert password not in event_log
    assert password not in server.log_file.read_text()


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_a_protocol_mismatch_says_a_broker_answered_and_names_the_setting(
        secure, two_clusters, tmp_path: Path) -> None:
    """PLAINTEXT to a SASL_SSL listener, and SSL to a PLAINTEXT one: not 'no broker answers
    there', but what happened and the setting to check. Both connections end before any
    request, as a starting broker's do: each is asked again for STARTING_GRACE_S (10 s),
    not for a task's whole wait for a restarting cluster."""
    import re

    from mirrorflow.config.loader import load_config
    from mirrorflow.kafka.clients import ClusterUnreachableError
    from mirrorflow.kafka.reachability import await_reachable

    brokers, ca = secure
    path = tmp_path / "mm2.properties"
    path.write_text(f"clusters = s, p\ns.bootstrap.servers = {brokers['a'].bootstrap}\n"
                    f"p.bootstrap.servers = {two_clusters['a']}\n"
                    "p.security.protocol = SSL\n"
                    f"p.ssl.truststore.type = PEM\np.ssl.truststore.location = {ca}\n")
    config = load_config(path)
    for alias, protocol in (("s", "PLAINTEXT"), ("p", "SSL")):
        with pytest.raises(ClusterUnreachableError) as info:
            await_reachable(config.cluster(alias), 600)  # not waited for past the grace
        assert info.value.cause == "closed"
        message = str(info.value)
        assert re.match(rf"cluster '{alias}' \(127\.0\.0\.1:\d+\) is not reachable: a broker "
                        r"answered but the connection failed before any request \(", message)
        assert message.endswith(f"its listener speaks another protocol than "
                                f"'{alias}.security.protocol' ({protocol}) says; check it and "
                                "the cluster's ssl.* settings")


def test_a_cluster_that_refuses_the_credentials_fails_a_wait_at_once(
        secure, tmp_path: Path) -> None:
    """A broker that answers and refuses the password is no restart: a task's wait for its
    cluster (600 s here) ends at its first check, naming the cluster and the refusal."""
    from mirrorflow.config.loader import load_config
    from mirrorflow.kafka.clients import ClusterUnreachableError
    from mirrorflow.kafka.reachability import await_reachable

    brokers, ca = secure
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="mirror" password="not-the-password";')
    path = tmp_path / "mm2.properties"
    path.write_text(f"clusters = w\nw.bootstrap.servers = {brokers['a'].bootstrap}\n"
                    f"w.security.protocol = SASL_SSL\nw.sasl.mechanism = {SCRAM}\n"
                    f"w.sasl.jaas.config = {jaas}\nw.ssl.truststore.type = PEM\n"
                    f"w.ssl.truststore.location = {ca}\n")
    with pytest.raises(ClusterUnreachableError,
                       match=r"^cluster 'w' \(127\.0\.0\.1:\d+\) is not reachable: .*"
                             r"Authentication failed") as info:
        await_reachable(load_config(path).cluster("w"), 600)
    assert info.value.cause == "refused"
    assert "not-the-password" not in str(info.value)


@pytest.mark.spark
def test_without_transactional_id_grants_a_run_says_it_was_at_least_once(
        secure, spark, tmp_path: Path, capsys) -> None:
    """The documented ACLs minus the TransactionalId ones (for alice): `config check
    --connect` says so before any run; with exactly.once.support = requested the run
    writes every record once and its report, metrics and status page say at-least-once;
    with required, it refuses by name and writes nothing."""
    import json

    from mirrorflow.airflow import status
    from mirrorflow.cli import main
    from mirrorflow.quality import metrics, reports
    from mirrorflow.state_fence import TransactionsRefusedError

    brokers, ca = secure
    a, b = brokers["a"].bootstrap, brokers["b"].bootstrap
    admin_a = AdminClient({"bootstrap.servers": a, **client(ca, "admin")})
    admin_b = AdminClient({"bootstrap.servers": b, **client(ca, "admin")})
    admin_a.create_topics([NewTopic("refunds", 1, 1)])["refunds"].result(30)
    producer = Producer({"bootstrap.servers": a, **client(ca, "admin")})
    for i in range(30):
        producer.produce("refunds", key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0

    grant(admin_a, "alice", mirror_acls_on_source(["refunds"], "b"))
    grant(admin_b, "alice", [x for x in mirror_acls_on_target("a") if x.restype != TXN])
    lines = flow_lines("alice", a, b, ca, "refunds")
    path = tmp_path / "mm2.properties"
    path.write_text("\n".join(lines) + "\n")

    assert main(["config", "check", "--connect", str(path)]) == 0
    said = capsys.readouterr().out.splitlines()[-1]
    assert said.startswith("a->b: cluster 'b' refuses the flow's transactions (")
    assert said.endswith("runs write at-least-once (exactly.once.support = requested); grant "
                         "WRITE and DESCRIBE on the TransactionalId prefix 'mirrorflow|' "
                         "(docs/security.md)")

    result = run_cycle(path, "a->b", spark=spark)

    assert result.records == 30 and result.validation["success"]
    assert result.delivery["exactly_once"] is False
    assert [p.exactly_once for p in result.partitions] == [False]
    assert any(r.startswith("cluster 'b' refuses transactions: ")
               for r in result.delivery["reasons"]), result.delivery
    summary = reports.read("a->b", result.run_id)
    assert reports.render(summary).splitlines()[2].startswith(
        "delivery: AT-LEAST-ONCE, not exactly-once: ")
    assert ('mirrorflow_exactly_once{flow="a->b",source="a",target="b",topic="refunds",'
            'partition="0"} 0') in metrics.exposition(["a->b"])
    assert ">at-least-once</span>" in status.page(shown=["a->b"])
    reader = Consumer({"bootstrap.servers": b, "group.id": "check-refunds",
                       **client(ca, "admin"), "enable.auto.commit": False})
    assert reader.get_watermark_offsets(TopicPartition("a.refunds", 0), 10)[1] == 30
    reader.close()
    assert json.loads(result.to_json())["delivery"]["exactly_once"] is False  # the run's JSON

    path.write_text("\n".join([*lines, "exactly.once.support = required"]) + "\n")
    assert main(["config", "check", "--connect", str(path)]) == 1
    assert "runs fail (exactly.once.support = required)" in capsys.readouterr().out
    with pytest.raises(TransactionsRefusedError, match=r"^flow a->b: exactly\.once\.support = "
                       r"required, but cluster 'b' refuses the flow's transactions "
                       r"\(mirrorflow\|a->b\|state: "):
        run_cycle(path, "a->b", spark=spark)


@pytest.mark.spark
def test_an_at_least_once_run_raises_the_remote_limit_before_writing_a_larger_record(
        secure, spark, tmp_path: Path) -> None:
    """Written at-least-once (no TransactionalId grants), a record larger than its remote
    topic's max.message.bytes and within the source's: the remote limit is raised to the
    source's before anything is written, so no chunk is refused part-way and written
    again; every record is on the target once, in order, and proven."""
    brokers, ca = secure
    a, b = brokers["a"].bootstrap, brokers["b"].bootstrap
    admin_a = AdminClient({"bootstrap.servers": a, **client(ca, "admin")})
    admin_b = AdminClient({"bootstrap.servers": b, **client(ca, "admin")})
    admin_a.create_topics([NewTopic("credits", 1, 1, config={
        "max.message.bytes": "200000"})])["credits"].result(30)
    admin_b.create_topics([NewTopic("a.credits", 1, 1, config={
        "max.message.bytes": "100000"})])["a.credits"].result(30)
    values = [f"v{i}".encode() for i in range(3)] + [b"x" * 150_000] \
        + [f"v{i}".encode() for i in range(4, 7)]
    producer = Producer({"bootstrap.servers": a, **client(ca, "admin"), "linger.ms": 0})
    for i, value in enumerate(values):
        producer.produce("credits", key=f"k{i}".encode(), value=value)
        producer.flush(30)  # each record a batch of its own
    grant(admin_a, "alice", mirror_acls_on_source(["credits"], "b"))
    grant(admin_b, "alice", [x for x in mirror_acls_on_target("a") if x.restype != TXN])
    path = tmp_path / "mm2.properties"
    path.write_text("\n".join(flow_lines("alice", a, b, ca, "credits")) + "\n")

    result = run_cycle(path, "a->b", spark=spark)

    assert result.delivery["exactly_once"] is False
    assert result.records == 7 and result.validation["success"], result.validation
    (entries,) = [f.result(30) for f in
                  admin_b.describe_configs([_topic_resource("a.credits")]).values()]
    assert entries["max.message.bytes"].value == "200000"
    reader = Consumer({"bootstrap.servers": b, "group.id": "check-credits",
                       **client(ca, "admin"), "enable.auto.commit": False})
    reader.assign([TopicPartition("a.credits", 0, 0)])
    got = []
    while len(got) < 7:
        msg = reader.poll(10)
        assert msg is not None and msg.error() is None, msg and msg.error()
        got.append(msg.value())
    assert reader.get_watermark_offsets(TopicPartition("a.credits", 0), 10) == (0, 7)
    reader.close()
    assert got == values


@pytest.mark.spark
@pytest.mark.airflow
def test_a_write_slot_refused_its_transactions_fails_a_submitted_job_by_name(
        secure, airflow_db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture) -> None:
    """exactly.once.support = required, and cluster b grants bob the flow's state
    transactional id but not its write slots': the Spark job's writer (spark-submit to
    local[*]) refuses by name, as the CLI's one error line and as the Airflow mirror
    task's TransactionsRefusedError, naming the driver's log; nothing is written or
    committed."""
    from helpers.failed_jobs import airflow_error, cli_error, driver_log
    from mirrorflow.config.loader import load_config
    from mirrorflow.source.offsets import OffsetStore
    from mirrorflow.state_fence import TransactionsRefusedError

    brokers, ca = secure
    a, b = brokers["a"].bootstrap, brokers["b"].bootstrap
    admin_a = AdminClient({"bootstrap.servers": a, **client(ca, "admin")})
    admin_b = AdminClient({"bootstrap.servers": b, **client(ca, "admin")})
    admin_a.create_topics([NewTopic("invoices", 1, 1)])["invoices"].result(30)
    producer = Producer({"bootstrap.servers": a, **client(ca, "admin")})
    for i in range(20):
        producer.produce("invoices", key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    grant(admin_a, "bob", mirror_acls_on_source(["invoices"], "b"))
    grant(admin_b, "bob", [x for x in mirror_acls_on_target("a") if x.restype != TXN]
          + allow("mirror", TXN, "mirrorflow|a->b|state", LITERAL, Op.WRITE, Op.DESCRIBE))
    path = tmp_path / "mm2.properties"
    path.write_text("\n".join([*flow_lines("bob", a, b, ca, "invoices"),
                               "exactly.once.support = required"]) + "\n")
    refused = (r"^flow a->b: exactly\.once\.support = required, but cluster 'b' refuses the "
               r"flow's transactions \(mirrorflow\|a->b\|write-0, writing invoices\[0\] -> "
               r"a\.invoices\[0\]: TransactionalIdAuthorizationException: [^)]*\); nothing was "
               r"written; grant WRITE and DESCRIBE on the TransactionalId prefix 'mirrorflow\|' "
               r"\(docs/security\.md\) \(driver log: .*\)$")

    said = cli_error(path, "a->b", "refused")
    assert re.match(refused, said), said
    assert said.split(" (driver log: ")[0] in driver_log(said).read_text()

    monkeypatch.setenv("MIRRORFLOW_CONFIG", str(path))
    raised, _ = airflow_error("mirror__a__b", TransactionsRefusedError, capfd)
    assert re.match(refused, raised), raised

    reader = Consumer({"bootstrap.servers": b, "group.id": "check-invoices",
                       **client(ca, "admin"), "enable.auto.commit": False})
    assert reader.get_watermark_offsets(TopicPartition("a.invoices", 0), 10) == (0, 0)
    reader.close()
    # (The module's brokers keep the other tests' flows of a->b: their positions stay.)
    assert ("invoices", 0) not in OffsetStore(load_config(path).cluster("b"), "a").positions()
