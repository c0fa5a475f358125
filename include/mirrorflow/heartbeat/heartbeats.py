"""Heartbeats: liveness of a flow, as MirrorMaker 2 emits them, sensed on the target.

MM2 runs a ``MirrorHeartbeatConnector`` for every cluster pair whose heartbeats are on,
whether or not the pair's flow is enabled (``MirrorMakerConfig.clusterPairs``), and a
pair's connector writes ``Heartbeat(source, target)`` into the *target's* ``heartbeats``
topic. So for a flow ``a->b``, MM2 writes ``(a, b)`` into b's ``heartbeats`` and, for the
reverse pair ``b->a``, ``(b, a)`` into a's ``heartbeats``; the flow mirrors a's
``heartbeats`` (heartbeat topics are always selected) into ``a.heartbeats`` on b, where
``(b, a)`` arriving proves the flow moves records. Heartbeat topics hop on
(``b.a.heartbeats``), which is how ``upstream_clusters`` and ``replication_hops`` see the
topology.

mirrorflow does the same for the flow's pair and its reverse, once per run, before
planning, so that the run's own mirror carries the reverse pair's heartbeat. The reverse
pair's heartbeats follow ``b->a.emit.heartbeats.enabled`` (its own, or the top-level
default), as MM2's do. (Pairs of clusters with no flow in either direction get no
heartbeats from mirrorflow; MM2 would emit them too.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.kafka.internal_topics import CompactedTopic, read_log
from mirrorflow.kafka.records import Heartbeat, RecordFormatError


@dataclass(frozen=True)
class HeartbeatStatus:
    """Has the heartbeat emitted at ``since_ms`` arrived, and how old is the newest one."""

    topic: str
    arrived: bool
    newest_ms: int | None
    age_ms: int | None


def reverse(config: MirrorConfig, flow: FlowConfig) -> FlowConfig:
    """The flow's reverse pair (disabled or not: MM2 runs its heartbeat connector)."""
    return config.flows[(flow.target, flow.source)]


def senses(config: MirrorConfig, flow: FlowConfig) -> bool:
    """Whether a heartbeat travels through this flow: the reverse pair emits one into the
    source's ``heartbeats``, which the flow mirrors (unless heartbeats.replication.enabled
    is false and 'topics' does not select it)."""
    return bool(reverse(config, flow).get("emit.heartbeats.enabled")) and \
        flow.topic_filter().should_replicate(flow.policy().heartbeats_topic())


def emits(config: MirrorConfig, flow: FlowConfig) -> bool:
    return flow.get("emit.heartbeats.enabled") or senses(config, flow)


def _write(config: MirrorConfig, pair: FlowConfig, heartbeat: Heartbeat) -> None:
    """Into the pair's target's ``heartbeats`` topic, as the pair's MM2 connector does."""
    # Kafka's default segments, as MM2 creates it: flows mirror it (STATE_SEGMENT_MS's note).
    topic = CompactedTopic(config.cluster(pair.target), pair.policy().heartbeats_topic(), 1,
                           pair.get("heartbeats.topic.replication.factor"),
                           rolls_segments=False)
    topic.ensure()
    # A heartbeat is data MM2's tools read, not the flow's state: written outside the
    # lease's transactions (an extra one from a stale holder is harmless).
    topic.write_unfenced([(heartbeat.key(), heartbeat.value())])


def emit(config: MirrorConfig, flow: FlowConfig, now_ms: int | None = None) -> int:
    """Emit this run's heartbeats for the flow's pair and its reverse (each where its
    ``emit.heartbeats.enabled`` is on); returns their timestamp (ms)."""
    now_ms = now_ms or int(time.time() * 1000)
    if flow.get("emit.heartbeats.enabled"):
        _write(config, flow, Heartbeat(flow.source, flow.target, now_ms))
    back = reverse(config, flow)
    if back.get("emit.heartbeats.enabled"):
        _write(config, back, Heartbeat(back.source, back.target, now_ms))
    return now_ms


def status(config: MirrorConfig, flow: FlowConfig, since_ms: int,
           now_ms: int | None = None) -> HeartbeatStatus:
    """Look for the reverse pair's heartbeats, mirrored by this flow, in
    ``<source>.heartbeats`` on the target."""
    policy = flow.policy()
    remote = policy.format_remote_topic(flow.source, policy.heartbeats_topic())
    newest = None
    for record in read_log(config.cluster(flow.target), remote):
        try:
            heartbeat = Heartbeat.decode(record.key or b"", record.value or b"")
        except RecordFormatError:
            continue
        if (heartbeat.source_cluster_alias, heartbeat.target_cluster_alias) == (
                flow.target, flow.source):
            newest = max(newest or heartbeat.timestamp, heartbeat.timestamp)
    now_ms = now_ms or int(time.time() * 1000)
    return HeartbeatStatus(remote, newest is not None and newest >= since_ms, newest,
                           None if newest is None else now_ms - newest)
