"""Secrets from config providers (Airflow connections, files, environment), resolved late."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.kafka import config_file, create_topic
from mirrorflow import clients
from mirrorflow.cli import main
from mirrorflow.config import ConfigError, load_config, parse_config
from mirrorflow.plan import build_plan
from mirrorflow.secrets import SecretError

SECRET = "pl4nted-s3cret"
PROVIDERS = """
config.providers = airflow, file, env
config.providers.airflow.class = mirrorflow.secrets.AirflowConnectionConfigProvider
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
    assert SECRET not in json.dumps([mirror.application_args, mirror.conf, dag.doc_md])


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
