"""One side's schema registry, through confluent-kafka's ``SchemaRegistryClient`` (the
client users have, so a Confluent or Apicurio registry works unchanged), with every
failure as one line naming the registry's address (its credentials left out)."""

from __future__ import annotations

import re
from typing import Any

from mirrorflow.config.model import ClusterConfig
from mirrorflow.config.secrets import resolve
from mirrorflow.config.transforms import RegistrySide, SchemaTransfer
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients

REQUEST_TIMEOUT_S = 10
RETRIES = 2
SUBJECT_NOT_FOUND = 40401
NO_SUBJECT_CONFIG = 40408


class SchemaTransferError(MirrorflowError):
    """The transfer cannot go on; the message names the registry, subject, schema id or
    record at fault."""


def shown(url: str) -> str:
    """``url`` without credentials (``http://user:pass@host`` -> ``http://host``)."""
    return re.sub(r"//[^/@]*@", "//", url)


class Registry:
    """A registry (``role``: ``source`` or ``target``) of a flow's transfer."""

    def __init__(self, side: RegistrySide, cluster: ClusterConfig, role: str,
                 capacity: int = 100):
        self.side, self.role = side, role
        self.where = f"the {role} schema registry at {shown(side.url)}"
        conf: dict[str, Any] = {"url": side.url, "cache.capacity": capacity,
                                "timeout": REQUEST_TIMEOUT_S, "max.retries": RETRIES}
        if side.credentials_source == "USER_INFO" and side.user_info:
            conf["basic.auth.user.info"] = resolve(side.user_info, cluster.providers)
        elif side.credentials_source == "SASL_INHERIT":  # the cluster's SASL login
            sasl = clients.client_config(cluster, "consumer")
            conf["basic.auth.user.info"] = (f"{sasl.get('sasl.username', '')}:"
                                            f"{sasl.get('sasl.password', '')}")
        self._conf = conf
        self._client = None

    @property
    def client(self):
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            try:
                self._client = SchemaRegistryClient(self._conf)
            except (ValueError, TypeError) as exc:
                raise SchemaTransferError(f"{self.where}: {exc}") from None
        return self._client

    def call(self, what: str, method: str, *args):
        """``client.method(*args)``; a refusal or silence is a :class:`SchemaTransferError`
        saying ``what`` was asked."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return getattr(self.client, method)(*args)
        except SchemaRegistryError as exc:
            raise RegistryRefusedError(f"{self.where} refused {what}: {exc.error_message} (HTTP "
                                  f"{exc.http_status_code}, error {exc.error_code})",
                                  exc.error_code) from None
        except Exception as exc:  # httpx's transport errors: no answer
            reason = shown(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
            raise SchemaTransferError(f"{self.where} does not answer ({what}): "
                                      f"{reason}") from None

    def schema(self, schema_id: int):
        """The schema with this id (confluent-kafka's ``Schema``)."""
        return self.call(f"schema id {schema_id}", "get_schema", schema_id)

    def version(self, subject: str, version: int):
        return self.call(f"version {version} of subject {subject!r}", "get_version",
                         subject, version)

    def has_subject(self, subject: str) -> bool:
        try:
            self.call(f"the versions of subject {subject!r}", "get_versions", subject)
        except RegistryRefusedError as exc:
            if exc.code == SUBJECT_NOT_FOUND:
                return False
            raise
        return True

    def compatibility(self, subject: str) -> str | None:
        """The subject's own compatibility level; None when it has none (the global
        level applies)."""
        try:
            return self.call(f"the compatibility of subject {subject!r}",
                             "get_compatibility", subject)
        except RegistryRefusedError as exc:
            if exc.code in (NO_SUBJECT_CONFIG, SUBJECT_NOT_FOUND):
                return None
            raise

    def set_compatibility(self, subject: str, level: str) -> None:
        self.call(f"compatibility {level} for subject {subject!r}", "set_compatibility",
                  subject, level)

    def register(self, subject: str, schema, source_id: int):
        """Register ``schema`` under ``subject``; its ``RegisteredSchema`` (id, version)."""
        what = f"the schema of source id {source_id} under subject {subject!r}"
        self.call(what, "register_schema", subject, schema)
        return self.call(what, "lookup_schema", subject, schema)


def registries(transfer: SchemaTransfer, source: ClusterConfig,
               target: ClusterConfig) -> tuple[Registry, Registry]:
    """A flow's two registries: the transfer's source and target sides."""
    return (Registry(transfer.source, source, "source", transfer.capacity),
            Registry(transfer.target, target, "target", transfer.capacity))


class RegistryRefusedError(SchemaTransferError):
    """The registry answered with an error (its Confluent error code in ``code``)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code
