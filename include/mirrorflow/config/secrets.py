"""Config providers: secrets as ``${provider:path:key}`` placeholders, as Kafka has them.

Declared the Kafka way, at the top of the config::

    config.providers = airflow, file, env
    config.providers.airflow.class = mirrorflow.config.secrets.AirflowConnectionConfigProvider
    config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider

    a.sasl.password = ${airflow:kafka_a:password}     # Airflow connection kafka_a
    a.ssl.key.password = ${file:/etc/kafka/secrets.properties:key.password}
    b.sasl.password = ${env:KAFKA_B_PASSWORD}

Placeholders are resolved only when a Kafka client is created (in a task or a Spark
worker), never while a DAG file is parsed, and resolved values never appear in messages.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from mirrorflow.errors import MirrorflowError

# org.apache.kafka.common.config.ConfigTransformer.DEFAULT_PATTERN
PLACEHOLDER = re.compile(r"\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}")
PROVIDER_CLASSES = {
    "org.apache.kafka.common.config.provider.FileConfigProvider": "file",
    "org.apache.kafka.common.config.provider.EnvVarConfigProvider": "env",
    "mirrorflow.config.secrets.AirflowConnectionConfigProvider": "airflow",
}
AIRFLOW_FIELDS = ("login", "password", "host", "port", "schema")


class SecretError(MirrorflowError):
    """A placeholder cannot be resolved; the message names it, never a secret."""


def placeholders(value: str) -> list[str]:
    """The provider names a value refers to."""
    return [m.group(1) for m in PLACEHOLDER.finditer(value)]


def resolve(value: str, providers: Mapping[str, str]) -> str:
    """Replace every placeholder of ``value`` (providers: name -> kind)."""
    def lookup(match: re.Match[str]) -> str:
        name, path, key = match.group(1), match.group(2) or "", match.group(3)
        kind = providers.get(name)
        if kind == "env":
            return _env(key)
        if kind == "file":
            return _file(path, key)
        if kind == "airflow":
            return _airflow(path, key)
        raise SecretError(f"placeholder {match.group(0)!r} names provider {name!r}, which "
                          "config.providers does not declare")

    return PLACEHOLDER.sub(lookup, value)


def _env(key: str) -> str:
    try:
        return os.environ[key]
    except KeyError:
        raise SecretError(f"environment variable {key!r} is not set") from None


def _file(path: str, key: str) -> str:
    from mirrorflow.config.properties import load_properties

    try:
        entries = {e.key: e.value for e in load_properties(path)}
    except OSError as exc:
        raise SecretError(f"cannot read secrets file {path!r}: {exc.strerror}") from None
    if key not in entries:
        raise SecretError(f"secrets file {path!r} has no key {key!r}")
    return entries[key]


def _airflow(conn_id: str, field: str) -> str:
    """A field of an Airflow connection: login, password, host, port, schema, extra.<key>."""
    from airflow.sdk import Connection

    try:
        connection = Connection.get(conn_id)
    except Exception as exc:
        raise SecretError(f"Airflow connection {conn_id!r} is not available: "
                          f"{type(exc).__name__}") from None
    if field.startswith("extra."):
        value = connection.extra_dejson.get(field[len("extra."):])
    elif field in AIRFLOW_FIELDS:
        value = getattr(connection, field)
    else:
        raise SecretError(f"Airflow connection field {field!r} is not one of "
                          f"{', '.join(AIRFLOW_FIELDS)} or extra.<key>")
    if value is None:
        raise SecretError(f"Airflow connection {conn_id!r} has no {field}")
    return str(value)
