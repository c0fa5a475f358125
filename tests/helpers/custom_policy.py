"""A custom replication policy loaded by dotted name in the tests."""

from mirrorflow.config.policy import DefaultReplicationPolicy


class UpperCasePolicy(DefaultReplicationPolicy):
    def format_remote_topic(self, source_cluster_alias: str, topic: str) -> str:
        return super().format_remote_topic(source_cluster_alias.upper(), topic)


class NotAPolicy:
    pass
