"""The MM2 configuration model: ``connect-mirror-maker.properties`` resolved into flows.

Resolution follows ``org.apache.kafka.connect.mirror.MirrorMakerConfig``:

* ``clusters`` lists the aliases; ``{alias}.bootstrap.servers`` is required for each.
* ``{alias}.*`` are cluster-level settings; ``{alias}.{producer,consumer,admin}.*`` are
  client overrides for one role. Cluster-level client settings (``security.protocol``,
  ``ssl.*``, ``sasl.*``) apply to every role unless the role overrides them; top-level ones
  apply to every cluster unless the cluster sets them (``MirrorMakerConfig.clusterProps``).
* Connector properties set at top level are defaults for every flow;
  ``{source}->{target}.{property}`` overrides them for one flow
  (``MirrorMakerConfig.connectorBaseConfig``). ``{source}->{target}.enabled`` switches a
  flow on; flows are off by default.

Every flow property is resolved to a typed value with MM2's default. Properties this
project adds beyond MM2 live under ``mirrorflow.`` (and the Spark-style
``failOnDataLoss``) and are documented in :data:`FLOW_PROPERTIES` like MM2's.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mirrorflow.config import connect_settings, offset_reset, transforms
from mirrorflow.config.errors import ConfigError, one_line
from mirrorflow.config.offset_reset import OffsetReset
from mirrorflow.config.policy import (
    IdentityReplicationPolicy,
    PolicyError,
    ReplicationPolicy,
    TopicFilter,
    load_policy,
)
from mirrorflow.config.properties import (
    Entry,
    PropertiesSyntaxError,
    decode_properties,
    load_properties,
    parse_properties,
)
from mirrorflow.config.transforms import SchemaTransfer
from mirrorflow.config.values import (
    as_bool,
    as_int,
    as_list,
    as_non_negative_int,
    as_positive_int,
    as_regex_list,
    as_replication_factor,
    as_schedule,
    as_string,
    one_of,
)

log = logging.getLogger(__name__)

CLIENT_ROLES = ("producer", "consumer", "admin")
FLOW_ARROW = "->"
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
# Cluster-level keys that are Kafka client settings (MirrorClientConfig.CLIENT_CONFIG_DEF
# holds bootstrap.servers, security.protocol and the ssl/sasl families).
_CLIENT_LEVEL_RE = re.compile(r"^(bootstrap\.servers|security\.protocol|ssl\..+|sasl\..+)$")


@dataclass(frozen=True)
class PropertySpec:
    """One flow property: its MM2 name, default (as MM2 writes it), parser and meaning."""

    name: str
    default: str
    parse: Callable[[str], Any]
    doc: str
    origin: str = "MM2"


# DefaultConfigPropertyFilter.CONFIG_PROPERTIES_EXCLUDE_DEFAULT of MM2 4.3.1, as written
# there (unescaped dots: regexes that match the names themselves).
_CONFIG_PROPERTIES_EXCLUDE_DEFAULT = (
    "follower.replication.throttled.replicas, leader.replication.throttled.replicas, "
    "message.timestamp.difference.max.ms, log.message.timestamp.before.max.ms, "
    "log.message.timestamp.after.max.ms, message.timestamp.type, "
    "unclean.leader.election.enable, min.insync.replicas"
)

DEFAULT_REPLICATION_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"

_SPECS = [
    # MirrorSourceConfig / DefaultTopicFilter
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
    # MirrorCheckpointConfig / DefaultGroupFilter
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
    # MirrorHeartbeatConfig
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
    # MirrorConnectorConfig
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
    # mirrorflow's own
    PropertySpec(
        "mirrorflow.schedule",
        "*/5 * * * *",
        as_schedule,
        "Airflow schedule of the flow's DAG: cron, a preset (@hourly), '@continuous' (runs "
        "back to back, one at a time: a flow's lag is one run, not an interval plus a run), "
        "or 'none' for manual.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.spark.master",
        "local[*]",
        as_string,
        "Spark master for the mirror job when run without Airflow's Spark connection.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.spark.conn.id",
        "spark_default",
        as_string,
        "Airflow connection the SparkSubmitOperator uses.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.retry.delay.seconds",
        "60",
        as_non_negative_int,
        "Airflow's delay before a failed task of the flow's DAG is retried.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.lease.timeout.seconds",
        "30",
        as_positive_int,
        "A step's hold on the flow lapses this long after its process stops renewing it.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.lease.wait.seconds",
        "60",
        as_non_negative_int,
        "How long a run waits for another run of the same flow before it fails.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.lease.run.timeout.seconds",
        "900",
        as_positive_int,
        "A DAG run owns its flow from claim_flow to its report task; between its tasks the "
        "ownership lapses this long after the last task let go (a run killed hard).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.max.records.per.partition",
        "1000000",
        as_positive_int,
        "Largest range one run plans for one source partition; the rest waits for the next run.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.transaction.records",
        "100000",
        as_positive_int,
        "Records per writer transaction (also bounded to 64 MiB): each commits its records "
        "with their ranges' resume positions, so a retry redoes at most one transaction.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.write.tasks",
        "8",
        as_positive_int,
        "Write tasks per run at most: the plan deals its ranges out to this many slots, "
        "balanced by size, and each slot's ranges are written by one Spark task with one "
        "transactional producer (a transactional id per flow and slot) whose "
        "transactions span all of them. A slot's ranges stay in it for every attempt of "
        "the plan, so a retry fences each zombie. The proof reads the ranges in as many "
        "tasks (more where long ranges are split). More than Spark's cores costs a "
        "producer, a commit and a task's scheduling per extra task; fewer leaves cores "
        "idle on few large ranges.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.records.per.spark.partition",
        "2000000",
        as_positive_int,
        "The completeness check reads a range longer than this in several Spark input "
        "partitions (the mirror reads each range in one, to keep its order). Each piece "
        "costs a Kafka consumer of its own, which pays off only where ranges are fewer "
        "than cores; the default reads a default plan's range (its records and their "
        "transaction markers) in one.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.validate.fraction",
        "1.0",
        lambda raw: _fraction(raw),
        "Share of ranges the completeness check verifies (1.0 = everything).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.validate.expectations.dir",
        "",
        as_string,
        "Folder of extra Great Expectations suites (JSON) run over the mirrored records; "
        "empty = include/expectations of the project.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.reports.retention.runs",
        "1000",
        as_positive_int,
        "Run reports (summary and Data Docs) kept per flow: the newest this many; each run "
        "removes older ones as it writes its own.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.reports.retention.days",
        "7",
        as_positive_int,
        "Run reports older than this many days are removed, whatever their number.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.alert.max.lag.records",
        "-1",
        as_int,
        "Fail the run's report task (after the report is written) when a partition lags "
        "more records than this after the run (-1 = off).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.alert.max.heartbeat.age.ms",
        "-1",
        as_int,
        "Fail the run's report task (after the report is written) when the newest "
        "heartbeat on the target is older (-1 = off).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "failOnDataLoss",
        "true",
        as_bool,
        "Spark-style: fail when retention removed records not yet mirrored; "
        "false records the gap and goes on.",
        origin="Spark",
    ),
]


def _fraction(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"expected a number between 0 and 1, got {raw!r}") from None
    if not 0.0 < value <= 1.0:
        raise ValueError(f"expected a number in (0, 1], got {raw!r}")
    return value


FLOW_PROPERTIES: dict[str, PropertySpec] = {spec.name: spec for spec in _SPECS}

# Top-level keys MM2 accepts that are not flow properties. Connect worker settings are
# accepted (a file written for MM2 must load) but have no effect here.
_TOP_LEVEL_KEYS = {"clusters", "config.providers", "dedicated.mode.enable.internal.rest"}
# Common misspellings of flow properties that MM2 silently ignores.
_MISSPELLINGS = {
    "enable": "enabled",
    "emit.heartbeats": "emit.heartbeats.enabled",
    "emit.checkpoints": "emit.checkpoints.enabled",
    "sync.group.offsets": "sync.group.offsets.enabled",
    "topics.blacklist": "topics.exclude",
    "groups.blacklist": "groups.exclude",
    "config.properties.blacklist": "config.properties.exclude",
    "topics.whitelist": "topics",
    "groups.whitelist": "groups",
}
# Deprecated aliases MM2 still translates (ConfigUtils.translateDeprecatedConfigs).
_DEPRECATED_ALIASES = {
    "topics.blacklist": "topics.exclude",
    "groups.blacklist": "groups.exclude",
    "config.properties.blacklist": "config.properties.exclude",
}


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ClusterConfig:
    """One cluster alias: its bootstrap servers, cluster-level settings, role overrides."""

    alias: str
    bootstrap_servers: str
    settings: Mapping[str, str]
    overrides: Mapping[str, Mapping[str, str]]
    providers: Mapping[str, str] = field(default_factory=dict)

    def client_config(self, role: str) -> dict[str, str]:
        """Kafka client properties for ``role`` (producer, consumer or admin).

        Cluster-level client settings first, then the role's own overrides, as
        ``MirrorMakerConfig.clusterProps`` pushes them down with ``putIfAbsent``.
        ``${provider:path:key}`` placeholders are left in: :mod:`mirrorflow.kafka.clients`
        resolves them when it creates a client.
        """
        if role not in CLIENT_ROLES:
            raise ValueError(f"unknown client role {role!r}")
        props = {k: v for k, v in self.settings.items() if _CLIENT_LEVEL_RE.match(k)}
        props.update(self.overrides.get(role, {}))
        return props

    def isolation_level(self) -> str:
        """How mirrorflow reads this cluster's transactional records: the consumer role's
        ``isolation.level``, else ``read_committed``. The Java client (and so MM2's source
        consumer) defaults to ``read_uncommitted``; mirrorflow writes with transactions,
        and copying aborted or still-open ones as committed would break that promise."""
        return self.client_config("consumer").get("isolation.level", "").strip() \
            or "read_committed"


@dataclass(frozen=True)
class FlowConfig:
    """One replication flow ``source->target`` with every property resolved."""

    source: str
    target: str
    enabled: bool
    values: Mapping[str, Any]
    explicit: frozenset[str] = field(default_factory=frozenset)
    # Where a partition with no position starts (MM2's source consumer's reset).
    offset_reset: OffsetReset = field(default_factory=OffsetReset)
    # The schema registry transfer of its transform chain (config.transforms), if any.
    schema_transfer: SchemaTransfer | None = None

    @property
    def name(self) -> str:
        return f"{self.source}{FLOW_ARROW}{self.target}"

    @property
    def dag_id(self) -> str:
        return f"mirror__{self.source}__{self.target}"

    def get(self, prop: str) -> Any:
        return self.values[prop]

    def policy(self) -> ReplicationPolicy:
        """The flow's replication policy, configured with its separator and source alias."""
        return load_policy(
            self.values["replication.policy.class"],
            self.values["replication.policy.separator"],
            self.values["replication.policy.internal.topic.separator.enabled"],
            source_cluster_alias=self.source,
        )

    def topic_filter(self) -> TopicFilter:
        return TopicFilter.for_flow(
            self.policy(), self.target, self.values["topics"], self.values["topics.exclude"],
            self.values["heartbeats.replication.enabled"])

    def as_properties(self) -> dict[str, str]:
        """The flow in MM2's own notation, every value rendered as a string."""
        return {k: _render(v) for k, v in self.values.items()}


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ", ".join(value)
    if value is None:
        return "none"
    return str(value)


@dataclass(frozen=True)
class MirrorConfig:
    """The whole file: clusters, every flow it names, and the raw text's digest."""

    clusters: Mapping[str, ClusterConfig]
    flows: Mapping[tuple[str, str], FlowConfig]
    path: Path | None
    digest: str
    warnings: tuple[str, ...] = ()
    text: str = ""  # the file as read: what a Spark worker parses again


    def enabled_flows(self) -> list[FlowConfig]:
        return [f for f in self.flows.values() if f.enabled]

    def flow(self, name: str) -> FlowConfig:
        """Look a flow up by ``SRC->TGT``; an unknown or disabled flow names the choices."""
        source, sep, target = name.partition(FLOW_ARROW)
        if not sep:
            raise ConfigError(f"a flow is written SOURCE{FLOW_ARROW}TARGET, got {name!r}")
        flow = self.flows.get((source.strip(), target.strip()))
        if flow is None or not flow.enabled:
            enabled = ", ".join(f.name for f in self.enabled_flows()) or "none"
            raise ConfigError(f"flow {name!r} is not enabled; enabled flows: {enabled}")
        return flow

    def cluster(self, alias: str) -> ClusterConfig:
        try:
            return self.clusters[alias]
        except KeyError:
            raise ConfigError(
                f"unknown cluster alias {alias!r}; clusters: {', '.join(self.clusters)}"
            ) from None


# --------------------------------------------------------------------------- loading


def load_config(path: str | Path) -> MirrorConfig:
    """Parse and resolve a ``connect-mirror-maker.properties`` file."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        entries = load_properties(path)
    except PropertiesSyntaxError as exc:
        raise ConfigError(str(exc)) from None
    config = resolve(entries, path=path, digest=hashlib.sha256(text).hexdigest())
    return replace(config, text=decode_properties(text))


def parse_config(text: str) -> MirrorConfig:
    """Parse properties given as a string (tests, examples)."""
    try:
        entries = parse_properties(text)
    except PropertiesSyntaxError as exc:
        raise ConfigError(str(exc)) from None
    config = resolve(entries, path=None, digest=hashlib.sha256(text.encode()).hexdigest())
    return replace(config, text=text)


def resolve(entries: list[Entry], *, path: Path | None, digest: str) -> MirrorConfig:
    """Turn parsed entries into clusters and flows, validating every property."""
    warnings: list[str] = []
    latest: dict[str, Entry] = {}
    for entry in entries:
        if entry.key in latest:
            warnings.append(
                f"line {entry.line}: property '{entry.key}' repeats line "
                f"{latest[entry.key].line}; the last value wins"
            )
        latest[entry.key] = entry

    aliases = _cluster_aliases(latest)
    providers = _config_providers(latest)
    clusters = {alias: _cluster(alias, latest, providers) for alias in aliases}
    flow_entries = _flow_entries(latest, aliases)
    defaults = _top_level_flow_defaults(latest, aliases, warnings)

    flows: dict[tuple[str, str], FlowConfig] = {}
    for (source, target), props in flow_entries.items():
        flows[(source, target)] = _flow(source, target, defaults, props, warnings)
    # Every ordered pair exists (disabled unless switched on), as MM2's clusterPairs.
    for source in aliases:
        for target in aliases:
            if source != target and (source, target) not in flows:
                flows[(source, target)] = _flow(source, target, defaults, {}, warnings)

    _refuse_identity_loops(flows, latest)
    _check_isolation(flows, clusters, latest, warnings)
    flows = _with_offset_resets(flows, latest)
    _refuse_shared_dag_ids(flows)
    warnings = [one_line(w) for w in warnings]
    for message in warnings:
        log.warning("%s", message)
    ordered = dict(sorted(flows.items(), key=lambda kv: (aliases.index(kv[0][0]),
                                                           aliases.index(kv[0][1]))))
    return MirrorConfig(clusters, ordered, path, digest, tuple(warnings))


def _cluster_aliases(latest: Mapping[str, Entry]) -> list[str]:
    entry = latest.get("clusters")
    if entry is None or not as_list(entry.value):
        raise ConfigError(
            "'clusters' is required and lists the cluster aliases, e.g. clusters = a, b",
            prop="clusters",
            line=entry.line if entry else None,
        )
    aliases = list(as_list(entry.value))
    seen: set[str] = set()
    for alias in aliases:
        if not _ALIAS_RE.match(alias) or FLOW_ARROW in alias:
            hint = ""
            if "#" in alias:
                hint = (" ('#' starts a comment only at the beginning of a line in a "
                        "properties file; move the comment to its own line)")
            raise ConfigError(
                f"invalid cluster alias {alias!r}: use letters, digits, '.', '_' and '-'{hint}",
                prop="clusters",
                line=entry.line,
            )
        if alias in seen:
            raise ConfigError(f"cluster alias {alias!r} is listed twice", prop="clusters",
                              line=entry.line)
        seen.add(alias)
    return aliases


def _config_providers(latest: Mapping[str, Entry]) -> dict[str, str]:
    """``config.providers`` and their classes; every placeholder must name one of them."""
    from mirrorflow.config.secrets import PROVIDER_CLASSES, placeholders

    entry = latest.get("config.providers")
    names = as_list(entry.value) if entry else ()
    providers: dict[str, str] = {}
    for name in names:
        key = f"config.providers.{name}.class"
        cls = latest.get(key)
        if cls is None or cls.value.strip() not in PROVIDER_CLASSES:
            raise ConfigError(
                f"config provider {name!r} needs a class, one of "
                f"{', '.join(sorted(PROVIDER_CLASSES))}",
                prop=key, line=(cls or entry).line)
        providers[name] = PROVIDER_CLASSES[cls.value.strip()]
    for key, item in latest.items():
        for name in placeholders(item.value):
            if name not in providers:
                raise ConfigError(f"the value refers to config provider {name!r}, which "
                                  "config.providers does not declare", prop=key, line=item.line)
    return providers


def _cluster(alias: str, latest: Mapping[str, Entry],
             providers: Mapping[str, str]) -> ClusterConfig:
    prefix = alias + "."
    own = {k[len(prefix):]: e.value for k, e in latest.items()
           if k.startswith(prefix) and FLOW_ARROW not in k}
    if not own.get("bootstrap.servers", "").strip():
        near = [k for k in latest if k.lower() == f"{alias}.bootstrap.servers".lower()]
        hint = f" (found {near[0]!r}: aliases are case-sensitive)" if near else ""
        raise ConfigError(
            f"cluster {alias!r} has no bootstrap servers{hint}",
            prop=f"{alias}.bootstrap.servers",
            line=latest["clusters"].line,
        )
    settings: dict[str, str] = {}
    overrides: dict[str, dict[str, str]] = {role: {} for role in CLIENT_ROLES}
    # Top-level client settings apply to every cluster that does not set them.
    for key, entry in latest.items():
        if _CLIENT_LEVEL_RE.match(key) and key != "bootstrap.servers":
            settings[key] = entry.value
    for key, value in own.items():
        role, dot, rest = key.partition(".")
        if dot and role in CLIENT_ROLES:
            overrides[role][rest] = value
        else:
            settings[key] = value
    return ClusterConfig(alias, own["bootstrap.servers"].strip(), settings, overrides,
                         dict(providers))


def _split_flow_key(key: str, aliases: list[str], line: int) -> tuple[str, str, str]:
    source, _, rest = key.partition(FLOW_ARROW)
    # A target alias may itself contain dots: take the longest alias that prefixes rest.
    target = max((a for a in aliases if rest.startswith(a + ".")), key=len, default=None)
    if source not in aliases or target is None:
        bad = source if source not in aliases else rest.split(".")[0]
        raise ConfigError(
            f"flow refers to unknown cluster alias {bad!r}; clusters: {', '.join(aliases)}",
            prop=key,
            line=line,
        )
    if source == target:
        raise ConfigError(f"a flow from cluster {source!r} to itself is not allowed",
                          prop=key, line=line)
    return source, target, rest[len(target) + 1:]


def _flow_entries(
    latest: Mapping[str, Entry], aliases: list[str]
) -> dict[tuple[str, str], dict[str, Entry]]:
    flows: dict[tuple[str, str], dict[str, Entry]] = {}
    for key, entry in latest.items():
        if FLOW_ARROW not in key:
            continue
        source, target, prop = _split_flow_key(key, aliases, entry.line)
        flows.setdefault((source, target), {})[prop] = entry
    return flows


# Flow properties MM2 reads only per flow: MirrorMakerConfig.connectorBaseConfig keeps of
# the top-level properties only those its connectors define, and the default config
# property filter's own are not among them. At the top level, anything but the default
# is refused (mirrorflow would honour what MM2 drops).
_FLOW_ONLY_IN_MM2 = frozenset({"use.defaults.from"})


def _top_level_flow_defaults(
    latest: Mapping[str, Entry], aliases: list[str], warnings: list[str]
) -> dict[str, Entry]:
    defaults: dict[str, Entry] = {}
    for key, entry in latest.items():
        if FLOW_ARROW in key:
            continue
        head = key.split(".", 1)[0]
        if head in aliases:
            continue
        canonical = _DEPRECATED_ALIASES.get(key, key)
        if key in _FLOW_ONLY_IN_MM2 and entry.value.strip() != FLOW_PROPERTIES[key].default:
            raise ConfigError(
                f"MM2 silently ignores '{key}' at the top level (dedicated mode passes its "
                "connectors only their own properties, and this one is its config "
                f"filter's): write it per flow, 'SOURCE->TARGET.{key}', so that MM2 and "
                "mirrorflow both honour it", prop=key, line=entry.line)
        if canonical in FLOW_PROPERTIES or transforms.is_transform_key(key):
            defaults[canonical] = entry
        elif (key in _TOP_LEVEL_KEYS or _CLIENT_LEVEL_RE.match(key)
              or re.fullmatch(r"config\.providers\.[^.]+\.(class|param\..+)", key)):
            continue
        elif connect_settings.find(key) is not None:
            _refuse_or_ignore(key, entry, "every flow", warnings)
        else:
            warnings.append(_unknown_warning(key, entry.line, aliases))
    return defaults


def _refuse_or_ignore(full: str, entry: Entry, scope: str, warnings: list[str],
                      setting_key: str | None = None) -> None:
    """A Connect setting: refused by name when it would change what MM2 copies, else
    reported as ignored."""
    reason = connect_settings.refusal(setting_key or full, entry.value)
    if reason:
        raise ConfigError(f"{reason} (for {scope})", prop=full, line=entry.line)
    warnings.append(f"line {entry.line}: property '{full}' is a Kafka Connect setting "
                    "that mirrorflow ignores")


def _unknown_warning(key: str, line: int, aliases: list[str]) -> str:
    message = f"line {line}: unknown property '{key}' is ignored"
    close_alias = [a for a in aliases if key.lower().startswith(a.lower() + ".")]
    if close_alias:
        return message + f" (cluster aliases are case-sensitive: did you mean '{close_alias[0]}'?)"
    suggestion = difflib.get_close_matches(key, FLOW_PROPERTIES, n=1)
    if suggestion:
        return message + f" (did you mean '{suggestion[0]}'?)"
    return message


def _flow(
    source: str,
    target: str,
    defaults: Mapping[str, Entry],
    own: Mapping[str, Entry],
    warnings: list[str],
) -> FlowConfig:
    prefix = f"{source}{FLOW_ARROW}{target}."
    chosen: dict[str, tuple[Entry, str]] = {k: (e, k) for k, e in defaults.items()}
    enabled = False
    for prop, entry in own.items():
        full = prefix + prop
        if prop == "enabled":
            enabled = _parse_value(as_bool, entry, full)
            continue
        if prop in _MISSPELLINGS and prop not in _DEPRECATED_ALIASES:
            raise ConfigError(
                f"MM2 silently ignores '{full}'; the property is "
                f"'{prefix}{_MISSPELLINGS[prop]}'",
                prop=full,
                line=entry.line,
            )
        canonical = _DEPRECATED_ALIASES.get(prop, prop)
        if canonical != prop:
            warnings.append(f"line {entry.line}: '{full}' is deprecated; use "
                            f"'{prefix}{canonical}'")
        if canonical in FLOW_PROPERTIES or transforms.is_transform_key(prop):
            chosen[canonical] = (entry, full)
        elif prop in offset_reset.FLOW_KEYS:
            continue  # resolved with the cluster's own (_with_offset_resets)
        elif prop in ("consumer.isolation.level", "source.consumer.isolation.level"):
            raise ConfigError(
                f"decides which records flow {source}{FLOW_ARROW}{target} copies, and "
                "mirrorflow reads a cluster the same way for every flow: set "
                f"'{source}.consumer.isolation.level' instead", prop=full, line=entry.line)
        elif connect_settings.find(prop) is not None:
            _refuse_or_ignore(full, entry, f"flow {source}{FLOW_ARROW}{target}", warnings,
                              setting_key=prop)
        elif prop.split(".")[0] in CLIENT_ROLES:
            warnings.append(f"line {entry.line}: property '{full}' is a Kafka Connect setting "
                            "that mirrorflow ignores")
        else:
            suggestion = difflib.get_close_matches(prop, FLOW_PROPERTIES, n=1)
            hint = f" (did you mean '{prefix}{suggestion[0]}'?)" if suggestion else ""
            warnings.append(f"line {entry.line}: unknown flow property '{full}' is ignored{hint}")

    values: dict[str, Any] = {}
    for name, spec in FLOW_PROPERTIES.items():
        if name in chosen:
            entry, full = chosen[name]
            values[name] = _parse_value(spec.parse, entry, full)
        else:
            values[name] = spec.parse(spec.default)
    _load_policy_or_fail(values, chosen)
    transfer = transforms.parse(f"{source}{FLOW_ARROW}{target}", {
        k: pair for k, pair in chosen.items() if transforms.is_transform_key(k)})
    return FlowConfig(source, target, enabled, values,
                      frozenset(k for k in chosen if k in FLOW_PROPERTIES),
                      schema_transfer=transfer)


def _parse_value(parse: Callable[[str], Any], entry: Entry, full: str) -> Any:
    try:
        return parse(entry.value)
    except ValueError as exc:
        raise ConfigError(str(exc), prop=full, line=entry.line) from None


def _load_policy_or_fail(values: dict[str, Any], chosen: Mapping[str, tuple[Entry, str]]) -> None:
    """Fail at load time, naming the property, when the policy class cannot be loaded."""
    try:
        load_policy(values["replication.policy.class"], values["replication.policy.separator"],
                    values["replication.policy.internal.topic.separator.enabled"])
    except PolicyError as exc:
        entry, full = chosen.get("replication.policy.class", (None, "replication.policy.class"))
        raise ConfigError(str(exc), prop=full, line=entry.line if entry else None) from None


def _refuse_identity_loops(
    flows: Mapping[tuple[str, str], FlowConfig], latest: Mapping[str, Entry]
) -> None:
    """IdentityReplicationPolicy cannot detect cycles (MM2 docs say so); refuse them.

    A flow s->t under the identity policy loops when s is reachable again from t through
    enabled flows: records would come back to s under their own name and go round forever.
    """
    edges: dict[str, set[str]] = {}
    for (source, target), flow in flows.items():
        if flow.enabled:
            edges.setdefault(source, set()).add(target)
    for (source, target), flow in flows.items():
        if not flow.enabled or not isinstance(flow.policy(), IdentityReplicationPolicy):
            continue
        path = _find_path(edges, target, source)
        if path:
            key = f"{flow.name}.replication.policy.class"
            entry = latest.get(key) or latest.get("replication.policy.class")
            cycle = FLOW_ARROW.join([source, *path])
            raise ConfigError(
                f"IdentityReplicationPolicy keeps topic names, so the enabled flows "
                f"{cycle} would replicate records in a loop; use DefaultReplicationPolicy "
                "or disable one direction",
                prop=key if key in latest else "replication.policy.class",
                line=entry.line if entry else None,
            )


def _check_isolation(flows: Mapping[tuple[str, str], FlowConfig],
                     clusters: Mapping[str, ClusterConfig], latest: Mapping[str, Entry],
                     warnings: list[str]) -> None:
    """A flow that reads its source ``read_uncommitted`` copies aborted and open
    transactions as committed records: refused under ``exactly.once.support = required``
    (as MM2's ``MirrorSourceConnector.validateExactlyOnceConfigs``), warned about else."""
    for flow in flows.values():
        level = clusters[flow.source].isolation_level()
        if not flow.enabled or level == "read_committed":
            continue
        setting = f"{flow.source}.consumer.isolation.level"
        if flow.get("exactly.once.support") == "required":
            key = f"{flow.name}.exactly.once.support"
            key = key if key in latest else "exactly.once.support"
            raise ConfigError(
                f"flow {flow.name} requires exactly-once delivery but reads its source with "
                f"'{setting} = {level}', which copies records of aborted and open "
                f"transactions; remove '{setting}' (mirrorflow reads read_committed) or set "
                "exactly.once.support = requested",
                prop=key, line=latest[key].line if key in latest else None)
        line = latest[setting].line if setting in latest else 0
        warnings.append(f"line {line}: flow {flow.name} reads its source "
                        f"with '{setting} = {level}': records of aborted and open "
                        "transactions are mirrored as committed ones, and each run's report "
                        "says so")


def _with_offset_resets(flows: Mapping[tuple[str, str], FlowConfig],
                        latest: Mapping[str, Entry]) -> dict[tuple[str, str], FlowConfig]:
    """Each flow with its source consumer's ``auto.offset.reset`` (:mod:`offset_reset`)."""
    out = {}
    for key, flow in flows.items():
        try:
            reset = offset_reset.resolve(flow.name, flow.source, latest)
        except offset_reset.InvalidReset as exc:
            raise ConfigError(str(exc), prop=exc.key, line=exc.entry.line) from None
        out[key] = replace(flow, offset_reset=reset)
    return out


def _refuse_shared_dag_ids(flows: Mapping[tuple[str, str], FlowConfig]) -> None:
    """Two flows whose aliases join to one DAG id (``a__b``->``c`` and ``a``->``b__c``):
    Airflow would keep one DAG and silently lose the other."""
    seen: dict[str, FlowConfig] = {}
    for flow in flows.values():
        if not flow.enabled:
            continue
        other = seen.setdefault(flow.dag_id, flow)
        if other is not flow:
            raise ConfigError(
                f"flows {other.name} and {flow.name} would both be the DAG {flow.dag_id!r} "
                "and Airflow would keep only one: rename a cluster alias so that '__' does "
                "not join them", prop="clusters")


def _find_path(edges: Mapping[str, set[str]], start: str, goal: str) -> list[str] | None:
    """Breadth-first path start..goal over enabled flows, or None."""
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        if node == goal:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for nxt in sorted(edges.get(node, ())):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return None
