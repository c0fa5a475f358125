"""The source connector's properties (MM2's ``MirrorSourceConfig`` and its
``DefaultTopicFilter`` and ``DefaultConfigPropertyFilter``): which topics, and how their
configs and offsets travel."""

from __future__ import annotations

from mirrorflow.config.property_spec import PropertySpec
from mirrorflow.config.values import (
    as_bool,
    as_non_negative_int,
    as_regex_list,
    as_replication_factor,
    one_of,
)

# DefaultConfigPropertyFilter.CONFIG_PROPERTIES_EXCLUDE_DEFAULT of MM2 4.3.1, as written
# there (unescaped dots: regexes that match the names themselves).
_CONFIG_PROPERTIES_EXCLUDE_DEFAULT = (
    "follower.replication.throttled.replicas, leader.replication.throttled.replicas, "
    "message.timestamp.difference.max.ms, log.message.timestamp.before.max.ms, "
    "log.message.timestamp.after.max.ms, message.timestamp.type, "
    "unclean.leader.election.enable, min.insync.replicas"
)

DEFAULT_REPLICATION_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"

SOURCE_SPECS = [
    PropertySpec("topics", ".*", as_regex_list, "Topics to replicate: names and regexes."),
    PropertySpec(
        "topics.exclude",
        r"mm2.*\.internal, .*\.replica, __.*",
        as_regex_list,
        "Topics never replicated; excludes win over includes.",
    ),
    PropertySpec(
        "config.properties.exclude",
        _CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
        as_regex_list,
        "Topic config properties not copied to remote topics.",
    ),
    PropertySpec(
        "use.defaults.from",
        "target",
        one_of("target", "source"),
        "Where a config the source topic leaves at its default comes from: the target's "
        "default (the remote topic's override is removed) or the source's value. "
        "'source' is taken per flow only, as MM2 takes it (at the top level MM2 drops it).",
    ),
    PropertySpec("refresh.topics.enabled", "true", as_bool, "Discover new topics each run."),
    PropertySpec(
        "refresh.topics.interval.seconds",
        "600",
        as_non_negative_int,
        "MM2's topic refresh period; here every run refreshes, so this is informational.",
    ),
    PropertySpec(
        "sync.topic.configs.enabled", "true", as_bool, "Copy topic configs to remote topics."
    ),
    PropertySpec(
        "sync.topic.configs.interval.seconds",
        "600",
        as_non_negative_int,
        "Least time between two topic config syncs.",
    ),
    PropertySpec(
        "sync.topic.acls.enabled", "true", as_bool, "Copy topic READ ACLs to remote topics."
    ),
    PropertySpec(
        "sync.topic.acls.interval.seconds",
        "600",
        as_non_negative_int,
        "Least time between two ACL syncs.",
    ),
    PropertySpec(
        "replication.factor", "2", as_replication_factor,
        "Replication factor of new remote topics (-1: the broker's default)."
    ),
    PropertySpec(
        "offset-syncs.topic.replication.factor",
        "3",
        as_replication_factor,
        "Replication factor of the offset-syncs topic.",
    ),
    PropertySpec(
        "offset-syncs.topic.location",
        "source",
        one_of("source", "target"),
        "Cluster that holds mm2-offset-syncs.<cluster>.internal.",
    ),
    PropertySpec(
        "emit.offset-syncs.enabled", "true", as_bool, "Emit offset syncs after each run."
    ),
    PropertySpec(
        "offset.lag.max",
        "100",
        as_non_negative_int,
        "MM2 emits a sync when downstream lags by more; mirrorflow emits exact syncs anyway.",
    ),
]
