"""The checkpoint connector's properties (MM2's ``MirrorCheckpointConfig`` and its
``DefaultGroupFilter``): which groups, and how their offsets travel."""

from __future__ import annotations

from mirrorflow.config.property_spec import PropertySpec
from mirrorflow.config.values import (
    as_bool,
    as_non_negative_int,
    as_regex_list,
    as_replication_factor,
)

CHECKPOINT_SPECS = [
    PropertySpec("groups", ".*", as_regex_list, "Consumer groups to checkpoint."),
    PropertySpec(
        "groups.exclude",
        r"console-consumer-.*, connect-.*, __.*",
        as_regex_list,
        "Consumer groups never checkpointed; excludes win over includes.",
    ),
    PropertySpec("refresh.groups.enabled", "true", as_bool, "Discover new groups each run."),
    PropertySpec(
        "refresh.groups.interval.seconds",
        "600",
        as_non_negative_int,
        "MM2's group refresh period; here every run refreshes, so this is informational.",
    ),
    PropertySpec("emit.checkpoints.enabled", "true", as_bool, "Emit checkpoints for groups."),
    PropertySpec(
        "emit.checkpoints.interval.seconds",
        "60",
        as_non_negative_int,
        "MM2's checkpoint period; accepted without effect: checkpoints are emitted once "
        "per run, after its commit.",
    ),
    PropertySpec(
        "sync.group.offsets.enabled",
        "false",
        as_bool,
        "Write translated offsets into idle target consumer groups.",
    ),
    PropertySpec(
        "sync.group.offsets.interval.seconds",
        "60",
        as_non_negative_int,
        "MM2's group offset sync period; accepted without effect: groups are synced once "
        "per run, after its checkpoints.",
    ),
    PropertySpec(
        "checkpoints.topic.replication.factor",
        "3",
        as_replication_factor,
        "Replication factor of <source>.checkpoints.internal.",
    ),
]
