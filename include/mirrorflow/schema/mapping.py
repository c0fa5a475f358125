"""The flow's schema-id mappings: which target registry id a source id became, per remote
topic and record part. Stored with the plans (``mirrorflow-plans.{source}.internal``, one
compacted record per mapping), written by the write task in the transaction of the first
records that carry the new id, so a committed record's mapping is always on record: a
retry of the plan, and every later run, reuse it instead of asking the registries."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

PREFIX = b"schema/"

MappingKey = tuple[str, str, int]  # remote topic, record part (key or value), source id


@dataclass(frozen=True)
class IdMapping:
    """Source schema id -> target schema id, for one remote topic's keys or values."""

    remote_topic: str
    part: str  # "key" or "value"
    source_id: int
    target_id: int
    subject: str
    version: int
    schema_type: str = "AVRO"

    @property
    def ident(self) -> MappingKey:
        return self.remote_topic, self.part, self.source_id

    def key(self) -> bytes:
        return PREFIX + f"{self.remote_topic}/{self.part}/{self.source_id}".encode()

    def value(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> IdMapping:
        return cls(**json.loads(value))


def stored(entries: dict[bytes, bytes]) -> dict[MappingKey, IdMapping]:
    """The mappings among a plans topic's entries (malformed ones are left out: the
    writer then asks the registries again, which answer the same)."""
    out = {}
    for key, value in entries.items():
        if key.startswith(PREFIX) and value is not None:
            try:
                mapping = IdMapping.decode(value)
            except (ValueError, TypeError):
                continue
            out[mapping.ident] = mapping
    return out


@dataclass(frozen=True)
class ProofView:
    """How the proof compares a transferred flow's records: each target record with its
    target id mapped back to the source id (``back``), and each source record as it is,
    except where two source ids with equal schemas became one target id: the smaller
    source id then stands for both, on both sides (``same``), and the writer's digests of
    those topics (taken from the source bytes) are not used. Per record part, keyed
    ``(remote topic, id)``. ``headers``: whether the transfer kept them."""

    back: dict[str, dict[tuple[str, int], int]]
    same: dict[str, dict[tuple[str, int], int]]
    headers: bool = True

    @classmethod
    def of(cls, mappings: dict[MappingKey, IdMapping], headers: bool = True) -> ProofView:
        back: dict[str, dict] = {"key": {}, "value": {}}
        same: dict[str, dict] = {"key": {}, "value": {}}
        for m in sorted(mappings.values(), key=lambda m: m.source_id):
            first = back[m.part].setdefault((m.remote_topic, m.target_id), m.source_id)
            if first != m.source_id:
                same[m.part][(m.remote_topic, m.source_id)] = first
        return cls(back, same, headers)

    @property
    def ambiguous(self) -> set[str]:
        """Remote topics with two source ids mapped to one target id."""
        return {topic for part in self.same.values() for topic, _ in part}
