"""The schema registry transfer of one write task: for each key (when
``transfer.message.keys``) and value in Confluent's wire format, the target registry's id
of the record's schema replaces the source's, as the SMT does under MM2 (see
docs/schemas.md), and nothing else of the record changes.

A source id is mapped once: fetched from the source registry, its references registered
first (under their own subjects, recursively), the source subject's compatibility level
set on a target subject the transfer creates, then registered under the subject the
flow's strategy gives for the *remote* topic. Mappings the flow already stored are used
without a registry call; new ones go into the writer's next transaction
(:mod:`mirrorflow.schema.mapping`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from mirrorflow.config.model import ClusterConfig
from mirrorflow.config.transforms import SchemaTransfer
from mirrorflow.schema import subjects, wire
from mirrorflow.schema.mapping import IdMapping, MappingKey
from mirrorflow.schema.registries import SchemaTransferError, registries

log = logging.getLogger(__name__)

# Mappings this process made for a plan: Spark reuses its Python workers across tasks, so
# the write tasks of a plan that one worker runs one after another ask the registries once
# between them. Only the newest plan's are kept: a registry replaced under a flow misleads
# no later run (the proof would catch it, but the run would fail).
_MADE: dict[str, dict[MappingKey, IdMapping]] = {}


class IdMapper:
    """Maps and rewrites the schema ids of the batches one write task writes."""

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
        self.uncommitted: list[IdMapping] = []  # new, not yet in a committed transaction
        # A reference's source (subject, version) -> its version in the target registry.
        self._references: dict[tuple[str, int], int] = {}

    def apply(self, batch, topic: str, remote_topic: str) -> tuple[object, set[tuple[str, int]]]:
        """The batch (one source partition's records) with its schema ids mapped, and the
        (part, source id) pairs it holds; a key or value not in the wire format fails,
        naming its offset."""
        import pyarrow as pa

        if self.exempt(topic):
            return batch, set()
        used: set[tuple[str, int]] = set()
        columns = {}
        for part in self.transfer.fields:
            column = batch.column(part)
            ids, is_wire, null = wire.schema_ids(column)
            bad = ~(is_wire | null)
            if bad.any():
                self._refuse(batch, part, int(np.argmax(bad)), topic)
            distinct = np.unique(ids[is_wire])
            if not len(distinct):
                continue
            targets = np.array([self.mapping(topic, remote_topic, part, int(i)).target_id
                                for i in distinct], dtype=np.int64)
            new_ids = targets[np.searchsorted(distinct, ids.clip(min=distinct[0]))]
            columns[part] = wire.rewrite(column, new_ids, is_wire)
            used.update((part, int(i)) for i in distinct)
        if not columns:
            return batch, used
        arrays = [columns.get(name, batch.column(i)) for i, name in enumerate(batch.schema.names)]
        return pa.RecordBatch.from_arrays(arrays, schema=batch.schema), used

    def _refuse(self, batch, part: str, index: int, topic: str) -> None:
        value = batch.column(part)[index].as_py()
        offset = batch.column("offset")[index].as_py()
        partition = batch.column("partition")[index].as_py()
        why = (f"{len(value)} bytes" if len(value) < wire.HEADER
               else f"its first byte is {value[0]}, not 0")
        raise SchemaTransferError(
            f"source {topic}[{partition}] offset {offset}: the record's {part} is not in "
            f"Confluent's wire format ({why}), so the schema registry transfer "
            f"{self.transfer.name!r} of flow {self.flow_name} cannot map its schema id; "
            f"nothing from it on is written and the flow's positions stay where they were"
            + (" (set transfer.message.keys = false to copy keys as they are)"
               if part == "key" else ""))

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

    def committed(self) -> None:
        """The writer's transaction with the new mappings committed."""
        self.uncommitted = []

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
