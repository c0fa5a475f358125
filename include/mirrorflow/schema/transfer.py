"""The schema registry transfer's id mappings, made on the driver: for each key (when
``transfer.message.keys``) and value in Confluent's wire format, the target registry's id
of the record's schema replaces the source's, as the SMT does under MM2 (see
docs/schemas.md), and nothing else of the record changes; the JVM writers rewrite the
ids (:mod:`mirrorflow.schema.ids_in_ranges`).

A source id is mapped once: fetched from the source registry, its references registered
first (under their own subjects, recursively), the source subject's compatibility level
set on a target subject the transfer creates, then registered under the subject the
flow's strategy gives for the *remote* topic. Mappings the flow already stored are used
without a registry call; new ones are stored with the plan before the write
(:mod:`mirrorflow.schema.mapping`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mirrorflow.config.model import ClusterConfig
from mirrorflow.config.transforms import SchemaTransfer
from mirrorflow.schema import subjects
from mirrorflow.schema.mapping import IdMapping, MappingKey
from mirrorflow.schema.registries import SchemaTransferError, registries

log = logging.getLogger(__name__)

# Mappings this process made for a plan: a retried mirror of the plan in the same process
# asks the registries once. Only the newest plan's are kept: a registry replaced under a
# flow misleads no later run (the proof would catch it, but the run would fail).
_MADE: dict[str, dict[MappingKey, IdMapping]] = {}


class IdMapper:
    """Maps the schema ids of a plan's records (source id -> target registry id)."""

    def __init__(self, transfer: SchemaTransfer, flow_name: str, source: ClusterConfig,
                 target: ClusterConfig, known: dict[MappingKey, IdMapping],
                 exempt: Callable[[str], bool], plan_id: str = ""):
        self.transfer, self.flow_name = transfer, flow_name
        self.source, self.target = registries(transfer, source, target)
        self.known = dict(known)
        if plan_id not in _MADE:
            _MADE.clear()
        self._made = _MADE.setdefault(plan_id, {}) if plan_id else {}
        self.exempt = exempt  # source topics never transferred: the heartbeats
        self.uncommitted: list[IdMapping] = []  # new, not yet stored with the plan
        # A reference's source (subject, version) -> its version in the target registry.
        self._references: dict[tuple[str, int], int] = {}

    def mapping(self, topic: str, remote_topic: str, part: str, source_id: int) -> IdMapping:
        """The stored or new mapping of ``source_id`` for the remote topic's ``part``."""
        found = self.known.get((remote_topic, part, source_id))
        if found is None:
            key = (remote_topic, part, source_id)
            found = self._made.get(key) or self._transfer(topic, remote_topic, part, source_id)
            self._made[key] = self.known[found.ident] = found
            self.uncommitted.append(found)
            log.info("schema id %d of %s's %ss is %d in the target registry (%s v%d)",
                     source_id, topic, part, found.target_id, found.subject, found.version)
        return found

    def _transfer(self, topic: str, remote_topic: str, part: str, source_id: int) -> IdMapping:
        from confluent_kafka.schema_registry import Schema

        schema = self.source.schema(source_id)
        kind = schema.schema_type or "AVRO"
        strategy = self.transfer.strategy(part)
        is_key = part == "key"
        try:
            subject = subjects.subject(strategy, remote_topic, is_key, kind, schema.schema_str)
            source_subject = subjects.subject(strategy, topic, is_key, kind, schema.schema_str)
        except subjects.SubjectError as exc:
            raise SchemaTransferError(f"schema id {source_id} of {topic}'s {part}s: {exc}, "
                                      f"so {strategy} gives it no subject") from None
        copied = Schema(schema.schema_str, kind, self._copy_references(schema))
        if not self.target.has_subject(subject):
            level = self.source.compatibility(source_subject)
            if level:
                self.target.set_compatibility(subject, level)
        registered = self.target.register(subject, copied, source_id)
        return IdMapping(remote_topic, part, source_id, registered.schema_id, subject,
                         registered.version, kind)

    def _copy_references(self, schema) -> list:
        """The schema's references, each registered in the target first (under its own
        subject) and pointing at the version it got there."""
        from confluent_kafka.schema_registry import Schema, SchemaReference

        out = []
        for ref in schema.references or []:
            version = self._references.get((ref.subject, ref.version))
            if version is None:
                found = self.source.version(ref.subject, ref.version)
                inner = found.schema
                copied = Schema(inner.schema_str, inner.schema_type or "AVRO",
                                self._copy_references(inner))
                version = self.target.register(ref.subject, copied, found.schema_id).version
                self._references[(ref.subject, ref.version)] = version
            out.append(SchemaReference(ref.name, ref.subject, version))
        return out
