"""What a plan is made of: the offset ranges it mirrors (:class:`Range`, dealt to write
slots by :func:`deal`), the gaps retention left (:class:`Gap`), the named breaks of the
source partitions' chains (:class:`Break`), and the :class:`Plan` that holds them, as
stored (JSON) before any record moves (see :mod:`mirrorflow.source.plan`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from mirrorflow.config.model import FlowConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.plain import plain
from mirrorflow.source.history import Chain

TopicPart = tuple[str, int]


class PlanError(MirrorflowError):
    """The run cannot be planned; the message names the topic, partition or cluster."""


class PlanNotPendingError(MirrorflowError):
    """A step was asked to work on a plan that is no longer the flow's pending plan (a
    cleared or re-run task of an older run): nothing is done, and the message says who
    committed or superseded it; ``committed_by`` is the run that committed it, if one did
    (an earlier attempt of the asking task itself, after a commit whose later syncs
    failed)."""

    def __init__(self, message: str, committed_by: str | None = None):
        super().__init__(message)
        self.committed_by = committed_by


@dataclass(frozen=True)
class Range:
    """Upstream offsets [start, end) of one source partition, and where they go."""

    topic: str
    partition: int
    start: int
    end: int
    remote_topic: str
    target_start: int
    max_message_bytes: int | None = None  # the remote topic's max.message.bytes
    slot: int = 0  # the write task (and transactional id) that writes it in every attempt

    @property
    def size(self) -> int:
        """Offsets in the range (records, plus any gaps of compaction or markers)."""
        return self.end - self.start


# Ranges one write task takes before a plan opens another (on top of the offsets per task):
# measured on 2 cores, 1,000 ranges of 3 records were mirrored and proven in 6.9 s as 2
# tasks, 8.2 s as 1 and 7.7 to 10.9 s as 8.
RANGES_PER_TASK = 500


def write_slots(flow: FlowConfig, sizes: list[int], cores: int | None = None) -> int:
    """How many write slots (and proof tasks) ranges of ``sizes`` offsets get: one per
    ``mirrorflow.write.records.per.task`` offsets or :data:`RANGES_PER_TASK` ranges,
    whichever asks more, at least one and at most ``mirrorflow.write.tasks``. A task
    costs a consumer, a producer's ``initTransactions`` and a commit: with the first
    (Python) writer, 8 records over 8 partitions were written in 0.45 to 0.74 s as 8 tasks
    on 2 cores, in 0.14 to 0.30 s as one.

    Where ``mirrorflow.write.tasks`` is left at its default and Spark's ``cores`` are
    known (:func:`mirrorflow.spark.session.spark_cores`), offsets ask for no more slots
    than cores: a warm 2,000,000 x 512 B run over 8 partitions on 2 cores was mirrored in
    2.64 to 2.66 s as 2 slots, 2.95 to 3.25 s as 8, whose tasks ran in four waves. (The
    ranges' own count still asks for its slots: a task's share of ranges stays bounded.)"""
    per_task = flow.get("mirrorflow.write.records.per.task")
    by_offsets = -(-sum(sizes) // per_task)
    if cores and "mirrorflow.write.tasks" not in flow.explicit:
        by_offsets = min(by_offsets, cores)
    wanted = max(by_offsets, -(-len(sizes) // RANGES_PER_TASK), 1)
    return min(flow.get("mirrorflow.write.tasks"), wanted)


def least_loaded(candidates: list[int], loads: list[int], held: list[set[str]], topic: str,
                 size: int, share: int) -> int:
    """Of ``candidates`` (indexes into ``loads`` and ``held``, each one's topics), one that
    holds ``topic`` already while ``size`` more keeps it within ``share``; else the least
    loaded (the lowest index of equals)."""
    sticky = [c for c in candidates if topic in held[c] and loads[c] + size <= share]
    return min(sticky or candidates, key=lambda c: (loads[c], c))


def deal(ranges: list[Range], slots: int) -> list[Range]:
    """The ranges dealt out to ``slots`` write slots, largest first to the least loaded
    (so a few large ranges get a task each, and many small ones share few). A range goes
    to a slot that has its topic already while that slot stays within its even share of
    the offsets: a slot's producer and consumer keep metadata, metrics and batches per
    topic (the Java producer copies its map of topics at each new one), so 2,500 topics
    of 4 partitions are better 625 whole topics a slot than 2,500 in each. A slot keeps to
    remote topics of one ``max.message.bytes`` while there is room (its producer batches
    at the smallest of its topics' limits)."""
    unset = object()
    loads, limits = [0] * slots, [unset] * slots
    held: list[set[str]] = [set() for _ in range(slots)]
    share = -(-sum(r.size for r in ranges) // max(slots, 1))
    out = list(ranges)
    for i in sorted(range(len(out)), key=lambda i: (-out[i].size, i)):
        limit, size, topic = out[i].max_message_bytes, out[i].size, out[i].topic
        fits = [s for s in range(slots) if limits[s] is unset or limits[s] == limit] \
            or list(range(slots))
        slot = least_loaded(fits, loads, held, topic, size, share)
        limits[slot] = limit if limits[slot] is unset else limits[slot]
        loads[slot] += size
        held[slot].add(topic)
        out[i] = replace(out[i], slot=slot)
    return out


@dataclass(frozen=True)
class Gap:
    """Offsets [start, end) that retention removed before they were mirrored."""

    topic: str
    partition: int
    start: int
    end: int


BREAK_CAUSES = ("new", "recreated", "retention", "reset", "outside")


@dataclass(frozen=True)
class Break:
    """A named break in a source partition's chain: the chain goes on at offset ``end``
    of incarnation ``topic_id``; offsets ``[start, end)`` (none when equal) were not
    mirrored, because of ``cause`` (:data:`BREAK_CAUSES`), which ``detail`` explains."""

    topic: str
    partition: int
    cause: str
    start: int
    end: int
    topic_id: str
    detail: str
    at_ms: int = 0  # when it was named: a reset or recreation supersedes older checkpoints


@dataclass(frozen=True)
class Plan:
    """One run's ranges, stored before any record moves, with the topic id of every
    source topic it covers and the named breaks of their chains."""

    plan_id: str
    flow: str
    run_id: str
    created_ms: int
    ranges: tuple[Range, ...]
    gaps: tuple[Gap, ...] = field(default_factory=tuple)
    topic_ids: dict[str, str] = field(default_factory=dict)
    breaks: tuple[Break, ...] = field(default_factory=tuple)
    # How the source was read: its ends are the last stable offsets under read_committed.
    isolation: str = "read_committed"

    def to_json(self) -> str:
        return json.dumps(plain(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        doc = json.loads(text)
        return cls(
            plan_id=doc["plan_id"], flow=doc["flow"], run_id=doc["run_id"],
            created_ms=doc["created_ms"],
            ranges=tuple(Range(**r) for r in doc["ranges"]),
            gaps=tuple(Gap(**g) for g in doc.get("gaps", ())),
            topic_ids=dict(doc.get("topic_ids", {})),
            breaks=tuple(Break(**b) for b in doc.get("breaks", ())),
            isolation=doc.get("isolation", "read_uncommitted"),
        )

    @property
    def all_breaks(self) -> list[Break]:
        """The plan's breaks, retention gaps included, in partition order."""
        gaps = [Break(g.topic, g.partition, "retention", g.start, g.end,
                      self.topic_ids.get(g.topic, ""),
                      "removed by retention or DeleteRecords before they were read")
                for g in self.gaps]
        return sorted([*self.breaks, *gaps], key=lambda b: (b.topic, b.partition, b.end))

    def chains_after(self, chains: dict[TopicPart, Chain]) -> dict[TopicPart, Chain]:
        """The chains of the partitions this plan reads, gaps or breaks, once it is
        committed: each goes on where the plan leaves it, with the plan's breaks."""
        ends: dict[TopicPart, tuple[int, str]] = {}
        found: dict[TopicPart, list[dict]] = {}
        for b in self.all_breaks:
            ends[(b.topic, b.partition)] = (b.end, b.topic_id)
            found.setdefault((b.topic, b.partition), []).append(plain(b))
        for r in self.ranges:
            ends[(r.topic, r.partition)] = (r.end, self.topic_ids.get(r.topic, ""))
        out = {}
        for tp, (end, topic_id) in ends.items():
            known = chains.get(tp)
            out[tp] = Chain(topic_id or (known.topic_id if known else ""), end,
                            (known.breaks if known else []) + found.get(tp, []))
        return out

    def restarts(self, tp: TopicPart) -> bool:
        """Whether the plan restarts the partition's chain (may move it backward)."""
        return any((b.topic, b.partition) == tp and b.cause in ("recreated", "reset",
                                                                 "outside")
                   for b in self.breaks)

    @property
    def offsets(self) -> int:
        """Offsets the ranges span (records, plus any compaction holes or markers)."""
        return sum(r.size for r in self.ranges)

    @property
    def positions(self) -> dict[TopicPart, int]:
        """Positions to commit once the plan is mirrored: the last offset of every range,
        or the last offset of a recorded gap where nothing was left to mirror after it."""
        positions = {(b.topic, b.partition): b.end - 1 for b in self.breaks
                     if b.cause == "recreated"}  # the old incarnation's position is void
        positions.update({(g.topic, g.partition): g.end - 1 for g in self.gaps})
        positions.update({(r.topic, r.partition): r.end - 1 for r in self.ranges})
        return positions
