"""Client utilities, the counterpart of MM2's RemoteClusterUtils / MirrorClient.

Applications use these to fail over: which clusters replicate into this one, how many hops
away they are, and where a consumer group should resume on this cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from mirrorflow.config.model import ClusterConfig, MirrorConfig
from mirrorflow.config.policy import DefaultReplicationPolicy, ReplicationPolicy
from mirrorflow.kafka import clients
from mirrorflow.kafka.internal_topics import read_log
from mirrorflow.kafka.records import Checkpoint, RecordFormatError


def topic_names(cluster: ClusterConfig) -> list[str]:
    """Every topic of a cluster, sorted."""
    return sorted(clients.cluster_metadata(clients.admin_client(cluster), 15).topics)


def heartbeat_topics(config: MirrorConfig, alias: str,
                     policy: ReplicationPolicy | None = None) -> list[str]:
    """Heartbeat topics on a cluster, local and remote (MirrorClient.heartbeatTopics)."""
    policy = policy or DefaultReplicationPolicy()
    return [t for t in topic_names(config.cluster(alias)) if policy.is_heartbeats_topic(t)]


def checkpoint_topics(config: MirrorConfig, alias: str,
                      policy: ReplicationPolicy | None = None) -> list[str]:
    """Checkpoint topics on a cluster (MirrorClient.checkpointTopics)."""
    policy = policy or DefaultReplicationPolicy()
    return [t for t in topic_names(config.cluster(alias)) if policy.is_checkpoints_topic(t)]


def upstream_clusters(config: MirrorConfig, alias: str,
                      policy: ReplicationPolicy | None = None) -> set[str]:
    """Every cluster whose heartbeats reach this one, at any hop."""
    policy = policy or DefaultReplicationPolicy()
    found: set[str] = set()
    for topic in heartbeat_topics(config, alias, policy):
        source = policy.topic_source(topic)
        while source is not None and source not in found:
            found.add(source)
            topic = policy.upstream_topic(topic) or ""
            source = policy.topic_source(topic)
    return found


def replication_hops(config: MirrorConfig, alias: str, upstream_alias: str,
                     policy: ReplicationPolicy | None = None) -> int:
    """Fewest hops from ``upstream_alias`` to this cluster, -1 when unreachable."""
    policy = policy or DefaultReplicationPolicy()
    best = -1
    for topic in heartbeat_topics(config, alias, policy):
        hops, visited, current = 0, set(), topic
        while True:
            hops += 1
            source = policy.topic_source(current)
            if source is None or source in visited:
                break
            if source == upstream_alias:
                best = hops if best < 0 else min(best, hops)
                break
            visited.add(source)
            current = policy.upstream_topic(current) or ""
    return best


def checkpoint_records(target: ClusterConfig, source_alias: str,
                       policy: ReplicationPolicy | None = None) -> list[tuple[Checkpoint, int]]:
    """Every checkpoint in ``<source>.checkpoints.internal`` on the target, in order, with
    its record's timestamp; malformed records are skipped."""
    policy = policy or DefaultReplicationPolicy()
    out = []
    for record in read_log(target, policy.checkpoints_topic(source_alias)):
        try:
            out.append((Checkpoint.decode(record.key or b"", record.value or b""),
                        record.timestamp))
        except RecordFormatError:
            continue
    return out


def newest(records: list[tuple[Checkpoint, int]],
           superseded: Mapping[tuple[str, int], int] | None = None,
           ) -> dict[tuple[str, str, int], Checkpoint]:
    """(group, remote topic, partition) -> the newest of ``records``, leaving out those
    written before ``superseded[(remote topic, partition)]`` (ms)."""
    superseded = superseded or {}
    latest: dict[tuple[str, str, int], Checkpoint] = {}
    for checkpoint, timestamp in records:
        if timestamp < superseded.get((checkpoint.topic, checkpoint.partition), 0):
            continue
        latest[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
    return latest


def latest_checkpoints(target: ClusterConfig, source_alias: str,
                       policy: ReplicationPolicy | None = None,
                       superseded: Mapping[tuple[str, int], int] | None = None,
                       ) -> dict[tuple[str, str, int], Checkpoint]:
    """(group, remote topic, partition) -> the newest checkpoint in
    ``<source>.checkpoints.internal`` on the target (see :func:`newest`)."""
    return newest(checkpoint_records(target, source_alias, policy), superseded)


def translate_offsets(target: ClusterConfig, source_alias: str, group: str,
                      policy: ReplicationPolicy | None = None,
                      superseded: Mapping[tuple[str, int], int] | None = None,
                      ) -> dict[tuple[str, int], int]:
    """Where ``group`` should resume on the target: (remote topic, partition) -> offset,
    from the newest checkpoints in ``<source>.checkpoints.internal`` (those written
    before ``superseded`` left out, see :func:`latest_checkpoints`)."""
    return {(topic, partition): checkpoint.downstream_offset
            for (name, topic, partition), checkpoint in
            latest_checkpoints(target, source_alias, policy, superseded).items()
            if name == group}
