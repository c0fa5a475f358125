"""Heartbeats: liveness of a flow, emitted on the source and sensed on the target.

Each run writes a Heartbeat (source alias, target alias, timestamp; MM2's format) to the
source cluster's ``heartbeats`` topic before planning. The normal data path mirrors
``heartbeats`` topics (the topic filter always selects them), so the target sees it in
``<source>.heartbeats``, and further clusters downstream in ``<hop>.<source>.heartbeats``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mirrorflow.config import FlowConfig, MirrorConfig
from mirrorflow.internal_topics import CompactedTopic, read_log
from mirrorflow.records import Heartbeat, RecordFormatError


@dataclass(frozen=True)
class HeartbeatStatus:
    """Has the heartbeat emitted at ``since_ms`` arrived, and how old is the newest one."""

    topic: str
    arrived: bool
    newest_ms: int | None
    age_ms: int | None


def emit(config: MirrorConfig, flow: FlowConfig, now_ms: int | None = None) -> Heartbeat:
    heartbeat = Heartbeat(flow.source, flow.target, now_ms or int(time.time() * 1000))
    topic = CompactedTopic(config.cluster(flow.source), flow.policy().heartbeats_topic(), 1,
                           flow.get("heartbeats.topic.replication.factor"))
    topic.ensure()
    topic.write([(heartbeat.key(), heartbeat.value())])
    return heartbeat


def status(config: MirrorConfig, flow: FlowConfig, since_ms: int,
           now_ms: int | None = None) -> HeartbeatStatus:
    """Look for this flow's heartbeats in ``<source>.heartbeats`` on the target."""
    policy = flow.policy()
    remote = policy.format_remote_topic(flow.source, policy.heartbeats_topic())
    newest = None
    for record in read_log(config.cluster(flow.target), remote):
        try:
            heartbeat = Heartbeat.decode(record.key or b"", record.value or b"")
        except RecordFormatError:
            continue
        if (heartbeat.source_cluster_alias, heartbeat.target_cluster_alias) == (
                flow.source, flow.target):
            newest = max(newest or heartbeat.timestamp, heartbeat.timestamp)
    now_ms = now_ms or int(time.time() * 1000)
    return HeartbeatStatus(remote, newest is not None and newest >= since_ms, newest,
                           None if newest is None else now_ms - newest)
