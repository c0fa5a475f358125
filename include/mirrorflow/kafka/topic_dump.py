"""Readable dumps of internal topics, like MM2's formatters (KIP-597) and more.

The kind of a topic is told by its name under the replication policy: offset syncs,
checkpoints, heartbeats (local or remote), MM2's offset store, mirrorflow's plan store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from mirrorflow.config.model import MirrorConfig
from mirrorflow.config.policy import DefaultReplicationPolicy, ReplicationPolicy
from mirrorflow.kafka.internal_topics import LogRecord, read_log
from mirrorflow.kafka.records import Checkpoint, Heartbeat, OffsetSync, RecordFormatError
from mirrorflow.source import offsets


def _policy_for(config: MirrorConfig, alias: str) -> ReplicationPolicy:
    """The policy of a flow that touches the cluster (they agree in sane configs)."""
    for flow in config.enabled_flows():
        if alias in (flow.source, flow.target):
            return flow.policy()
    return DefaultReplicationPolicy()


def _offset_store(record: LogRecord) -> str:
    entry = offsets.decode(record.key or b"", record.value or b"null")
    if entry is None:
        return f"tombstone or foreign record {record.key!r}"
    alias, (topic, partition), offset = entry
    return f"MirrorSourceConnector cluster={alias} {topic}[{partition}] offset={offset}"


def _plan_store(record: LogRecord) -> str:
    """A plan, validation or result (JSON), or the ``pending`` key's plan id (text)."""
    key = (record.key or b"").decode(errors="replace")
    if record.value is None:
        return f"{key}: deleted"
    try:
        return f"{key}: " + json.dumps(json.loads(record.value))[:300]
    except ValueError:
        return f"{key}: {record.value.decode(errors='replace')[:300]}"


def _formatter(policy: ReplicationPolicy, topic: str) -> Callable[[LogRecord], str]:
    if topic.startswith("mm2-offset-syncs"):
        return lambda r: str(OffsetSync.decode(r.key or b"", r.value or b""))
    if policy.is_checkpoints_topic(topic):
        return lambda r: str(Checkpoint.decode(r.key or b"", r.value or b""))
    if policy.is_heartbeats_topic(topic):
        return lambda r: str(Heartbeat.decode(r.key or b"", r.value or b""))
    if topic.startswith("mm2-offsets."):
        return _offset_store
    if topic.startswith("mirrorflow-plans."):
        return _plan_store
    return lambda r: f"key={r.key!r} value={(r.value or b'')[:80]!r}"


def describe_records(config: MirrorConfig, alias: str, topic: str) -> Iterator[str]:
    """One line per record: partition@offset, timestamp, decoded content."""
    fmt = _formatter(_policy_for(config, alias), topic)
    records = read_log(config.cluster(alias), topic)
    if not records:
        yield f"{topic} on cluster {alias!r}: no records"
    for record in records:
        try:
            text = fmt(record)
        except (RecordFormatError, ValueError) as exc:
            text = f"undecodable ({exc})"
        yield f"{record.partition}@{record.offset} ts={record.timestamp} {text}"
