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

Other flows read it too: a flow whose remote partition another flow also writes
(fan-in) tells that flow's records from foreign ones by its spans.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mirrorflow.config.model import ClusterConfig
from mirrorflow.kafka import clients
from mirrorflow.kafka.internal_topics import CompactedTopic
from mirrorflow.lease import check_held

TopicPart = tuple[str, int]
KEEP_SPANS = 1000
KEEP_SYNCS = 2000
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
        remote: dict[TopicPart, RemotePartition] = {}
        syncs: dict[TopicPart, list[tuple[int, int]]] = {}
        for key, value in self.topic.read().items():
            kind, _, rest = key.decode().partition("/")
            topic, _, partition = rest.rpartition("/")
            try:
                doc = json.loads(value)
                tp = (topic, int(partition))
                if kind == "owned":
                    remote[tp] = RemotePartition(
                        topic, tp[1], doc.get("verified_end"), doc.get("position"),
                        [(int(a), int(b)) for a, b in doc.get("owned", [])])
                elif kind == "syncs":
                    syncs[tp] = [(int(u), int(d)) for u, d in doc["syncs"]]
            except (ValueError, KeyError, TypeError):
                continue  # a damaged entry only costs the proof its head start
        return remote, syncs

    def write(self, remote: Iterable[RemotePartition],
              syncs: Mapping[TopicPart, list[tuple[int, int]]]) -> None:
        check_held()
        self.topic.ensure()
        records = [(f"owned/{r.remote_topic}/{r.partition}".encode(), r.to_json())
                   for r in remote]
        records += [(f"syncs/{t}/{p}".encode(),
                     json.dumps({"syncs": [list(s) for s in pairs[-KEEP_SYNCS:]]},
                                separators=(",", ":")).encode())
                    for (t, p), pairs in syncs.items()]
        self.topic.write(records)


def other_flows(target: ClusterConfig, source_alias: str) -> list[str]:
    """Source aliases of the other flows writing this target (they keep spans or a
    history on it)."""
    names = clients.admin_client(target).list_topics(timeout=15).topics
    return sorted({m.group(1) for name in names if (m := _LEDGER_TOPICS.fullmatch(name))}
                  - {source_alias})
