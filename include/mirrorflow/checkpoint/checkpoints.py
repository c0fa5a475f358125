"""Checkpoints and consumer-group offset sync, as MirrorCheckpointConnector does them.

For every source consumer group that ``groups`` / ``groups.exclude`` select, its committed
offsets on mirrored topics are translated through the offset syncs and emitted as
Checkpoint records to ``<source>.checkpoints.internal`` on the target. With
``sync.group.offsets.enabled``, the translated offsets are also committed to the target's
consumer groups: only for groups that are idle there (EMPTY or DEAD), and only forward.

Translation rule (MM2 moves a consumer at most one offset past the nearest sync; here the
syncs are exact and kept in the flow's history, see :mod:`mirrorflow.source.offset_syncs`):
inside mirrored data a committed offset translates exactly; beyond the last mirrored
record it translates to the end of what has been mirrored; before the first sync it is not
translated. So a consumer that fails over never skips a record it had not processed on the
source, and re-reads none it had.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.config.policy import compile_pattern_list
from mirrorflow.kafka import clients
from mirrorflow.kafka.internal_topics import CompactedTopic
from mirrorflow.kafka.records import Checkpoint
from mirrorflow.lease import check_held
from mirrorflow.source import offset_syncs

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0


@dataclass
class GroupSync:
    """What group offset sync did for one group on the target. ``past`` lists the remote
    partitions, reset or recreated since, where the group sits past its checkpoint: the
    sync moves groups only forward, so an operator decides (``note`` says how)."""

    group: str
    synced: dict[str, int] = field(default_factory=dict)
    skipped_reason: str | None = None
    past: dict[str, dict[str, int]] = field(default_factory=dict)
    note: str | None = None


def current_checkpoints(config: MirrorConfig, flow: FlowConfig,
                        superseded: dict[tuple[str, int], int] | None = None,
                        ) -> dict[tuple[str, str, int], Checkpoint]:
    """The newest checkpoint of every group and remote partition that still holds: one
    emitted before the partition's newest reset or recreation (a break in its chain) points
    into offsets, or a remote topic, that no longer hold, and is left out. The run after
    a reset emits a fresh one. ``superseded``: :func:`superseded_ms`, if already read."""
    from mirrorflow.checkpoint.remote import checkpoint_records, newest

    records = checkpoint_records(config.cluster(flow.target), flow.source, flow.policy())
    if not records:
        return {}
    return newest(records, superseded_ms(config, flow) if superseded is None else superseded)


def superseded_ms(config: MirrorConfig, flow: FlowConfig) -> dict[tuple[str, int], int]:
    """(remote topic, partition) -> when its newest reset or recreation was named."""
    from mirrorflow.source.history import CHAIN, HistoryStore

    policy = flow.policy()
    chains = HistoryStore(config.cluster(flow.target), flow.source).read_all(CHAIN).chains
    moments = {(policy.format_remote_topic(flow.source, topic), partition):
               chain.superseded_ms() for (topic, partition), chain in chains.items()}
    return {rp: ms for rp, ms in moments.items() if ms}


def checkpoints_topic(config: MirrorConfig, flow: FlowConfig) -> CompactedTopic:
    return CompactedTopic(config.cluster(flow.target),
                          flow.policy().checkpoints_topic(flow.source), 1,
                          flow.get("checkpoints.topic.replication.factor"))


def select_groups(config: MirrorConfig, flow: FlowConfig) -> list[str]:
    """Source consumer groups the flow checkpoints (include minus exclude, whole names)."""
    include = compile_pattern_list(flow.get("groups"))
    exclude = compile_pattern_list(flow.get("groups.exclude"))
    source = config.cluster(flow.source)
    listing = clients.answer(
        clients.admin_client(source).list_consumer_groups(request_timeout=TIMEOUT_S), source,
        "listing its consumer groups", TIMEOUT_S)
    if listing.errors:
        # A broker that did not answer leaves its groups out of ``valid``: checkpointing
        # what answered would pass over the rest in silence (MM2's listConsumerGroups()
        # .all() fails too).
        raise clients.ClusterUnreachableError(
            f"cluster {source.alias!r} ({source.bootstrap_servers}): cannot list its "
            f"consumer groups: {listing.errors[0].str()}", cause="down")
    names = {g.group_id for g in listing.valid}
    return sorted(g for g in names if include.fullmatch(g) and not exclude.fullmatch(g))


def committed_offsets(cluster, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    """(topic, partition) -> (committed offset, metadata) of a group; uncommitted left out."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = clients.admin_client(cluster)
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                request_timeout=TIMEOUT_S)
    result = clients.answer(futures[group], cluster, f"reading the offsets of group {group!r}",
                            TIMEOUT_S)
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "")
            for tp in result.topic_partitions if tp.offset >= 0}


def compute(config: MirrorConfig, flow: FlowConfig) -> list[Checkpoint]:
    """Checkpoints for every selected group and mirrored partition that can be translated,
    emitted as ``MirrorCheckpointTask.checkpointIsMoreRecent`` decides: the first one of a
    group's partition, one whose downstream offset advanced, and one whose upstream offset
    moved back (the group was rewound on the source to reprocess: its checkpoint follows it
    back). A repeated or downstream-rewinding checkpoint is not emitted."""
    groups = select_groups(config, flow)
    if not groups:
        return []
    syncs = offset_syncs.history(config, flow)
    topic_filter = flow.topic_filter()
    policy = flow.policy()
    source = config.cluster(flow.source)
    last = current_checkpoints(config, flow)
    checkpoints = []
    for group in groups:
        for (topic, partition), (offset, metadata) in sorted(
                committed_offsets(source, group).items()):
            if not topic_filter.should_replicate(topic) or (topic, partition) not in syncs:
                continue
            downstream = syncs[(topic, partition)].translate(offset)
            if downstream is None:
                continue
            remote = policy.format_remote_topic(flow.source, topic)
            checkpoint = Checkpoint(group, remote, partition, offset, downstream, metadata)
            if _more_recent(checkpoint, last.get((group, remote, partition))):
                checkpoints.append(checkpoint)
    return checkpoints


def _more_recent(checkpoint: Checkpoint, previous: Checkpoint | None) -> bool:
    return (previous is None or checkpoint.upstream_offset < previous.upstream_offset
            or checkpoint.downstream_offset > previous.downstream_offset)


def emit(config: MirrorConfig, flow: FlowConfig, checkpoints: list[Checkpoint]) -> int:
    check_held()
    topic = checkpoints_topic(config, flow)
    if checkpoints:
        topic.write([(c.key(), c.value()) for c in checkpoints])
    return len(checkpoints)


def _why_active(target, group: str) -> str | None:
    """Why a target group must be left alone, or None when it is idle.

    As MirrorCheckpointTask does, only EMPTY and DEAD groups (or unknown ones) are synced:
    the group's state decides.
    """
    from confluent_kafka import ConsumerGroupState

    try:
        description = clients.answer(clients.admin_client(target).describe_consumer_groups(
            [group], request_timeout=TIMEOUT_S)[group], target, f"describing group {group!r}",
            TIMEOUT_S)
    except Exception as exc:
        if "GROUP_ID_NOT_FOUND" in str(exc):
            return None
        raise
    if description.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
        return None
    members = len(description.members)
    return f"state {description.state.name}" + (f", {members} member(s)" if members else "")


def sync_group_offsets(config: MirrorConfig, flow: FlowConfig) -> list[GroupSync]:
    """Commit the newest checkpoints' offsets to the same groups on the target when they
    are idle there, never rewinding one (MirrorCheckpointTask.syncGroupOffset: the
    checkpoint store decides, whatever this run emitted)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    target = config.cluster(flow.target)
    admin = clients.admin_client(target)
    include = compile_pattern_list(flow.get("groups"))
    exclude = compile_pattern_list(flow.get("groups.exclude"))
    reset = superseded_ms(config, flow)
    by_group: dict[str, list[Checkpoint]] = {}
    for (group, _, _), checkpoint in sorted(current_checkpoints(config, flow, reset).items()):
        if include.fullmatch(group) and not exclude.fullmatch(group):
            by_group.setdefault(group, []).append(checkpoint)
    outcomes = []
    for group, items in sorted(by_group.items()):
        outcome = GroupSync(group)
        outcomes.append(outcome)
        active = _why_active(target, group)
        if active:
            outcome.skipped_reason = (f"group {group!r} is active on cluster {flow.target!r} "
                                      f"({active}); its offsets are left alone")
            log.info("%s", outcome.skipped_reason)
            continue
        current = committed_offsets(target, group)
        forward = [c for c in items
                   if c.downstream_offset > current.get((c.topic, c.partition), (-1, ""))[0]]
        _note_past(outcome, flow, items, current, reset)
        if not forward:
            continue
        request = ConsumerGroupTopicPartitions(group, [
            TopicPartition(c.topic, c.partition, c.downstream_offset, metadata=c.metadata)
            for c in forward])
        check_held()
        clients.answer(admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)
                       [group], target, f"committing the offsets of group {group!r}", TIMEOUT_S)
        outcome.synced = {f"{c.topic}[{c.partition}]": c.downstream_offset for c in forward}
    return outcomes


def _note_past(outcome: GroupSync, flow: FlowConfig, items: list[Checkpoint],
               current: dict[tuple[str, int], tuple[int, str]],
               reset: dict[tuple[str, int], int]) -> None:
    """Name the reset or recreated partitions where the target group sits past its fresh
    checkpoint: it would skip records there, and a forward-only sync leaves it."""
    for c in items:
        at = current.get((c.topic, c.partition), (-1, ""))[0]
        if (c.topic, c.partition) in reset and at > c.downstream_offset:
            outcome.past[f"{c.topic}[{c.partition}]"] = {"at": at,
                                                        "checkpoint": c.downstream_offset}
    if outcome.past:
        where = ", ".join(f"{tp} at {v['at']} (checkpoint {v['checkpoint']})"
                          for tp, v in outcome.past.items())
        outcome.note = (
            f"group {outcome.group!r} on cluster {flow.target!r} sits past its checkpoint "
            f"since the reset or recreation of {where}: it would skip records there, and "
            "offset sync only moves groups forward; while the group is idle, set it to its "
            f"checkpoint (kafka-consumer-groups --group {outcome.group} --reset-offsets "
            "--to-offset <checkpoint> --topic <topic>:<partition> --execute)")
        log.warning("%s", outcome.note)
