"""A flow's transform chain, as MM2 users configure it: the one transform mirrorflow runs
is the community Schema Registry Transfer SMT (``cricket.jmoore.kafka.connect.transforms.
SchemaRegistryTransfer``), which registers each record's schema in the target's registry
and rewrites the record's schema id (see docs/schemas.md)::

    east->west.transforms = T
    east->west.transforms.T.type = cricket.jmoore.kafka.connect.transforms.SchemaRegistryTransfer
    east->west.transforms.T.src.schema.registry.url = http://registry-east:8081
    east->west.transforms.T.dest.schema.registry.url = http://registry-west:8081

Top-level ``transforms*`` properties are every flow's defaults, a flow's own override
them key by key (as ``MirrorMakerConfig.connectorBaseConfig`` merges them). Any other
transform type, a second transfer, a predicate or an option the SMT does not define is
refused by name: each would change what is copied, or be silently dropped.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

from mirrorflow.config.errors import ConfigError
from mirrorflow.config.properties import Entry
from mirrorflow.config.values import as_bool, as_list, as_positive_int

SMT_CLASS = "cricket.jmoore.kafka.connect.transforms.SchemaRegistryTransfer"
CREDENTIAL_SOURCES = ("URL", "USER_INFO", "SASL_INHERIT")
STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
_STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."

# The SMT's own options (its ConfigDef) and the two mirrorflow adds, as Confluent's
# serializers name them: the subject-name strategy of keys and of values.
_OPTIONS = ("type", "src.schema.registry.url", "dest.schema.registry.url",
            "src.basic.auth.credentials.source", "src.basic.auth.user.info",
            "dest.basic.auth.credentials.source", "dest.basic.auth.user.info",
            "schema.capacity", "transfer.message.keys", "include.message.headers",
            "key.subject.name.strategy", "value.subject.name.strategy")


def is_transform_key(prop: str) -> bool:
    """Whether a flow property belongs to the transform chain (or its predicates)."""
    return prop in ("transforms", "predicates") or prop.startswith(("transforms.",
                                                                    "predicates."))


@dataclass(frozen=True)
class RegistrySide:
    """How to reach one side's schema registry (confluent-kafka's client settings)."""

    urls: tuple[str, ...]
    credentials_source: str = "URL"
    user_info: str = field(default="", repr=False)  # a secret: may be a ${...} placeholder

    @property
    def url(self) -> str:
        return ",".join(self.urls)


@dataclass(frozen=True)
class SchemaTransfer:
    """The flow's Schema Registry Transfer: where schemas come from and go to, and how."""

    name: str
    source: RegistrySide
    target: RegistrySide
    capacity: int = 100
    transfer_keys: bool = True
    include_headers: bool = True
    key_strategy: str = "TopicNameStrategy"
    value_strategy: str = "TopicNameStrategy"

    def strategy(self, field_name: str) -> str:
        return self.key_strategy if field_name == "key" else self.value_strategy

    @property
    def fields(self) -> tuple[str, ...]:
        """The record parts whose schema ids are transferred."""
        return ("key", "value") if self.transfer_keys else ("value",)


def _strategy(raw: str) -> str:
    value = raw.strip()
    short = value[len(_STRATEGY_PACKAGE):] if value.startswith(_STRATEGY_PACKAGE) else value
    if short not in STRATEGIES:
        raise ValueError(f"expected one of {', '.join(STRATEGIES)} (or its class name "
                         f"{_STRATEGY_PACKAGE}...), got {raw!r}")
    return short


def _credentials_source(raw: str) -> str:
    value = raw.strip().upper()
    if value not in CREDENTIAL_SOURCES:
        raise ValueError(f"expected one of {', '.join(CREDENTIAL_SOURCES)}, got {raw!r}")
    return value


def parse(flow_name: str, entries: Mapping[str, tuple[Entry, str]]) -> SchemaTransfer | None:
    """The flow's transfer from its transform properties (property -> (entry, the key
    as written in the file)), None without a chain; refuses what it cannot run."""
    for prop, (entry, full) in entries.items():
        if prop == "predicates" or prop.startswith("predicates."):
            raise ConfigError(
                "predicates decide which records a transform skips, and mirrorflow does not "
                "evaluate them: remove them (mirrorflow never transfers heartbeats, the "
                "records a predicate usually exempts)", prop=full, line=entry.line)
    chain = entries.get("transforms")
    names = as_list(chain[0].value) if chain else ()
    for prop, (entry, full) in entries.items():
        if prop.startswith("transforms.") and prop.split(".")[1] not in names:
            raise ConfigError(f"transform {prop.split('.')[1]!r} is not in the flow's "
                              f"'transforms' list ({', '.join(names) or 'empty'}): add it "
                              "there or remove its properties", prop=full, line=entry.line)
    if not names:
        return None
    if len(names) > 1:
        entry, full = chain
        raise ConfigError(f"flow {flow_name} lists {len(names)} transforms; mirrorflow runs "
                          f"one, the schema registry transfer ({SMT_CLASS}): keep that one, "
                          "or keep this flow on MM2", prop=full, line=entry.line)
    name = names[0]
    own = {prop[len(f"transforms.{name}."):]: pair for prop, pair in entries.items()
           if prop.startswith(f"transforms.{name}.")}
    kind = own.get("type")
    if kind is None or kind[0].value.strip() != SMT_CLASS:
        entry, full = kind or chain
        shown = kind[0].value.strip() if kind else "no type"
        raise ConfigError(
            f"transform {name!r} is {shown}: mirrorflow runs only the schema registry "
            f"transfer ({SMT_CLASS}) and copies records otherwise unchanged; remove the "
            "transform (rename remote topics with 'replication.policy.class') or keep this "
            "flow on MM2", prop=full, line=entry.line)
    for option, (entry, full) in own.items():
        if option not in _OPTIONS:
            close = difflib.get_close_matches(option, _OPTIONS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"the schema registry transfer has no option {option!r}"
                              f"{hint}", prop=full, line=entry.line)

    def value(option: str, parse_value, default: str):
        entry, full = own.get(option, (None, f"{flow_name}.transforms.{name}.{option}"))
        try:
            return parse_value(entry.value if entry else default)
        except ValueError as exc:
            raise ConfigError(str(exc), prop=full,
                              line=entry.line if entry else None) from None

    def side(prefix: str) -> RegistrySide:
        urls = value(f"{prefix}.schema.registry.url", as_list, "")
        if not urls:
            raise ConfigError(f"the schema registry transfer {name!r} needs the "
                              f"{'source' if prefix == 'src' else 'target'} registry's "
                              "address", prop=f"{flow_name}.transforms.{name}.{prefix}"
                                              ".schema.registry.url")
        return RegistrySide(urls, value(f"{prefix}.basic.auth.credentials.source",
                                        _credentials_source, "URL"),
                            value(f"{prefix}.basic.auth.user.info", str.strip, ""))

    return SchemaTransfer(
        name, side("src"), side("dest"),
        capacity=value("schema.capacity", as_positive_int, "100"),
        transfer_keys=value("transfer.message.keys", as_bool, "true"),
        include_headers=value("include.message.headers", as_bool, "true"),
        key_strategy=value("key.subject.name.strategy", _strategy, "TopicNameStrategy"),
        value_strategy=value("value.subject.name.strategy", _strategy, "TopicNameStrategy"))
