"""What a flow mirrored over time, kept on the target per partition, in
``mirrorflow-history.<source>.internal`` (compacted; written at each commit):

* per remote partition: the remote offsets the flow's records occupy (merged spans, the
  newest :data:`KEEP_SPANS`), how far the completeness check has proven the partition
  (``verified_end``: every record below it was accounted for), and the source position
  committed with that proof (``position``: when the offset store holds another one,
  something else, e.g. MM2 or a reset, moved the flow, and the proof starts afresh);
* per source partition: the offset syncs of every committed plan (the newest
  :data:`KEEP_SYNCS` pairs), so that a consumer group many runs behind is translated
  exactly, whatever compaction did to MM2's offset-syncs topic, which keeps one sync per
  partition.

* per source partition, its **chain** (issue 38): the incarnation of the source topic
  (its topic id, KIP-516) and the offset ``next`` below which every offset of it is
  mirrored or explained by a named break (the newest :data:`KEEP_BREAKS` of them kept
  with it: a new partition or topic, a recreated topic, retention, a reset, a position
  moved outside mirrorflow). Every committed plan extends it; the completeness proof
  checks that the run's plan starts where the chain ends, so a silent gap between what
  was mirrored and what the source had fails the proof.

Other flows read it too: a flow whose remote partition another flow also writes
(fan-in) tells that flow's records from foreign ones by its spans.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mirrorflow.config.model import ClusterConfig
from mirrorflow.kafka import clients
from mirrorflow.kafka.internal_topics import CompactedTopic
from mirrorflow.lease import check_held

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]
# The kinds of entries the history holds, by their keys' prefix: a remote partition's
# (owned), a source partition's syncs and its chain.
OWNED, SYNCS, CHAIN = "owned", "syncs", "chain"
KINDS = (OWNED, SYNCS, CHAIN)
KEEP_SPANS = 1000
KEEP_SYNCS = 2000
KEEP_BREAKS = 50
# Breaks after which a partition's older checkpoints no longer hold.
SUPERSEDING_CAUSES = ("reset", "recreated")
_LEDGER_TOPICS = re.compile(r"mirrorflow-(?:history|spans)\.(.+)\.internal")


def history_topic(source_alias: str) -> str:
    return f"mirrorflow-history.{source_alias}.internal"


@dataclass
class RemotePartition:
    """One remote partition's history for one flow."""

    remote_topic: str
    partition: int
    verified_end: int | None = None
    position: int | None = None
    owned: list[tuple[int, int]] = field(default_factory=list)  # [first, last] remote offsets

    def to_json(self) -> bytes:
        return json.dumps({"verified_end": self.verified_end, "position": self.position,
                           "owned": [list(s) for s in self.owned]},
                          separators=(",", ":")).encode()


@dataclass
class Chain:
    """One source partition's chain: every offset of incarnation ``topic_id`` below
    ``next`` is mirrored or inside one of the named ``breaks`` (dicts of
    :class:`mirrorflow.source.plan_records.Break`)."""

    topic_id: str
    next: int
    breaks: list[dict] = field(default_factory=list)

    def superseded_ms(self) -> int:
        """When the newest reset or recreation of the partition was named (0: never):
        checkpoints emitted before it describe offsets or a remote topic that no longer
        hold."""
        return max((int(b.get("at_ms", 0)) for b in self.breaks
                    if b.get("cause") in SUPERSEDING_CAUSES), default=0)

    def to_json(self) -> bytes:
        return json.dumps({"topic_id": self.topic_id, "next": self.next,
                           "breaks": self.breaks[-KEEP_BREAKS:]},
                          separators=(",", ":")).encode()


@dataclass
class FlowHistory:
    """Everything the history topic holds, from one read."""

    remote: dict[TopicPart, RemotePartition] = field(default_factory=dict)
    syncs: dict[TopicPart, list[tuple[int, int]]] = field(default_factory=dict)
    chains: dict[TopicPart, Chain] = field(default_factory=dict)


def merge_spans(spans: Iterable[tuple[int, int]], keep: int = KEEP_SPANS
                ) -> list[tuple[int, int]]:
    """Sorted [first, last] intervals with touching ones joined; the newest ``keep``."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out[-keep:]


class HistoryStore:
    """A flow's history on its target (see the module's note)."""

    def __init__(self, target: ClusterConfig, source_alias: str, replication_factor: int = 1):
        self.topic = CompactedTopic(target, history_topic(source_alias), 1, replication_factor)

    def read(self) -> tuple[dict[TopicPart, RemotePartition], dict[TopicPart, list]]:
        """(remote partition -> its history, source partition -> its syncs [(up, down)])."""
        found = self.read_all(OWNED, SYNCS)
        return found.remote, found.syncs

    def read_all(self, *kinds: str) -> FlowHistory:
        """The remote partitions' history, the syncs and the chains, from one read; given
        ``kinds`` (of :data:`KINDS`), only their entries are decoded (a flow of 10,000
        partitions keeps 30,000, and most readers want one or two kinds)."""
        kinds = kinds or KINDS
        out = FlowHistory()
        for key, value in self.topic.read().items():
            kind, _, rest = key.decode().partition("/")
            if kind not in kinds:
                continue
            topic, _, partition = rest.rpartition("/")
            try:
                doc = json.loads(value)
                tp = (topic, int(partition))
                if kind == OWNED:
                    out.remote[tp] = RemotePartition(
                        topic, tp[1], doc.get("verified_end"), doc.get("position"),
                        [(int(a), int(b)) for a, b in doc.get("owned", [])])
                elif kind == SYNCS:
                    out.syncs[tp] = [(int(u), int(d)) for u, d in doc["syncs"]]
                elif kind == CHAIN:
                    out.chains[tp] = Chain(str(doc["topic_id"]), int(doc["next"]),
                                           list(doc.get("breaks", [])))
            except (ValueError, KeyError, TypeError) as exc:
                # A damaged entry costs the proof its head start (owned, syncs) or makes
                # the next plan name a new chain for the partition (chain).
                log.warning("%s on cluster %r: entry %r skipped (%s)", self.topic.topic,
                            self.topic.cluster.alias, key[:120], exc)
        return out

    def write(self, remote: Iterable[RemotePartition],
              syncs: Mapping[TopicPart, list[tuple[int, int]]],
              chains: Mapping[TopicPart, Chain] | None = None) -> None:
        check_held()
        records = [(f"{OWNED}/{r.remote_topic}/{r.partition}".encode(), r.to_json())
                   for r in remote]
        records += [(f"{CHAIN}/{t}/{p}".encode(), c.to_json())
                    for (t, p), c in (chains or {}).items()]
        records += [(f"{SYNCS}/{t}/{p}".encode(),
                     json.dumps({"syncs": [list(s) for s in pairs[-KEEP_SYNCS:]]},
                                separators=(",", ":")).encode())
                    for (t, p), pairs in syncs.items()]
        self.topic.write(records)


def other_flows(target: ClusterConfig, source_alias: str) -> list[str]:
    """Source aliases of the other flows writing this target (they keep spans or a
    history on it)."""
    names = clients.cluster_metadata(clients.admin_client(target), 15).topics
    return sorted({m.group(1) for name in names if (m := _LEDGER_TOPICS.fullmatch(name))}
                  - {source_alias})
