"""The proof's half of a schema transfer: the records were compared with their ids mapped
(:class:`mirrorflow.schema.mapping.ProofView`); here each mapping the run's records use
is checked against both registries: the target's schema for the new id must be the
source's schema for the old one (same type, same text up to JSON formatting, same
references by name and subject). Two lookups per mapping and run, none per record."""

from __future__ import annotations

import json
import re

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.schema.mapping import IdMapping, MappingKey
from mirrorflow.schema.registries import registries


def canonical(schema) -> tuple:
    """What must be equal of a source schema and its copy (``Schema``)."""
    kind = schema.schema_type or "AVRO"
    text = schema.schema_str
    if kind == "PROTOBUF":
        text = re.sub(r"\s+", " ", text).strip()
    else:
        text = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    refs = tuple(sorted((r.name, r.subject) for r in schema.references or []))
    return kind, text, refs


def used_mappings(result: dict, stored: dict[MappingKey, IdMapping]) -> set[MappingKey]:
    """The mappings of the records the run wrote; a range whose records an earlier
    attempt wrote (so its ids are not in this attempt's figures) counts every stored
    mapping of its remote topic."""
    used: set[MappingKey] = set()
    for r in result.get("ranges", []):
        ids = r.get("schema_ids") or []
        used.update((r["remote_topic"], part, int(sid)) for part, sid in ids)
        if r.get("records") and r.get("records_written", 0) < r["records"]:
            used.update(k for k in stored if k[0] == r["remote_topic"])
    return used


def check(config: MirrorConfig, flow: FlowConfig, result: dict,
          stored: dict[MappingKey, IdMapping]) -> tuple[list[dict], list[str]]:
    """(the report's rows: one per mapping the run used, the failures found)."""
    transfer = flow.schema_transfer
    source, target = registries(transfer, config.cluster(flow.source),
                                config.cluster(flow.target))
    rows, failures = [], []
    for key in sorted(used_mappings(result, stored)):
        found = stored.get(key)
        if found is None:
            failures.append(f"{key[0]}: records with source schema id {key[2]} in their "
                            f"{key[1]}s have no stored mapping")
            continue
        rows.append({"remote_topic": found.remote_topic, "part": found.part,
                     "source_id": found.source_id, "target_id": found.target_id,
                     "subject": found.subject, "version": found.version,
                     "schema_type": found.schema_type})
        if canonical(source.schema(found.source_id)) != canonical(target.schema(found.target_id)):
            failures.append(
                f"{found.remote_topic}'s {found.part}s: the target registry's schema id "
                f"{found.target_id} (subject {found.subject!r}) is not the source registry's "
                f"schema id {found.source_id}: the stored mapping no longer holds (was the "
                "target registry replaced?)")
    return rows, failures
