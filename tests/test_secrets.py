"""Secrets from config providers (Airflow connections, files, environment), resolved late."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.kafka import config_file, create_topic
from mirrorflow.cli import main
from mirrorflow.config.errors import ConfigError
from mirrorflow.config.loader import load_config, parse_config
from mirrorflow.config.secrets import SecretError
from mirrorflow.kafka import clients
from mirrorflow.source.plan import build_plan

SECRET = "pl4nted-s3cret"
PROVIDERS = """
config.providers = airflow, file, env
config.providers.airflow.class = mirrorflow.config.secrets.AirflowConnectionConfigProvider
config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
"""


def base(extra: str) -> str:
    return ("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
            "a->b.enabled = true\n" + PROVIDERS + extra)


@pytest.fixture
def airflow_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_A", json.dumps(
        {"conn_type": "kafka", "login": "alice", "password": SECRET,
         "extra": {"token": "t0k"}}))


def test_airflow_connection_secrets_reach_the_client(airflow_connection) -> None:
    config = parse_config(base(
        "a.security.protocol = SASL_SSL\na.sasl.mechanism = PLAIN\n"
        "a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="${airflow:kafka_a:login}" password="${airflow:kafka_a:password}";\n'
        "a.producer.client.id = ${airflow:kafka_a:extra.token}\n"))
    producer = clients.client_config(config.cluster("a"), "producer")
    assert producer["sasl.username"] == "alice" and producer["sasl.password"] == SECRET
    assert producer["client.id"] == "t0k"
    assert "sasl.jaas.config" not in producer


def test_file_and_env_providers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = tmp_path / "secrets.properties"
    secrets.write_text(f"key.password = {SECRET}\n")
    monkeypatch.setenv("B_PASSWORD", SECRET)
    config = parse_config(base(f"a.ssl.key.password = ${{file:{secrets}:key.password}}\n"
                               "b.sasl.password = ${env:B_PASSWORD}\n"))
    assert clients.client_config(config.cluster("a"), "consumer")["ssl.key.password"] == SECRET
    assert clients.client_config(config.cluster("b"), "admin")["sasl.password"] == SECRET


def test_unresolvable_secret_names_the_property_not_a_value(monkeypatch) -> None:
    monkeypatch.delenv("NOPE", raising=False)
    config = parse_config(base("a.sasl.password = ${env:NOPE}\n"))
    with pytest.raises(SecretError, match=r"cluster 'a', producer setting 'sasl\.password': "
                                          r"environment variable 'NOPE' is not set"):
        clients.client_config(config.cluster("a"), "producer")
    with pytest.raises(SecretError, match="connection 'missing' is not available"):
        clients.client_config(parse_config(base("a.sasl.password = ${airflow:missing:password}\n"))
                              .cluster("a"), "producer")


def test_undeclared_or_unknown_providers_fail_at_load() -> None:
    with pytest.raises(ConfigError, match=r"property 'a\.sasl\.password'.*provider 'vault'"):
        parse_config(base("a.sasl.password = ${vault:x:y}\n"))
    with pytest.raises(ConfigError, match=r"property 'config\.providers\.x\.class'"):
        parse_config("clusters = a\na.bootstrap.servers = x:1\nconfig.providers = x\n"
                     "config.providers.x.class = com.acme.Vault\n")


def test_no_secret_in_config_check_or_dag(airflow_connection, tmp_path: Path, repo: Path,
                                          capsys: pytest.CaptureFixture,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(base("a.sasl.password = ${airflow:kafka_a:password}\n"))
    assert main(["config", "check", "--json", str(path)]) == 0
    assert SECRET not in capsys.readouterr().out
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("MIRRORFLOW_CONFIG", str(path))
    dag = DagBag(dag_folder=str(repo / "dags")).dags["mirror__a__b"]
    mirror = dag.get_task("mirror")
    assert SECRET not in json.dumps([vars(mirror).get(k) for k in mirror.template_fields]
                                    + [mirror.config_file, dag.doc_md], default=str)


@pytest.mark.broker
def test_real_clients_use_resolved_settings(two_clusters, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_CLIENT_ID", "mirrorflow-test")
    create_topic(two_clusters["a"], "orders", 1)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "config.providers = env\nconfig.providers.env.class = "
                       "org.apache.kafka.common.config.provider.EnvVarConfigProvider\n"
                       "a.admin.client.id = ${env:MIRROR_CLIENT_ID}\n")
    config = load_config(path)
    assert clients.client_config(config.cluster("a"), "admin")["client.id"] == "mirrorflow-test"
    assert build_plan(config, config.flow("a->b"), "r").flow == "a->b"


# --------------------------------------------------------------------------- security settings

SECURE = """
security.protocol = SASL_SSL
sasl.mechanism = SCRAM-SHA-512
a.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="mirror" password="pl4nted-s3cret";
a.ssl.truststore.type = PEM
a.ssl.truststore.location = /etc/kafka/ca.pem
a.ssl.keystore.type = PKCS12
a.ssl.keystore.location = /etc/kafka/client.p12
a.ssl.keystore.password = pl4nted-s3cret
a.ssl.endpoint.identification.algorithm =
a.consumer.sasl.login.refresh.window.factor = 0.8
b.sasl.mechanism = OAUTHBEARER
b.sasl.oauthbearer.token.endpoint.url = https://idp.example/token
b.sasl.login.callback.handler.class = \\
    org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler
b.sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \\
    required clientId="mirror" clientSecret="pl4nted-s3cret" scope="kafka";
b.admin.sasl.oauthbearer.scope.claim.name = scp
"""


@pytest.mark.parametrize("role", ["producer", "consumer", "admin"])
def test_ssl_and_sasl_settings_reach_every_role(role: str) -> None:
    config = parse_config(base(SECURE))
    a = clients.client_config(config.cluster("a"), role)
    assert {k: a[k] for k in ("security.protocol", "sasl.mechanism", "sasl.username",
                              "sasl.password", "ssl.ca.location", "ssl.keystore.location",
                              "ssl.keystore.password", "ssl.endpoint.identification.algorithm")
            } == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                  "sasl.username": "mirror", "sasl.password": SECRET,
                  "ssl.ca.location": "/etc/kafka/ca.pem",
                  "ssl.keystore.location": "/etc/kafka/client.p12",
                  "ssl.keystore.password": SECRET, "ssl.endpoint.identification.algorithm": "none"}
    b = clients.client_config(config.cluster("b"), role)
    assert {k: v for k, v in b.items() if k.startswith("sasl")} == {
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "mirror", "sasl.oauthbearer.client.secret": SECRET,
        "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token"}
    from confluent_kafka.admin import AdminClient

    AdminClient({**b, "bootstrap.servers": "127.0.0.1:1"})  # librdkafka knows every name


def test_unsecured_oauthbearer_and_kerberos_and_pem_keystores() -> None:
    translate = clients.librdkafka_config
    assert translate({"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                      'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";'}) \
        == {"enable.sasl.oauthbearer.unsecure.jwt": "true",
            "sasl.oauthbearer.config": "principal=alice"}
    assert translate({"sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule '
                      'required useKeyTab=true keyTab="/etc/k.keytab" principal="mm2@EX";'}) \
        == {"sasl.kerberos.keytab": "/etc/k.keytab", "sasl.kerberos.principal": "mm2@EX"}
    assert translate({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem",
                      "ssl.keystore.certificate.chain": "-----BEGIN"}) == {
        "ssl.certificate.location": "/k.pem", "ssl.key.location": "/k.pem",
        "ssl.certificate.pem": "-----BEGIN"}


def test_clients_keep_the_java_clients_reconnect_backoff_unless_the_file_sets_it() -> None:
    """librdkafka backs a lost broker's reconnects off to 10 s, the Java client (MM2's) to
    1 s: a run would find a restarted broker up to 10 s late. A setting in the file wins."""
    config = parse_config(base("".join(f"b.{role}.reconnect.backoff.max.ms = 4000\n"
                                       for role in ("admin", "consumer", "producer"))))
    for role in ("admin", "consumer", "producer"):
        a = clients.client_config(config.cluster("a"), role)
        b = clients.client_config(config.cluster("b"), role)
        assert (a["reconnect.backoff.ms"], a["reconnect.backoff.max.ms"]) == ("50", "1000")
        assert (b["reconnect.backoff.ms"], b["reconnect.backoff.max.ms"]) == ("50", "4000")
    assert "reconnect.backoff.max.ms" not in clients.librdkafka_config({"acks": "all"})


def test_java_spellings_librdkafka_refuses_are_translated_or_dropped() -> None:
    """Settings a Java client takes and librdkafka refuses by name: an MM2 file with them
    builds every client."""
    config = parse_config(base(
        "a.consumer.receive.buffer.bytes = -1\na.consumer.send.buffer.bytes = 131072\n"
        "a.consumer.fetch.max.wait.ms = 100\na.producer.max.block.ms = 60000\n"
        "a.consumer.metrics.num.samples = 2\na.ssl.enabled.protocols = TLSv1.3\n"
        "a.consumer.partition.assignment.strategy = "
        "org.apache.kafka.clients.consumer.RangeAssignor\n"
        "a.producer.max.request.size = 2097152\na.producer.compression.type = zstd\n"
        "a.producer.compression.zstd.level = 7\na.producer.compression.gzip.level = 5\n"
        "a.producer.partitioner.class = org.example.Partitioner\n"))
    from confluent_kafka import Consumer, Producer

    consumer = clients.client_config(config.cluster("a"), "consumer")
    producer = clients.client_config(config.cluster("a"), "producer")
    assert {k: consumer[k] for k in ("socket.receive.buffer.bytes", "socket.send.buffer.bytes",
                                     "fetch.wait.max.ms")} == {
        "socket.receive.buffer.bytes": "0", "socket.send.buffer.bytes": "131072",
        "fetch.wait.max.ms": "100"}
    assert {k: producer[k] for k in ("message.max.bytes", "compression.type",
                                     "compression.level")} == {
        "message.max.bytes": "2097152", "compression.type": "zstd", "compression.level": "7"}
    for dropped in ("max.block.ms", "metrics.num.samples", "ssl.enabled.protocols",
                    "partition.assignment.strategy", "partitioner.class",
                    "compression.gzip.level", "receive.buffer.bytes", "fetch.max.wait.ms"):
        assert dropped not in consumer and dropped not in producer, dropped
    Consumer({**consumer, "group.id": "g"}).close()  # librdkafka knows every name
    Producer(producer).flush(0)


def test_java_key_stores_fail_naming_the_property() -> None:
    config = parse_config(base("a.ssl.truststore.location = /etc/kafka/truststore.jks\n"))
    with pytest.raises(clients.ClientConfigError,
                       match=r"cluster 'a', consumer client: ssl\.truststore\.location is a "
                             r"JKS store, which librdkafka cannot read"):
        clients.client_config(config.cluster("a"), "consumer")


def test_refused_settings_are_reported_without_their_secret_values() -> None:
    def quoting_client(conf: dict):  # as librdkafka quotes a value it refuses
        raise ValueError(f'Invalid value "{conf["sasl.password"]}" for "sasl.password"')

    with pytest.raises(clients.ClientConfigError) as failure:
        clients.new_client(quoting_client, {"sasl.password": SECRET}, "cluster 'a', producer")
    assert str(failure.value) == ("cluster 'a', producer: Invalid value \"[redacted]\" for "
                                  "\"sasl.password\"")


def test_every_kafka_client_is_built_from_the_cluster_settings(repo: Path) -> None:
    """Kafka clients come from :mod:`mirrorflow.kafka.clients` (which applies ``{alias}.*`` and
    ``{alias}.{role}.*``): planner, Spark reader and writer, checkpoints, heartbeats, stores.
    The one exception probes local brokers that mirrorflow itself started."""
    import re

    direct = {path.relative_to(repo).as_posix()
              for path in (repo / "include" / "mirrorflow").rglob("*.py")
              if re.search(r"(?<![\w.])(Producer|Consumer|AdminClient)\(", path.read_text())}
    assert direct == {"include/mirrorflow/dev/localcluster.py"}


@pytest.mark.broker
def test_sasl_against_a_broker_without_it_fails_naming_the_cluster_not_the_secret(
        two_clusters, tmp_path: Path) -> None:
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "a.security.protocol = SASL_PLAINTEXT\na.sasl.mechanism = PLAIN\n"
                       "a.sasl.jaas.config = org.apache.kafka.common.security.plain."
                       f'PlainLoginModule required username="u" password="{SECRET}";\n')
    config = load_config(path)
    with pytest.raises(Exception, match=r"source cluster 'a'") as failure:
        build_plan(config, config.flow("a->b"), "r")
    assert SECRET not in str(failure.value)
