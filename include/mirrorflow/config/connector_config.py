"""Properties of every MM2 connector (``MirrorConnectorConfig``: the replication
policy) and the Kafka Connect connector settings MM2 honours."""

from __future__ import annotations

from mirrorflow.config.property_spec import PropertySpec
from mirrorflow.config.values import as_bool, as_positive_int, as_string, one_of

DEFAULT_REPLICATION_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"

CONNECTOR_SPECS = [
    PropertySpec(
        "replication.policy.class",
        DEFAULT_REPLICATION_POLICY,
        as_string,
        "Naming of remote topics: Default, Identity, or a Python class by dotted name.",
    ),
    PropertySpec(
        "replication.policy.separator",
        ".",
        lambda raw: raw,
        "Separator between source alias and topic in remote topic names.",
    ),
    PropertySpec(
        "replication.policy.internal.topic.separator.enabled",
        "true",
        as_bool,
        "Use the separator in internal topic names too (KIP-690).",
    ),
    # Kafka Connect connector settings MM2 honours
    PropertySpec(
        "exactly.once.support",
        "requested",
        one_of("requested", "required"),
        "KIP-618: 'required' fails a flow whose target cannot run transactions.",
        origin="Connect",
    ),
    PropertySpec(
        "tasks.max",
        "1",
        as_positive_int,
        "MM2's task count; accepted without effect: each range is written by one Spark "
        "task, so a run's parallelism is its partition count (up to Spark's cores).",
        origin="Connect",
    ),
]
