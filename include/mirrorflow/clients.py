"""Kafka clients (confluent-kafka / librdkafka) built from a cluster's MM2 settings.

MM2 configs are written for the Java client. librdkafka shares most property names;
the ones it spells differently are translated here, and Java-only ones it cannot use
are dropped with a log line naming them, so that one file serves both.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from mirrorflow.config import ClusterConfig

log = logging.getLogger(__name__)

# Java client settings with no librdkafka counterpart (serializers are fixed to bytes here;
# JKS stores are Java-only: librdkafka takes PEM files via ssl.ca.location and friends).
_JAVA_ONLY = re.compile(
    r"^(key\.(de)?serializer|value\.(de)?serializer|buffer\.memory|"
    r"ssl\.(truststore|keystore)\..+|ssl\.(trustmanager|keymanager)\.algorithm|"
    r"ssl\.protocol|ssl\.provider|sasl\.login\.class|sasl\.client\.callback\.handler\.class|"
    r"sasl\.login\.callback\.handler\.class|interceptor\.classes|metric\.reporters|"
    r"default\.api\.timeout\.ms|retry\.backoff\.max\.ms|client\.dns\.lookup|"
    r"exclude\.internal\.topics|auto\.include\.jmx\.reporter)$"
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def librdkafka_config(props: dict[str, str]) -> dict[str, Any]:
    """Translate Java client properties into librdkafka's."""
    out: dict[str, Any] = {}
    dropped = []
    for key, value in props.items():
        if key == "sasl.jaas.config":
            out.update(_from_jaas(value))
        elif _JAVA_ONLY.match(key):
            dropped.append(key)
        else:
            out[key] = value
    if dropped:
        log.info("Java-only client settings not used by librdkafka: %s", ", ".join(dropped))
    return out


def _from_jaas(jaas: str) -> dict[str, str]:
    """username/password from a PLAIN or SCRAM JAAS line; OAUTHBEARER is configured natively."""
    options = dict(_JAAS_OPTION.findall(jaas))
    out = {}
    if "username" in options:
        out["sasl.username"] = options["username"]
    if "password" in options:
        out["sasl.password"] = options["password"]
    return out


def client_config(cluster: ClusterConfig, role: str, **extra: Any) -> dict[str, Any]:
    """Full librdkafka config for a role on a cluster (extra settings win), with
    ``${provider:path:key}`` secrets resolved (errors name the property, not the value)."""
    from mirrorflow.secrets import SecretError, resolve

    resolved = {}
    for key, value in cluster.client_config(role).items():
        try:
            resolved[key] = resolve(value, cluster.providers)
        except SecretError as exc:
            raise SecretError(f"cluster {cluster.alias!r}, {role} setting {key!r}: {exc}") from None
    config = librdkafka_config(resolved)
    config.update(extra)
    return config


def admin_client(cluster: ClusterConfig, **extra: Any):
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(cluster, "admin", **extra))


def producer(cluster: ClusterConfig, **extra: Any):
    from confluent_kafka import Producer

    return Producer(client_config(cluster, "producer", **extra))


def consumer(cluster: ClusterConfig, **extra: Any):
    from confluent_kafka import Consumer

    extra.setdefault("group.id", "mirrorflow-reader")
    extra.setdefault("enable.auto.commit", False)
    return Consumer(client_config(cluster, "consumer", **extra))


def ensure_topic(cluster: ClusterConfig, topic: str, partitions: int,
                 replication_factor: int = 1, timeout: float = 15.0,
                 config: dict[str, str] | None = None) -> bool:
    """Create ``topic`` unless it exists. Returns True when this call created it."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin_client(cluster)
    if topic in admin.list_topics(timeout=timeout).topics:
        return False
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                  config=config or {})],
        operation_timeout=timeout,
    )[topic]
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True
