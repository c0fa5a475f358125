"""Offset syncs: upstream -> downstream offset pairs, and translating offsets with them.

The writer reports a pair wherever the distance between upstream and downstream offsets
changes and at the end of every range, so consecutive syncs bound runs in which both
offsets advance together. That makes translation exact rather than within
``offset.lag.max`` as in MM2. Syncs go to MM2's topic
``mm2-offset-syncs.<other cluster>.internal`` on the cluster that
``offset-syncs.topic.location`` names, in MM2's binary format (:mod:`mirrorflow.kafka.records`).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.kafka.internal_topics import CompactedTopic, read_log
from mirrorflow.kafka.records import OffsetSync, RecordFormatError
from mirrorflow.lease import check_held

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]


def offset_syncs_topic(config: MirrorConfig, flow: FlowConfig) -> CompactedTopic:
    """MirrorSourceConfig.offsetSyncsTopic: named after the cluster it is *not* on."""
    policy = flow.policy()
    if flow.get("offset-syncs.topic.location") == "source":
        alias, name = flow.source, policy.offset_syncs_topic(flow.target)
    else:
        alias, name = flow.target, policy.offset_syncs_topic(flow.source)
    return CompactedTopic(config.cluster(alias), name, 1,
                          flow.get("offset-syncs.topic.replication.factor"))


def syncs_from_results(ranges: Iterable[dict]) -> list[OffsetSync]:
    """The writer's (upstream, downstream) pairs as OffsetSync records, range by range."""
    return [OffsetSync(r["topic"], r["partition"], up, down)
            for r in ranges for up, down in r.get("syncs", [])]


def emit(config: MirrorConfig, flow: FlowConfig, syncs: list[OffsetSync]) -> int:
    check_held()
    topic = offset_syncs_topic(config, flow)
    if syncs:
        topic.write([(s.key(), s.value()) for s in syncs])
    return len(syncs)


def read(config: MirrorConfig, flow: FlowConfig) -> dict[TopicPart, list[OffsetSync]]:
    """Per source partition, the usable syncs in upstream order.

    As MM2's OffsetSyncStore does, a sync whose upstream offset is not past the previous
    one (the partition was reset and mirrored again) invalidates the syncs after it.
    Malformed records are skipped with a warning.
    """
    topic = offset_syncs_topic(config, flow)
    by_tp: dict[TopicPart, list[OffsetSync]] = {}
    for record in read_log(topic.cluster, topic.topic):
        try:
            sync = OffsetSync.decode(record.key or b"", record.value or b"")
        except RecordFormatError as exc:
            log.warning("%s@%d is not an offset sync (%s); skipped", topic.topic,
                        record.offset, exc)
            continue
        history = by_tp.setdefault((sync.topic, sync.partition), [])
        while history and history[-1].upstream_offset >= sync.upstream_offset:
            history.pop()
        history.append(sync)
    return by_tp


def translate(syncs: list[OffsetSync], upstream: int) -> int | None:
    """The downstream offset for a consumer whose next upstream record is ``upstream``,
    from mirrorflow's exact syncs (pairs wherever the distance changes, and each range's
    last record).

    Exact inside mirrored data; past the last mirrored record, the end of what has been
    mirrored (never beyond); None before the first sync (cannot be translated).
    """
    if not syncs or upstream < syncs[0].upstream_offset:
        return None
    last = syncs[-1]
    if upstream > last.upstream_offset:
        return last.downstream_offset + 1
    i = bisect.bisect_right([s.upstream_offset for s in syncs], upstream) - 1
    here = syncs[i]
    estimate = here.downstream_offset + (upstream - here.upstream_offset)
    if i + 1 < len(syncs):
        return min(estimate, syncs[i + 1].downstream_offset)
    return estimate


def translate_mm2(syncs: list[OffsetSync], upstream: int) -> int | None:
    """MM2's rule (``OffsetSyncStore.translateDownstream``) for syncs MM2 wrote, which are
    ``offset.lag.max`` apart: the downstream offset of the nearest sync at or below
    ``upstream``, plus one if ``upstream`` is past it; None before the first sync."""
    i = bisect.bisect_right([s.upstream_offset for s in syncs], upstream) - 1
    if i < 0:
        return None
    here = syncs[i]
    return here.downstream_offset + (1 if upstream > here.upstream_offset else 0)


@dataclass(frozen=True)
class SyncHistory:
    """One source partition's syncs: mirrorflow's exact ones (from the flow's history)
    and, below them, those MM2 wrote before mirrorflow took the flow over."""

    exact: list[OffsetSync]
    mm2: list[OffsetSync]

    def translate(self, upstream: int) -> int | None:
        if self.exact and upstream >= self.exact[0].upstream_offset:
            return translate(self.exact, upstream)
        return translate_mm2(self.mm2, upstream)


def history(config: MirrorConfig, flow: FlowConfig) -> dict[TopicPart, SyncHistory]:
    """Per source partition, the syncs to translate with: the flow's own history (kept
    whatever compaction does to the offset-syncs topic) over MM2's syncs in that topic."""
    from mirrorflow.source.history import HistoryStore

    _, kept = HistoryStore(config.cluster(flow.target), flow.source).read()
    written = read(config, flow)
    out = {}
    for tp in set(kept) | set(written):
        exact = [OffsetSync(tp[0], tp[1], u, d) for u, d in kept.get(tp, [])]
        floor = exact[0].upstream_offset if exact else None
        older = [s for s in written.get(tp, []) if floor is None or s.upstream_offset < floor]
        out[tp] = SyncHistory(exact, older)
    return out
