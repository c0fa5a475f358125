"""The MM2 configuration model: defaults, precedence, client overrides and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorflow.config.errors import ConfigError
from mirrorflow.config.loader import load_config, parse_config
from mirrorflow.config.model import FLOW_PROPERTIES

BASE = """
clusters = a, b
a.bootstrap.servers = a1:9092
b.bootstrap.servers = b1:9092
a->b.enabled = true
"""

# MM2's defaults, as the Apache Kafka sources define them (MirrorSourceConfig,
# MirrorCheckpointConfig, MirrorHeartbeatConfig, MirrorConnectorConfig,
# DefaultTopicFilter, DefaultGroupFilter, DefaultConfigPropertyFilter) and Connect's.
MM2_DEFAULTS = {
    "topics": (".*",),
    "topics.exclude": (r"mm2.*\.internal", r".*\.replica", "__.*"),
    "config.properties.exclude": (
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    ),
    "groups": (".*",),
    "groups.exclude": ("console-consumer-.*", "connect-.*", "__.*"),
    "refresh.topics.enabled": True,
    "refresh.topics.interval.seconds": 600,
    "refresh.groups.enabled": True,
    "refresh.groups.interval.seconds": 600,
    "sync.topic.configs.enabled": True,
    "sync.topic.configs.interval.seconds": 600,
    "sync.topic.acls.enabled": True,
    "sync.topic.acls.interval.seconds": 600,
    "use.defaults.from": "target",
    "emit.heartbeats.enabled": True,
    "heartbeats.replication.enabled": True,
    "emit.heartbeats.interval.seconds": 1,
    "emit.checkpoints.enabled": True,
    "emit.checkpoints.interval.seconds": 60,
    "sync.group.offsets.enabled": False,
    "sync.group.offsets.interval.seconds": 60,
    "offset-syncs.topic.location": "source",
    "emit.offset-syncs.enabled": True,
    "offset.lag.max": 100,
    "replication.factor": 2,
    "offset-syncs.topic.replication.factor": 3,
    "checkpoints.topic.replication.factor": 3,
    "heartbeats.topic.replication.factor": 3,
    "replication.policy.class": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
    "replication.policy.separator": ".",
    "replication.policy.internal.topic.separator.enabled": True,
    "exactly.once.support": "requested",
    "tasks.max": 1,
}
MIRRORFLOW_DEFAULTS = {
    "mirrorflow.schedule": "*/5 * * * *",
    "mirrorflow.schedule.spread.seconds": 60,
    "mirrorflow.spark.master": "local[*]",
    "mirrorflow.spark.conn.id": "spark_default",
    "mirrorflow.retry.delay.seconds": 15,
    "mirrorflow.cluster.wait.seconds": 120,
    "mirrorflow.task.timeout.seconds": 600,
    "mirrorflow.mirror.timeout.seconds": 7200,
    "mirrorflow.mirror.repeat.seconds": 0,
    "mirrorflow.lease.timeout.seconds": 30,
    "mirrorflow.lease.wait.seconds": 60,
    "mirrorflow.lease.run.timeout.seconds": 900,
    "mirrorflow.transaction.records": 100000,
    "mirrorflow.write.tasks": 8,
    "mirrorflow.write.records.per.task": 50_000,
    "mirrorflow.max.records.per.partition": 1_000_000,
    "mirrorflow.records.per.spark.partition": 2_000_000,
    "mirrorflow.validate.fraction": 1.0,
    "mirrorflow.validate.expectations.dir": "",
    "mirrorflow.reports.retention.runs": 1000,
    "mirrorflow.reports.retention.days": 7,
    "mirrorflow.alert.max.lag.records": -1,
    "mirrorflow.alert.max.heartbeat.age.ms": -1,
    "failOnDataLoss": True,
}


@pytest.mark.parametrize("prop", sorted({**MM2_DEFAULTS, **MIRRORFLOW_DEFAULTS}))
def test_every_property_default(prop: str) -> None:
    flow = parse_config(BASE).flow("a->b")
    expected = {**MM2_DEFAULTS, **MIRRORFLOW_DEFAULTS}[prop]
    assert flow.get(prop) == expected


def test_defaults_table_covers_every_property() -> None:
    assert set(FLOW_PROPERTIES) == set(MM2_DEFAULTS) | set(MIRRORFLOW_DEFAULTS)


def test_flows_are_disabled_unless_enabled() -> None:
    config = parse_config(BASE)
    assert [f.name for f in config.enabled_flows()] == ["a->b"]
    assert not config.flows[("b", "a")].enabled
    with pytest.raises(ConfigError, match="'b->a' is not enabled; enabled flows: a->b"):
        config.flow("b->a")


def test_flow_override_beats_top_level_default() -> None:
    config = parse_config(BASE + "topics = x.*\nemit.checkpoints.interval.seconds = 5\n"
                          "a->b.topics = orders.*, payments\nb->a.enabled = true\n")
    assert config.flow("a->b").get("topics") == ("orders.*", "payments")
    assert config.flow("b->a").get("topics") == ("x.*",)
    assert config.flow("a->b").get("emit.checkpoints.interval.seconds") == 5
    assert config.flow("a->b").explicit >= {"topics", "emit.checkpoints.interval.seconds"}


def test_booleans_are_case_insensitive_like_java() -> None:
    config = parse_config(BASE.replace("a->b.enabled = true", "a->b.enabled = TRUE"))
    assert config.flow("a->b").enabled


def test_client_overrides_per_role() -> None:
    config = parse_config(BASE + """
security.protocol = SASL_SSL
a.ssl.ca.location = /etc/ca.pem
a.producer.compression.type = lz4
a.consumer.isolation.level = read_committed
a.admin.bootstrap.servers = admin-a:9092
a.admin.security.protocol = SSL
a.offset.storage.topic = my-offsets
""")
    a = config.cluster("a")
    assert a.bootstrap_servers == "a1:9092"
    assert a.client_config("producer") == {
        "bootstrap.servers": "a1:9092", "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/etc/ca.pem", "compression.type": "lz4"}
    assert a.client_config("consumer")["isolation.level"] == "read_committed"
    assert a.client_config("admin") == {
        "security.protocol": "SSL", "ssl.ca.location": "/etc/ca.pem",
        "bootstrap.servers": "admin-a:9092"}
    # Cluster-level non-client settings are kept but never handed to a client.
    assert a.settings["offset.storage.topic"] == "my-offsets"
    assert "offset.storage.topic" not in a.client_config("producer")
    # Top-level client settings reach every cluster.
    assert config.cluster("b").client_config("consumer") == {
        "bootstrap.servers": "b1:9092", "security.protocol": "SASL_SSL"}


def test_deprecated_blacklist_alias_is_translated_with_a_warning() -> None:
    config = parse_config(BASE + "a->b.topics.blacklist = secret.*\n")
    assert config.flow("a->b").get("topics.exclude") == ("secret.*",)
    assert any("deprecated" in w for w in config.warnings)


def test_unknown_keys_warn_with_a_suggestion() -> None:
    config = parse_config(BASE + "a->b.topcs = x\nemit.hearbeats.enabled = false\nzzz = 1\n")
    warnings = "\n".join(config.warnings)
    assert "unknown flow property 'a->b.topcs'" in warnings
    assert "did you mean 'a->b.topics'" in warnings
    assert "did you mean 'emit.heartbeats.enabled'" in warnings
    assert "unknown property 'zzz'" in warnings


def test_connect_worker_settings_are_accepted_and_flagged() -> None:
    config = parse_config(BASE + "offset.storage.replication.factor = 1\n"
                          "key.converter.schemas.enable = false\n")
    assert config.warnings == (
        "line 6: property 'offset.storage.replication.factor' is a Kafka Connect setting "
        "that mirrorflow ignores",
        "line 7: property 'key.converter.schemas.enable' is a Kafka Connect setting that "
        "mirrorflow ignores")


def test_duplicate_key_last_wins_with_a_warning() -> None:
    config = parse_config(BASE + "a->b.topics = one\na->b.topics = two\n")
    assert config.flow("a->b").get("topics") == ("two",)
    assert any("repeats line" in w for w in config.warnings)


def test_schedule_none_means_manual() -> None:
    config = parse_config(BASE + "a->b.mirrorflow.schedule = none\n")
    assert config.flow("a->b").get("mirrorflow.schedule") is None


# ----------------------------------------------------------------------------- errors


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    return str(info.value)


def test_missing_clusters() -> None:
    assert "'clusters' is required" in error_of("a.bootstrap.servers = x:1\n")


def test_unknown_alias_in_flow() -> None:
    message = error_of(BASE + "a->c.enabled = true\n")
    assert message.startswith("line 6, property 'a->c.enabled'")
    assert "unknown cluster alias 'c'" in message


def test_unknown_source_alias_in_flow() -> None:
    assert "unknown cluster alias 'x'" in error_of(BASE + "x->b.topics = t\n")


def test_flow_to_itself() -> None:
    message = error_of(BASE + "a->a.enabled = true\n")
    assert "property 'a->a.enabled'" in message and "to itself" in message


def test_cluster_without_bootstrap_servers() -> None:
    message = error_of("clusters = a, b\na.bootstrap.servers = x:1\n")
    assert "property 'b.bootstrap.servers'" in message
    assert "line 1" in message


def test_invalid_regex() -> None:
    message = error_of(BASE + "a->b.topics = orders.*, (unclosed\n")
    assert message.startswith("line 6, property 'a->b.topics'")
    assert "invalid regular expression '(unclosed'" in message


def test_invalid_regex_in_top_level_default() -> None:
    assert "property 'groups.exclude'" in error_of(BASE + "groups.exclude = [\n")


def test_non_numeric_interval() -> None:
    message = error_of(BASE + "a->b.emit.checkpoints.interval.seconds = 1m\n")
    assert "property 'a->b.emit.checkpoints.interval.seconds'" in message
    assert "expected a whole number, got '1m'" in message


def test_bad_boolean_and_enum() -> None:
    assert "expected true or false" in error_of(BASE + "a->b.sync.group.offsets.enabled = yes\n")
    assert "expected one of source, target" in error_of(
        BASE + "offset-syncs.topic.location = middle\n")


def test_enable_misspelling_names_the_right_key() -> None:
    message = error_of(BASE.replace("a->b.enabled", "a->b.enable"))
    assert "property 'a->b.enable'" in message
    assert "'a->b.enabled'" in message


def test_use_defaults_from_source_at_the_top_level_is_refused_as_mm2_drops_it() -> None:
    """MM2 (dedicated mode) reads use.defaults.from only per flow: at the top level
    mirrorflow would copy the source's defaults where MM2 copies none (test_mm2_oracle
    holds the per-flow form against MM2)."""
    message = error_of(BASE + "use.defaults.from = source\n")
    assert message.startswith("line 6, property 'use.defaults.from': MM2 silently ignores "
                              "'use.defaults.from' at the top level")
    assert "write it per flow, 'SOURCE->TARGET.use.defaults.from'" in message
    flow = parse_config(BASE + "use.defaults.from = target\na->b.use.defaults.from = source\n"
                        ).flow("a->b")
    assert flow.get("use.defaults.from") == "source"


def test_java_class_policy_that_is_not_builtin() -> None:
    message = error_of(BASE + "replication.policy.class = com.acme.MyPolicy\n")
    assert "property 'replication.policy.class'" in message and "Java class" in message


def test_bad_schedule() -> None:
    assert "cron" in error_of(BASE + "a->b.mirrorflow.schedule = often\n")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.properties")


# ---------------------------------------------------- the Apache Kafka docs' examples


def test_docs_six_cluster_twelve_flow_example(fixtures: Path) -> None:
    config = load_config(fixtures / "geo_six_clusters.properties")
    assert list(config.clusters) == ["west-1", "west-2", "east-1", "east-2", "north-1", "north-2"]
    names = sorted(f.name for f in config.enabled_flows())
    assert names == sorted([
        "west-1->west-2", "west-2->west-1", "east-1->east-2", "east-2->east-1",
        "north-1->north-2", "north-2->north-1", "west-1->east-1", "west-1->north-1",
        "east-1->west-1", "east-1->north-1", "north-1->west-1", "north-1->east-1"])
    assert len(config.flows) == 30  # every ordered pair exists, as MM2's clusterPairs
    assert config.warnings == ()


def test_docs_unidirectional_example(fixtures: Path) -> None:
    config = load_config(fixtures / "geo_unidirectional.properties")
    assert [f.name for f in config.enabled_flows()] == ["primary->secondary"]
    assert config.flow("primary->secondary").get("topics") == ("foo.*",)


def test_docs_full_reference_example(fixtures: Path) -> None:
    config = load_config(fixtures / "geo_full_reference.properties")
    flow = config.flow("us-west->us-east")
    assert flow.get("topics") == ("foo.*",)
    assert flow.get("groups") == ("bar.*",)
    assert flow.get("emit.heartbeats.enabled") is False
    assert flow.get("tasks.max") == 5
    assert flow.policy().format_remote_topic("us-west", "foo-topic") == "us-west_foo-topic"
    east = config.cluster("us-east")
    assert east.client_config("producer")["compression.type"] == "gzip"
    assert east.client_config("admin")["bootstrap.servers"] == "broker8-secondary:9092"
    assert east.client_config("consumer")["security.protocol"] == "SSL"
    assert config.cluster("us-west").client_config("consumer")["isolation.level"] == (
        "read_committed")


def test_docs_example_with_enable_is_an_error(fixtures: Path) -> None:
    with pytest.raises(ConfigError, match=r"'primary->secondary\.enabled'"):
        load_config(fixtures / "geo_enable_misspelt.properties")


def test_docs_example_with_inline_comment_is_an_error(fixtures: Path) -> None:
    with pytest.raises(ConfigError, match="'#' starts a comment only at the beginning"):
        load_config(fixtures / "geo_us_west_east.properties")


def test_docs_example_with_wrong_case_alias_is_an_error(fixtures: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(fixtures / "geo_bidirectional_case.properties")
    assert "property 'us-east.bootstrap.servers'" in str(info.value)
    assert "case-sensitive" in str(info.value)


def test_bundled_default_config(repo: Path) -> None:
    config = load_config(repo / "include" / "config" / "mm2.properties")
    assert [f.name for f in config.enabled_flows()] == ["primary->backup"]
    assert config.warnings == ()


@pytest.mark.spark
def test_every_mm2_default_is_mm2_4_3_1s() -> None:
    """Each MM2 property's default against the ConfigDefs of MM2's own connectors, read from
    the connect-mirror jar (jvm/pom.xml's mm2 classpath) in a JVM: no default can drift."""
    from helpers.kafka import mm2_jvm

    with mm2_jvm() as gateway:
        mirror = gateway.jvm.org.apache.kafka.connect.mirror
        theirs: dict[str, object] = {}
        for connector in ("MirrorSourceConnector", "MirrorCheckpointConnector",
                          "MirrorHeartbeatConnector"):
            defaults = getattr(mirror, connector)().config().defaultValues()
            for key in defaults.keySet():
                value = defaults.get(key)
                kind = "" if isinstance(value, (str, int, float, type(None))) else \
                    value.getClass().getName()
                if kind == "java.lang.Class":
                    value = value.getName()
                elif kind.endswith("List"):
                    value = tuple(str(v) for v in value)
                theirs[str(key)] = value
        # use.defaults.from belongs to DefaultConfigPropertyFilter's own (private) ConfigDef:
        # configured with nothing, the filter says whether a source default is copied.
        config_filter = mirror.DefaultConfigPropertyFilter()
        config_filter.configure(gateway.jvm.java.util.HashMap())
        theirs["use.defaults.from"] = ("source" if config_filter.shouldReplicateSourceDefault(
            "retention.ms") else "target")
    mm2 = {name: spec.parse(spec.default) for name, spec in FLOW_PROPERTIES.items()
           if spec.origin == "MM2"}
    assert {name: theirs.get(name, "<not an MM2 property>") for name in mm2} == mm2


def test_heartbeats_replication_disabled_leaves_heartbeats_to_topics() -> None:
    from mirrorflow.heartbeat import heartbeats

    narrowed = BASE + "a->b.topics = orders\n"
    off = parse_config(narrowed + "a->b.heartbeats.replication.enabled = false\n")
    flow = off.flow("a->b")
    assert [flow.topic_filter().should_replicate(t) for t in ("orders", "heartbeats")] == [
        True, False]
    assert heartbeats.senses(off, flow) is False  # no await_heartbeat task: nothing to sense
    on = parse_config(narrowed)
    assert on.flow("a->b").topic_filter().should_replicate("heartbeats") is True
    assert heartbeats.senses(on, on.flow("a->b")) is True
    # Selected by 'topics', heartbeats are mirrored whatever the switch says (as in MM2).
    both = parse_config(BASE + "a->b.heartbeats.replication.enabled = false\n")
    assert both.flow("a->b").topic_filter().should_replicate("heartbeats") is True


@pytest.mark.parametrize(("lines", "expected"), [
    ("", ("earliest", "")),
    ("a.consumer.auto.offset.reset = latest\n",
     ("latest", "a.consumer.auto.offset.reset")),
    ("a->b.consumer.auto.offset.reset = LATEST\n",
     ("latest", "a->b.consumer.auto.offset.reset")),
    # MM2's order: the flow's source.consumer.*, the source cluster's consumer.*, the
    # flow's consumer.* (MirrorMakerConfig.connectorBaseConfig, sourceConsumerConfig).
    ("a->b.consumer.auto.offset.reset = none\na.consumer.auto.offset.reset = latest\n",
     ("latest", "a.consumer.auto.offset.reset")),
    ("a.consumer.auto.offset.reset = latest\n"
     "a->b.source.consumer.auto.offset.reset = none\n",
     ("none", "a->b.source.consumer.auto.offset.reset")),
    # The target's consumer setting is not the source's.
    ("b.consumer.auto.offset.reset = latest\n", ("earliest", "")),
])
def test_auto_offset_reset_resolves_as_mm2_does(lines: str, expected: tuple[str, str]) -> None:
    config = parse_config(BASE + lines)
    reset = config.flows[("a", "b")].offset_reset
    assert (reset.value, reset.prop) == expected
    assert not [w for w in config.warnings if "auto.offset.reset" in w]


@pytest.mark.parametrize(("line", "fragment"), [
    ("a.consumer.auto.offset.reset = smallest",
     "property 'a.consumer.auto.offset.reset': expected one of earliest, latest, none for "
     "'a.consumer.auto.offset.reset', got 'smallest'"),
    ("a->b.source.consumer.auto.offset.reset = by_duration:PT1H",
     "'a->b.source.consumer.auto.offset.reset = by_duration:PT1H' (Kafka's by_duration "
     "reset) is not supported: set earliest or latest"),
    ("a->b.source.consumer.isolation.level = read_uncommitted",
     "property 'a->b.source.consumer.isolation.level': decides which records flow a->b "
     "copies"),
])
def test_settings_that_decide_what_is_copied_are_refused_by_name(line: str,
                                                                  fragment: str) -> None:
    assert fragment in error_of(BASE + line + "\n")
