"""Replication policies: how remote topics and MM2's internal topics are named.

A line-by-line port of the semantics of ``org.apache.kafka.connect.mirror``'s
``ReplicationPolicy``, ``DefaultReplicationPolicy`` and ``IdentityReplicationPolicy``,
plus MirrorSourceConnector's topic filter (``shouldReplicateTopic`` / ``isCycle``),
which is what keeps active/active flows from looping.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mirrorflow.errors import MirrorflowError

HEARTBEATS_TOPIC = "heartbeats"

_BUILTIN_NAMES = {
    "org.apache.kafka.connect.mirror.DefaultReplicationPolicy": "default",
    "DefaultReplicationPolicy": "default",
    "org.apache.kafka.connect.mirror.IdentityReplicationPolicy": "identity",
    "IdentityReplicationPolicy": "identity",
}


class PolicyError(MirrorflowError):
    """The replication policy class cannot be loaded or used."""


class ReplicationPolicy:
    """MM2's ``DefaultReplicationPolicy``: remote topic ``{source}{separator}{topic}``."""

    def __init__(
        self,
        separator: str = ".",
        internal_topic_separator_enabled: bool = True,
        source_cluster_alias: str | None = None,
    ) -> None:
        if not separator:
            raise PolicyError("replication.policy.separator must not be empty")
        self.separator = separator
        self.internal_topic_separator_enabled = internal_topic_separator_enabled
        self.source_cluster_alias = source_cluster_alias

    # -- naming
    def format_remote_topic(self, source_cluster_alias: str, topic: str) -> str:
        return f"{source_cluster_alias}{self.separator}{topic}"

    def remote_topic_prefix(self, source_cluster_alias: str) -> str | None:
        """What every remote topic from that cluster starts with under this policy's
        naming (``{alias}{separator}``); None for a policy that names them its own way
        (IdentityReplicationPolicy, or any subclass that overrides
        :meth:`format_remote_topic`)."""
        if type(self).format_remote_topic is not ReplicationPolicy.format_remote_topic:
            return None
        return self.format_remote_topic(source_cluster_alias, "")

    def topic_source(self, topic: str) -> str | None:
        """The alias of the cluster a remote topic came from, None for a local topic."""
        parts = topic.split(self.separator)
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        """The topic's name one hop upstream, None for a local topic."""
        source = self.topic_source(topic)
        if source is None:
            return None
        return topic[len(source) + len(self.separator):]

    def original_topic(self, topic: str) -> str:
        """The topic's name on the cluster it was first produced to."""
        upstream = self.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return topic
        return self.original_topic(upstream)

    # -- internal topics
    def _internal_separator(self) -> str:
        return self.separator if self.internal_topic_separator_enabled else "."

    def heartbeats_topic(self) -> str:
        return HEARTBEATS_TOPIC

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        sep = self._internal_separator()
        return f"mm2-offset-syncs{sep}{cluster_alias}{sep}internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        sep = self._internal_separator()
        return f"{cluster_alias}{sep}checkpoints{sep}internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.heartbeats_topic() == self.original_topic(topic)

    def is_checkpoints_topic(self, topic: str) -> bool:
        sep = self._internal_separator()
        return topic.endswith(f"{sep}checkpoints{sep}internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(f"{self._internal_separator()}internal")

    def is_internal_topic(self, topic: str) -> bool:
        """MM2's, Kafka's and Connect's own topics: never replicated."""
        kafka_internal = topic.startswith("__") or topic.startswith(".")
        connect_internal = topic.endswith("-internal") or topic.endswith(".internal")
        return self.is_mm2_internal_topic(topic) or kafka_internal or connect_internal


class DefaultReplicationPolicy(ReplicationPolicy):
    """The default: ``a.orders`` on the target for ``orders`` from cluster ``a``."""


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Remote topics keep their names (MM1-style); heartbeats are still prefixed.

    It cannot tell a remote topic from a local one, so it cannot stop loops: mirrorflow
    refuses it on a pair of flows that go both ways (see ``check_policy_flows``).
    """

    def _looks_like_heartbeat(self, topic: str) -> bool:
        return topic.endswith(self.heartbeats_topic())

    def format_remote_topic(self, source_cluster_alias: str, topic: str) -> str:
        if self._looks_like_heartbeat(topic):
            return super().format_remote_topic(source_cluster_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().topic_source(topic)
        return self.source_cluster_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().upstream_topic(topic)
        return topic


def load_policy(
    class_name: str,
    separator: str = ".",
    internal_topic_separator_enabled: bool = True,
    source_cluster_alias: str | None = None,
) -> ReplicationPolicy:
    """Instantiate a policy by MM2's Java class name or a Python ``module.Class`` name."""
    builtin = _BUILTIN_NAMES.get(class_name)
    if builtin == "default":
        cls: type = DefaultReplicationPolicy
    elif builtin == "identity":
        cls = IdentityReplicationPolicy
    else:
        cls = _import_class(class_name)
    return cls(separator, internal_topic_separator_enabled, source_cluster_alias)


def _import_class(class_name: str) -> type:
    module_name, _, attr = class_name.rpartition(".")
    if class_name.startswith(("org.apache.", "com.", "io.")):
        raise PolicyError(
            f"replication policy {class_name!r} is a Java class; mirrorflow provides "
            "DefaultReplicationPolicy and IdentityReplicationPolicy, or give a Python class "
            "as module.ClassName"
        )
    if not module_name:
        raise PolicyError(f"replication policy {class_name!r} is not a dotted class name")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise PolicyError(f"cannot load replication policy {class_name!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, ReplicationPolicy)):
        raise PolicyError(
            f"replication policy {class_name!r} is not a subclass of "
            "mirrorflow.config.policy.ReplicationPolicy"
        )
    return cls


# --------------------------------------------------------------------------- topic filter


def compile_pattern_list(patterns: Sequence[str]) -> re.Pattern[str]:
    """MirrorUtils.compilePatternList: the items joined by '|', matched on the whole name."""
    return re.compile("|".join(patterns))


@dataclass(frozen=True)
class TopicFilter:
    """Which source topics a flow mirrors: MirrorSourceConnector.shouldReplicateTopic."""

    policy: ReplicationPolicy
    target_alias: str
    include: re.Pattern[str]
    exclude: re.Pattern[str]
    heartbeats: bool = True  # heartbeats.replication.enabled

    @classmethod
    def for_flow(cls, policy: ReplicationPolicy, target_alias: str,
                 topics: Sequence[str], topics_exclude: Sequence[str],
                 heartbeats: bool = True) -> TopicFilter:
        return cls(policy, target_alias, compile_pattern_list(topics),
                   compile_pattern_list(topics_exclude), heartbeats)

    def selected_by_config(self, topic: str) -> bool:
        return bool(self.include.fullmatch(topic)) and not self.exclude.fullmatch(topic)

    def is_cycle(self, topic: str) -> bool:
        """True when the topic came (at any hop) from the target: mirroring it would loop."""
        source = self.policy.topic_source(topic)
        if source is None:
            return False
        if source == self.target_alias:
            return True
        upstream = self.policy.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return False
        return self.is_cycle(upstream)

    def should_replicate(self, topic: str) -> bool:
        return (
            (self.selected_by_config(topic)
             or (self.heartbeats and self.policy.is_heartbeats_topic(topic)))
            and not self.policy.is_internal_topic(topic)
            and not self.is_cycle(topic)
        )

    def select(self, topics: Iterable[str]) -> list[str]:
        return sorted(t for t in topics if self.should_replicate(t))
