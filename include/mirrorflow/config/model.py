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

Every flow property is resolved to a typed value with MM2's default
(:mod:`mirrorflow.config.loader` reads the file). :data:`FLOW_PROPERTIES` gathers them
from one module per MM2 config class, as MM2 cuts its own: ``source_config``
(``MirrorSourceConfig``), ``checkpoint_config``, ``heartbeat_config``, ``connector_config``
(``MirrorConnectorConfig`` and the Connect settings MM2 honours), and ``mirrorflow_config``:
what this project adds beyond MM2 (``mirrorflow.*`` and the Spark-style
``failOnDataLoss``), documented like MM2's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirrorflow.config.checkpoint_config import CHECKPOINT_SPECS
from mirrorflow.config.connector_config import CONNECTOR_SPECS
from mirrorflow.config.errors import ConfigError
from mirrorflow.config.heartbeat_config import HEARTBEAT_SPECS
from mirrorflow.config.mirrorflow_config import MIRRORFLOW_SPECS
from mirrorflow.config.offset_reset import OffsetReset
from mirrorflow.config.policy import ReplicationPolicy, TopicFilter, load_policy
from mirrorflow.config.property_spec import PropertySpec
from mirrorflow.config.source_config import SOURCE_SPECS
from mirrorflow.config.transforms import SchemaTransfer

CLIENT_ROLES = ("producer", "consumer", "admin")
FLOW_ARROW = "->"
# Cluster-level keys that are Kafka client settings (MirrorClientConfig.CLIENT_CONFIG_DEF
# holds bootstrap.servers, security.protocol and the ssl/sasl families).
CLIENT_LEVEL_RE = re.compile(r"^(bootstrap\.servers|security\.protocol|ssl\..+|sasl\..+)$")


FLOW_PROPERTIES: dict[str, PropertySpec] = {spec.name: spec for spec in (
    *SOURCE_SPECS, *CHECKPOINT_SPECS, *HEARTBEAT_SPECS, *CONNECTOR_SPECS, *MIRRORFLOW_SPECS)}


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
        props = {k: v for k, v in self.settings.items() if CLIENT_LEVEL_RE.match(k)}
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
