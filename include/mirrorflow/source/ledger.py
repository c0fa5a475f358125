"""What the mirror wrote where, recorded atomically with the data.

Every writer transaction (:mod:`mirrorflow.source.writer`) carries, besides its records:

* **the resume position**: the next upstream offset of its range, committed as the
  offset of the remote topic-partition in the consumer group ``__mirrorflow.<source>``
  on the target, with the plan's id as metadata (``send_offsets_to_transaction``, as
  Kafka Streams and MM2's exactly-once mode commit their source positions in the
  producer's transaction, KIP-447/KIP-618). A retry's writer (in the JVM) reads it,
  stable, after fencing, and so knows exactly the last upstream offset written, whatever
  else wrote the remote partition and whatever compaction or retention did to the source.
* **its spans** in ``mirrorflow-spans.<source>.internal`` on the target: per range it
  wrote to, the transaction's upstream and downstream offsets and the (upstream,
  downstream) pairs where their distance changes; packed into one record per transaction
  (per 64 KiB of spans: :func:`decode_spans`), which the plan's commit tombstones. The
  spans of a plan say exactly which remote offsets hold the plan's records and which
  upstream offset each came from: the completeness check proves them record by record,
  the offset syncs and the translation history are taken from them, and other flows
  writing the same remote partition (fan-in) tell their records from foreign ones by
  them.

The group's name starts with ``__`` so that MM2's and mirrorflow's default
``groups.exclude`` never checkpoint it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka.internal_topics import CompactedTopic, read_log

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]


class LedgerError(MirrorflowError):
    """The write ledger could not be read (the JVM writer's ``LedgerException``: the
    resume positions); the message names the cluster."""


def progress_group(source_alias: str) -> str:
    """The target's consumer group holding each remote partition's resume position."""
    return f"__mirrorflow.{source_alias}"


def spans_topic(source_alias: str) -> str:
    return f"mirrorflow-spans.{source_alias}.internal"


@dataclass(frozen=True)
class Span:
    """One writer transaction's records of one range: contiguous remote offsets
    ``[downstream_first, downstream_last]`` holding ``records`` records whose upstream
    offsets run from ``upstream_first`` to ``upstream_last``; ``syncs`` are the
    (upstream, downstream) pairs where the distance between them changes, the first
    record's pair included."""

    plan_id: str
    topic: str
    partition: int
    remote_topic: str
    upstream_first: int
    upstream_last: int
    downstream_first: int
    downstream_last: int
    records: int
    syncs: tuple[tuple[int, int], ...]

    def key(self) -> bytes:
        """Unique per span, across attempts too: no two spans share a remote offset."""
        return (f"{self.plan_id}/{self.topic}/{self.partition}/{self.remote_topic}/"
                f"{self.downstream_first}").encode()

    def value(self) -> bytes:
        return json.dumps({
            "plan": self.plan_id, "topic": self.topic, "partition": self.partition,
            "remote": self.remote_topic, "u": [self.upstream_first, self.upstream_last],
            "d": [self.downstream_first, self.downstream_last], "n": self.records,
            "syncs": [list(s) for s in self.syncs]}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> Span:
        return cls.from_doc(json.loads(value))

    @classmethod
    def from_doc(cls, doc: dict) -> Span:
        return cls(doc["plan"], doc["topic"], int(doc["partition"]), doc["remote"],
                   int(doc["u"][0]), int(doc["u"][1]), int(doc["d"][0]), int(doc["d"][1]),
                   int(doc["n"]), tuple((int(u), int(d)) for u, d in doc["syncs"]))


def decode_spans(value: bytes) -> list[Span]:
    """The spans of one record of the spans topic: ``{"spans": [<span>, ...]}``, one record
    per writer transaction (the JVM writer's ``SpanRecords``: a record per span kept a
    flow's tombstones, one per range and run, for the topic's ``delete.retention.ms``), or
    one span, as earlier versions wrote (a plan they left pending is finished and committed
    by this one)."""
    doc = json.loads(value)
    if isinstance(doc, dict) and "spans" in doc:
        return [Span.from_doc(one) for one in doc["spans"]]
    return [Span.from_doc(doc)]


def spans_store(target: ClusterConfig, source_alias: str,
                replication_factor: int = 1) -> CompactedTopic:
    return CompactedTopic(target, spans_topic(source_alias), 1, replication_factor)


def read_spans(target: ClusterConfig, source_alias: str,
               plan_id: str | None = None) -> dict[TopicPart, list[Span]]:
    """The committed spans (of one plan, or all kept), per source partition, in upstream
    order. A malformed record is skipped with a warning (were it a real span, the check
    would then find its records unaccounted for, and say so)."""
    out: dict[TopicPart, list[Span]] = {}
    for key, value in spans_store(target, source_alias).read().items():
        if plan_id is not None and not key.startswith(f"{plan_id}/".encode()):
            continue
        try:
            spans = decode_spans(value)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            log.warning("%s on cluster %r: record %r is not a span (%s); skipped",
                        spans_topic(source_alias), target.alias, key[:120], exc)
            continue
        for span in spans:
            if plan_id is None or span.plan_id == plan_id:
                out.setdefault((span.topic, span.partition), []).append(span)
    for spans in out.values():
        spans.sort(key=lambda s: s.upstream_first)
    return out


def drop_spans(target: ClusterConfig, source_alias: str, plan_id: str) -> None:
    """Tombstone a committed plan's span records (its history is kept consolidated)."""
    topic = spans_store(target, source_alias)
    keys = [r.key for r in read_log(target, topic.topic)
            if r.key is not None and r.key.startswith(f"{plan_id}/".encode())]
    topic.write([(k, None) for k in dict.fromkeys(keys)])


def keep_written(target: ClusterConfig, source_alias: str, plan_id: str,
                 replication_factor: int = 1) -> dict[TopicPart, int]:
    """A plan dropped before its commit (by a reset) may have written records already, and
    they stay on the target: record their remote offsets as the flow's own in its history,
    so that no later proof calls them foreign, and drop the plan's spans. Returns, per
    source partition, the last upstream offset they hold."""
    from mirrorflow.source.history import OWNED, HistoryStore, RemotePartition, merge_spans

    spans = [s for found in read_spans(target, source_alias, plan_id).values() for s in found]
    if not spans:
        return {}
    store = HistoryStore(target, source_alias, replication_factor)
    remote = store.read_all(OWNED).remote
    changed: dict[TopicPart, RemotePartition] = {}
    for span in spans:
        rp = (span.remote_topic, span.partition)
        item = changed.get(rp) or remote.get(rp) or RemotePartition(*rp)
        item.owned = merge_spans([*item.owned, (span.downstream_first, span.downstream_last)])
        changed[rp] = item
    store.write(changed.values(), {})
    drop_spans(target, source_alias, plan_id)
    written: dict[TopicPart, int] = {}
    for span in spans:
        tp = (span.topic, span.partition)
        written[tp] = max(written.get(tp, -1), span.upstream_last)
    return written


def merged_syncs(spans: Iterable[Span]) -> list[tuple[int, int]]:
    """The spans' pairs in upstream order, keeping only those where the distance changes,
    and the last record's pair (so the last sync maps the range's last record)."""
    out: list[tuple[int, int]] = []
    last_delta = None
    last_pair = None
    for span in sorted(spans, key=lambda s: s.upstream_first):
        for upstream, downstream in span.syncs:
            if downstream - upstream != last_delta:
                out.append((upstream, downstream))
                last_delta = downstream - upstream
        last_pair = (span.upstream_last, span.downstream_last)
    if last_pair is not None and (not out or out[-1] != last_pair):
        out.append(last_pair)
    return out
