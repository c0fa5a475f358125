"""The heartbeat connector's properties (MM2's ``MirrorHeartbeatConfig``)."""

from __future__ import annotations

from mirrorflow.config.property_spec import PropertySpec
from mirrorflow.config.values import (
    as_bool,
    as_non_negative_int,
    as_replication_factor,
)

HEARTBEAT_SPECS = [
    PropertySpec("emit.heartbeats.enabled", "true", as_bool, "Emit heartbeats each run."),
    PropertySpec(
        "heartbeats.replication.enabled",
        "true",
        as_bool,
        "Mirror heartbeat topics even when 'topics' does not select them (MM2's "
        "MirrorSourceConfig); false leaves them to 'topics', and the run senses no heartbeat "
        "the flow does not mirror.",
    ),
    PropertySpec(
        "emit.heartbeats.interval.seconds",
        "1",
        as_non_negative_int,
        "MM2's heartbeat period; a batch run emits one heartbeat per run.",
    ),
    PropertySpec(
        "heartbeats.topic.replication.factor",
        "3",
        as_replication_factor,
        "Replication factor of the heartbeats topic.",
    ),
]
