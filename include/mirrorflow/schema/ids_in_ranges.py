"""The schema registry transfer's mappings, made on the driver before the write.

The records never enter Python: a scan of the ranges to write, in the JVM (the range
source's ``schemaIdScan``: a row per partition and part, no row per record), finds the
schema ids their keys and values carry and the first record of each partition that is not
in Confluent's wire format. The driver maps each id once
(:class:`~mirrorflow.schema.transfer.IdMapper`: the source registry's schema, registered
under the remote topic's subject in the target registry), stores the new mappings with the
plan (fenced, before any record is written under them), and hands the writers in the JVM
the table of ids to rewrite (:func:`rewrite_table`): bytes 1-4 of each key or value, and
nothing else of the record, as the SMT does under MM2.

The scan is a second read of the source. A flow whose stored mappings cover every topic
of its plan skips it: the writers get the stored table
(:func:`stored_table`) and refuse a record it lacks (a new schema version, a record not in
the wire format: ``SchemaIds.UNMAPPED``), and only then does the driver scan, map or refuse
by name, and write again, the plan's transactions fencing what the refused write left.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mirrorflow.config.model import ClusterConfig
from mirrorflow.config.transforms import SchemaTransfer
from mirrorflow.schema.mapping import IdMapping, MappingKey
from mirrorflow.schema.registries import SchemaTransferError
from mirrorflow.schema.wire import HEADER

TopicPart = tuple[str, int]
# In a writer's refusal of a record the table it was given lacks (SchemaIds.UNMAPPED).
UNMAPPED = "not mapped for the schema registry transfer"


@dataclass
class FoundIds:
    """What the ranges of one source partition hold, per record part (``key``,
    ``value``): the schema ids, and the first record not in the wire format (its offset,
    length and first byte)."""

    ids: dict[str, set[int]] = field(default_factory=dict)
    refused: dict[str, tuple[int, int, int | None]] = field(default_factory=dict)


def find_ids(spark, source: ClusterConfig, groups: Sequence[Sequence[tuple[str, int, int, int]]],
             transfer: SchemaTransfer, exempt: Callable[[str], bool]) -> dict[TopicPart, FoundIds]:
    """Per source partition of ``groups`` (the write slots' reads), the ids its records
    carry; topics ``exempt`` (the heartbeats) are never transferred."""
    from mirrorflow.spark.kafka_source import read_groups

    kept = [[r for r in group if not exempt(r[0])] for group in groups]
    kept = [group for group in kept if group]
    if not kept:
        return {}
    out: dict[TopicPart, FoundIds] = {}
    for row in read_groups(spark, source, kept, id_scan=transfer.fields, coalesce=True).collect():
        found = out.setdefault((row["topic"], row["partition"]), FoundIds())
        part = row["part"]
        found.ids.setdefault(part, set()).update(int(i) for i in row["ids"])
        refused = (row["refused_offset"], row["refused_length"], row["refused_first"])
        if refused[0] is not None and (part not in found.refused
                                       or refused[0] < found.refused[part][0]):
            found.refused[part] = refused
    return out


def refuse(found: dict[TopicPart, FoundIds], transfer: SchemaTransfer, flow_name: str) -> None:
    """Fail on the first record not in the wire format, naming it, before anything of the
    plan is written."""
    for (topic, partition), ids in sorted(found.items()):
        for part, (offset, length, first) in sorted(ids.refused.items()):
            why = f"{length} bytes" if length < HEADER else f"its first byte is {first}, not 0"
            raise SchemaTransferError(
                f"source {topic}[{partition}] offset {offset}: the record's {part} is not in "
                f"Confluent's wire format ({why}), so the schema registry transfer "
                f"{transfer.name!r} of flow {flow_name} cannot map its schema id; nothing "
                f"from it on is written and the flow's positions stay where they were"
                + (" (set transfer.message.keys = false to copy keys as they are)"
                   if part == "key" else ""))


def rewrite_table(mapper, found: dict[TopicPart, FoundIds], remote_of: dict[str, str]
                  ) -> dict[str, dict[str, dict[str, int]]]:
    """``{remote topic: {part: {source id: target id}}}`` for the writers, each id mapped
    (stored, or transferred now: :meth:`IdMapper.mapping`)."""
    table: dict[str, dict[str, dict[str, int]]] = {}
    for (topic, _), ids in sorted(found.items()):
        remote = remote_of[topic]
        for part, values in ids.ids.items():
            for source_id in sorted(values):
                target = mapper.mapping(topic, remote, part, source_id).target_id
                table.setdefault(remote, {}).setdefault(part, {})[str(source_id)] = target
    return table


def stored_table(stored: dict[MappingKey, IdMapping], remote_topics: set[str],
                 fields: tuple[str, ...]) -> dict[str, dict[str, dict[str, int]]] | None:
    """The writers' table of the stored mappings of ``remote_topics``, every transferred
    part of each in it (empty where none is stored: its ids are then refused, as unknown);
    None where a topic has no stored mapping at all (a flow's first run of it), which
    is scanned instead."""
    table: dict[str, dict[str, dict[str, int]]] = {
        topic: {part: {} for part in fields} for topic in remote_topics}
    for (topic, part, source_id), found in stored.items():
        if topic in table and part in table[topic]:
            table[topic][part][str(source_id)] = found.target_id
    if any(not any(parts.values()) for parts in table.values()):
        return None
    return table
