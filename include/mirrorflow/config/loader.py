"""Loading ``connect-mirror-maker.properties`` into the model
(:mod:`mirrorflow.config.model`), as ``org.apache.kafka.connect.mirror.MirrorMakerConfig``
resolves it (see the model's note); every property validated, every refusal naming it."""

from __future__ import annotations

import difflib
import hashlib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from mirrorflow.config import connect_settings, offset_reset, transforms
from mirrorflow.config.errors import ConfigError, one_line
from mirrorflow.config.model import (
    CLIENT_LEVEL_RE,
    CLIENT_ROLES,
    FLOW_ARROW,
    FLOW_PROPERTIES,
    ClusterConfig,
    FlowConfig,
    MirrorConfig,
)
from mirrorflow.config.policy import IdentityReplicationPolicy, PolicyError, load_policy
from mirrorflow.config.properties import (
    Entry,
    PropertiesSyntaxError,
    decode_properties,
    load_properties,
    parse_properties,
)
from mirrorflow.config.secrets import PROVIDER_CLASSES, placeholders
from mirrorflow.config.values import as_bool, as_list

log = logging.getLogger(__name__)

_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")

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
        if CLIENT_LEVEL_RE.match(key) and key != "bootstrap.servers":
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
        elif (key in _TOP_LEVEL_KEYS or CLIENT_LEVEL_RE.match(key)
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
