"""Topic metadata sync, as MM2's ``MirrorSourceConnector`` does it: topic configs,
partition counts and topic ACLs of the source, carried to the remote topics.

The decisions (which configs to set or remove, which topics need partitions, which ACL
bindings to create) are pure functions of what the two clusters describe, so they are
tested without a broker. The calls that apply them fail with a message naming the
cluster, the topic and the missing API or permission when a broker refuses them.

MM2's rules, matched (``MirrorSourceConnector`` in Apache Kafka 3.6+):

- configs: entries that are not read-only, not sensitive, not static broker settings and
  not matched by ``config.properties.exclude``; a source default is removed from the remote
  topic (``use.defaults.from = target``) or copied (``source``); incremental alter only;
- partitions: a remote topic with fewer partitions than its source grows to the source's
  count (``NewPartitions.increaseTo``);
- ACLs: literal TOPIC bindings of replicated topics, except ALLOW WRITE (nobody but the
  mirror writes a remote topic); ALLOW ALL becomes ALLOW READ.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.config.model import ClusterConfig, FlowConfig, MirrorConfig
from mirrorflow.config.policy import compile_pattern_list
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.lease import check_held

log = logging.getLogger(__name__)

STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
ADMIN_TIMEOUT_S = 30.0
# Between descriptions of topics the broker does not know yet: doubling from the first.
UNKNOWN_TOPIC_PAUSE_S = 0.1
UNKNOWN_TOPIC_PAUSE_MAX_S = 1.6


class MetadataSyncError(MirrorflowError):
    """Metadata could not be synced; the message names cluster, topic and API."""


@dataclass
class MetadataSyncResult:
    """What one sync changed on the target, and what it could not check."""

    configs: dict[str, dict[str, str | None]] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)
    acls: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- decisions


def config_source(entry: Any) -> str:
    """Where a config entry's value comes from (confluent-kafka gives the enum's number)."""
    from confluent_kafka.admin import ConfigSource

    source = getattr(entry, "source", None)
    if isinstance(source, int):
        return ConfigSource(source).name
    return getattr(source, "name", str(source))


def replicable_configs(entries: Mapping[str, Any], exclude: Iterable[str]) -> dict[str, Any]:
    """MM2's ``targetConfig``: the entries a remote topic may take from its source."""
    pattern = compile_pattern_list(tuple(exclude))
    return {name: e for name, e in entries.items()
            if not e.is_read_only and not e.is_sensitive
            and config_source(e) != STATIC_BROKER_CONFIG and not pattern.fullmatch(name)}


def new_topic_configs(entries: Mapping[str, Any], exclude: Iterable[str],
                      use_defaults_from: str = "target") -> dict[str, str]:
    """Configs a new remote topic is created with: the source's own settings (and its
    defaults too with ``use.defaults.from = source``)."""
    return {name: e.value for name, e in replicable_configs(entries, exclude).items()
            if e.value is not None and (not e.is_default or use_defaults_from == "source")}


def config_changes(source: Mapping[str, Any], target: Mapping[str, Any],
                   exclude: Iterable[str], use_defaults_from: str = "target",
                   ) -> dict[str, str | None]:
    """Incremental changes that make the remote topic's configs follow its source:
    name -> value to SET, or None to DELETE (fall back to the target's default). Only
    what differs on the target is changed, so a sync of equal topics alters nothing."""
    changes: dict[str, str | None] = {}
    for name, entry in replicable_configs(source, exclude).items():
        current = target.get(name)
        if entry.is_default and use_defaults_from == "target":
            if current is not None and not current.is_default:
                changes[name] = None
        elif entry.value is not None and (current is None or current.is_default
                                           or current.value != entry.value):
            changes[name] = entry.value
    return changes


def partition_increases(source_counts: Mapping[str, int], target_counts: Mapping[str, int],
                        remote: Mapping[str, str]) -> dict[str, int]:
    """Remote topic -> the source's partition count, for remote topics that have fewer."""
    return {remote[t]: n for t, n in source_counts.items()
            if remote[t] in target_counts and target_counts[remote[t]] < n}


@dataclass(frozen=True)
class TopicAcl:
    """One ACL binding of a literal topic pattern (the parts MM2 copies)."""

    topic: str
    principal: str
    host: str
    operation: str  # READ, WRITE, ALL, DESCRIBE, ...
    permission: str  # ALLOW or DENY

    def __str__(self) -> str:
        return (f"{self.permission} {self.principal} {self.operation} on topic {self.topic} "
                f"from {self.host}")


def acls_to_sync(source: Iterable[TopicAcl], target: Iterable[TopicAcl],
                 should_replicate: Callable[[str], bool],
                 remote_topic: Callable[[str], str]) -> list[TopicAcl]:
    """MM2's ``syncTopicAcls``: bindings for remote topics that the target lacks."""
    present = set(target)
    wanted: list[TopicAcl] = []
    for acl in source:
        if (acl.permission == "ALLOW" and acl.operation == "WRITE") or \
                not should_replicate(acl.topic):
            continue
        operation = "READ" if (acl.permission, acl.operation) == ("ALLOW", "ALL") else \
            acl.operation
        mapped = TopicAcl(remote_topic(acl.topic), acl.principal, acl.host, operation,
                          acl.permission)
        if mapped not in present and mapped not in wanted:
            wanted.append(mapped)
    return wanted


def foreign_writers(target: Iterable[TopicAcl], remote_topics: Iterable[str],
                    mirror_principal: str | None) -> list[TopicAcl]:
    """ALLOW WRITE/ALL bindings on remote topics for anyone but the mirror's principal:
    another writer breaks the remote partition's offsets (reported, never removed)."""
    topics = set(remote_topics)
    return [a for a in target if a.topic in topics and a.permission == "ALLOW"
            and a.operation in ("WRITE", "ALL") and a.principal != mirror_principal]


# --------------------------------------------------------------------------- calls


# Descriptions the steps of one job share (shared_descriptions), per (cluster, topic).
_SHARED: contextvars.ContextVar[dict[tuple[str, str], dict] | None] = contextvars.ContextVar(
    "shared_descriptions", default=None)


@contextlib.contextmanager
def shared_descriptions() -> Iterator[None]:
    """Within this, a topic described once is not described again (unless altered here):
    a job's mirror reads the remote topics' limits and its proof their timestamp type and
    cleanup policy, seconds apart, and librdkafka gives every entry of every topic as a
    Python object (about 0.2 ms a topic). Within an outer one, the outer one's."""
    if _SHARED.get() is not None:
        yield
        return
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def describe_configs(cluster: ClusterConfig, topics: Iterable[str]) -> dict[str, dict]:
    """Each topic's config entries, in one request (within :func:`shared_descriptions`,
    only of topics not described there yet). A topic a moment old may be unknown
    to the broker that answers (KRaft brokers learn of it from the metadata log a little
    after CreateTopics returns): such topics are asked again for up to
    ``ADMIN_TIMEOUT_S``, less often the longer they stay unknown (a broker opening
    thousands of new partitions learns of the last of them only when it has opened them
    all, and a description of thousands of topics five times a second slowed it)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    shared = _SHARED.get()
    if shared is None:
        shared = {}
    out, wanted = {}, []
    for topic in topics:
        known = shared.get((cluster.bootstrap_servers, topic))
        if known is None:
            wanted.append(topic)
        else:
            out[topic] = known
    admin = clients.admin_client(cluster) if wanted else None
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    pause = UNKNOWN_TOPIC_PAUSE_S
    while wanted:
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in wanted],
                                         request_timeout=ADMIN_TIMEOUT_S)
        unknown = []
        for resource, future in futures.items():
            try:
                out[resource.name] = clients.answer(
                    future, cluster, f"describing the configs of topic {resource.name!r}",
                    ADMIN_TIMEOUT_S)
            except KafkaException as exc:
                if (time.monotonic() < deadline
                        and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                    unknown.append(resource.name)
                    continue
                raise MetadataSyncError(f"cluster {cluster.alias!r}: cannot describe the "
                                        f"configs of topic {resource.name!r}: "
                                        f"{exc.args[0].str()}") from None
        wanted = unknown
        if wanted:
            time.sleep(pause)
            pause = min(2 * pause, UNKNOWN_TOPIC_PAUSE_MAX_S)
    shared.update({(cluster.bootstrap_servers, t): entries for t, entries in out.items()})
    return out


def source_topic_configs(config: MirrorConfig, flow: FlowConfig,
                         topics: Iterable[str]) -> dict[str, dict[str, str]]:
    """Per source topic, the configs its new remote topic is created with."""
    described = describe_configs(config.cluster(flow.source), topics)
    return {t: new_topic_configs(entries, flow.get("config.properties.exclude"),
                                 flow.get("use.defaults.from"))
            for t, entries in described.items()}


MESSAGE_LIMIT = "max.message.bytes"


def message_limits(config: MirrorConfig, flow: FlowConfig, remote_of: Mapping[str, str],
                   raise_to_source: bool = True) -> dict[str, int]:
    """Each remote topic's ``max.message.bytes`` as the writer must keep to it now (per
    remote topic of ``remote_of``: source topic -> remote topic).

    With ``raise_to_source``, where a source topic takes larger records than its remote
    topic and config sync would copy the setting (``sync.topic.configs.enabled``, not
    matched by ``config.properties.exclude``, not a source default under
    ``use.defaults.from = target``), the remote topic is raised to it first, as the flow's
    next config sync would: a record the source took is not refused for a limit that sync
    lifts, and a plan left pending by such a refusal goes on once the source is raised.
    (The mirror asks for that once a record is refused: the source topics' configs,
    described every run, cost a run of 1,000 partitions some 60 ms.)"""
    target = config.cluster(flow.target)
    current = describe_configs(target, sorted(set(remote_of.values())))
    limits = {topic: int(entries[MESSAGE_LIMIT].value) for topic, entries in current.items()
              if MESSAGE_LIMIT in entries and str(entries[MESSAGE_LIMIT].value).isdigit()}
    if not raise_to_source or not flow.get("sync.topic.configs.enabled") or not remote_of:
        return limits
    raised: dict[str, dict[str, str | None]] = {}
    for topic, entries in describe_configs(config.cluster(flow.source), sorted(remote_of)).items():
        wanted = new_topic_configs(entries, flow.get("config.properties.exclude"),
                                   flow.get("use.defaults.from")).get(MESSAGE_LIMIT)
        remote = remote_of[topic]
        if wanted is not None and wanted.isdigit() and int(wanted) > limits.get(remote, 0):
            log.info("raising %s's max.message.bytes on cluster %r from %s to %s, as its "
                     "source topic's (config sync)", remote, flow.target, limits.get(remote),
                     wanted)
            raised[remote] = {MESSAGE_LIMIT: wanted}
            limits[remote] = int(wanted)
    alter_configs(target, raised)
    return limits


def alter_configs(cluster: ClusterConfig, changes: Mapping[str, Mapping[str, str | None]]
                  ) -> None:
    """IncrementalAlterConfigs (SET or DELETE) per topic; errors name topic and cluster."""
    check_held()
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    shared = _SHARED.get() or {}
    resources = []
    for topic, entries in changes.items():
        shared.pop((cluster.bootstrap_servers, topic), None)
        ops = [ConfigEntry(name, value or "",
                           incremental_operation=AlterConfigOpType.SET if value is not None
                           else AlterConfigOpType.DELETE)
               for name, value in entries.items()]
        resources.append(ConfigResource(ResourceType.TOPIC, topic, incremental_configs=ops))
    if not resources:
        return
    admin = clients.admin_client(cluster)
    for resource, future in admin.incremental_alter_configs(
            resources, request_timeout=ADMIN_TIMEOUT_S).items():
        try:
            clients.answer(future, cluster, f"altering the configs of topic {resource.name!r}",
                           ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            hint = (" (the broker lacks IncrementalAlterConfigs, which MM2 needs too)"
                    if error.code() in (KafkaError._UNSUPPORTED_FEATURE,
                                        KafkaError.UNSUPPORTED_VERSION) else "")
            raise MetadataSyncError(f"cluster {cluster.alias!r}: cannot alter the configs of "
                                    f"topic {resource.name!r}: {error.str()}{hint}") from None


def add_partitions(cluster: ClusterConfig, counts: Mapping[str, int],
                   current: Mapping[str, int]) -> None:
    """CreatePartitions up to ``counts``; a broker without the API gets a clear error."""
    check_held()
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewPartitions

    if not counts:
        return
    admin = clients.admin_client(cluster)
    futures = {}
    for request in clients.metadata_requests(list(counts), lambda t: counts[t] - current[t]):
        futures.update(admin.create_partitions([NewPartitions(t, counts[t]) for t in request],
                                               operation_timeout=ADMIN_TIMEOUT_S,
                                               request_timeout=ADMIN_TIMEOUT_S))
    for topic, future in futures.items():
        try:
            clients.answer(future, cluster, f"adding partitions to topic {topic!r}",
                           ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.INVALID_PARTITIONS:
                continue  # grown meanwhile, as MM2 swallows it
            reason = ("the broker does not support CreatePartitions; add the partitions on "
                      "the target by hand"
                      if error.code() == KafkaError._UNSUPPORTED_FEATURE else error.str())
            raise MetadataSyncError(
                f"remote topic {topic!r} on cluster {cluster.alias!r} has {current[topic]} "
                f"partitions and its source has {counts[topic]}: {reason}") from None
        log.info("grew %s on %s from %d to %d partitions", topic, cluster.alias,
                 current[topic], counts[topic])


def describe_topic_acls(cluster: ClusterConfig) -> list[TopicAcl] | None:
    """Literal topic ACLs of a cluster; None when it has no authorizer (as MM2 skips)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = clients.admin_client(cluster)
    wanted = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.LITERAL, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    try:
        bindings = clients.answer(admin.describe_acls(wanted, request_timeout=ADMIN_TIMEOUT_S),
                                  cluster, "describing its topic ACLs", ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.SECURITY_DISABLED:
            return None
        raise MetadataSyncError(f"cluster {cluster.alias!r}: cannot describe topic ACLs: "
                                f"{exc.args[0].str()}") from None
    return [TopicAcl(b.name, b.principal, b.host, b.operation.name, b.permission_type.name)
            for b in bindings]


def create_acls(cluster: ClusterConfig, acls: list[TopicAcl]) -> None:
    """CreateAcls for literal topic bindings; a refusal names the cluster and binding."""
    check_held()
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    if not acls:
        return
    admin = clients.admin_client(cluster)
    bindings = {AclBinding(ResourceType.TOPIC, a.topic, ResourcePatternType.LITERAL,
                           a.principal, a.host, AclOperation[a.operation],
                           AclPermissionType[a.permission]): a for a in acls}
    for binding, future in admin.create_acls(list(bindings),
                                             request_timeout=ADMIN_TIMEOUT_S).items():
        try:
            clients.answer(future, cluster, f"creating the ACL '{bindings[binding]}'",
                           ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            raise MetadataSyncError(f"cluster {cluster.alias!r}: cannot create the ACL "
                                    f"'{bindings[binding]}': {exc.args[0].str()}") from None


# --------------------------------------------------------------------------- the sync step


def _mirror_principal(target: ClusterConfig) -> str | None:
    user = clients.client_config(target, "producer").get("sasl.username")
    return f"User:{user}" if user else None


def sync_topic_metadata(config: MirrorConfig, flow: FlowConfig, topics: Iterable[str],
                        *, configs: bool = True, acls: bool = True) -> MetadataSyncResult:
    """Bring the remote topics' configs and ACLs in line with their sources'."""
    result = MetadataSyncResult()
    source, target = config.cluster(flow.source), config.cluster(flow.target)
    policy = flow.policy()
    topics = sorted(topics)
    remote = {t: policy.format_remote_topic(flow.source, t) for t in topics}
    if configs and topics:
        described = describe_configs(source, topics)
        current = describe_configs(target, remote.values())
        for topic in topics:
            changes = config_changes(described[topic], current.get(remote[topic], {}),
                                     flow.get("config.properties.exclude"),
                                     flow.get("use.defaults.from"))
            if changes:
                result.configs[remote[topic]] = changes
        alter_configs(target, result.configs)
    if acls:
        source_acls = describe_topic_acls(source)
        target_acls = describe_topic_acls(target) if source_acls is not None else None
        if source_acls is None or target_acls is None:
            side = flow.source if source_acls is None else flow.target
            result.notes.append(f"cluster {side!r} has no ACL authorizer: no ACL sync")
        else:
            wanted = acls_to_sync(source_acls, target_acls, flow.topic_filter().should_replicate,
                                  lambda t: policy.format_remote_topic(flow.source, t))
            create_acls(target, wanted)
            result.acls = [str(a) for a in wanted]
            result.notes += [f"remote topic {a.topic!r} on cluster {flow.target!r} is writable "
                             f"by {a.principal}; only the mirror should write it"
                             for a in foreign_writers(target_acls, remote.values(),
                                                      _mirror_principal(target))]
    for note in result.notes:
        log.warning("%s", note)
    return result

