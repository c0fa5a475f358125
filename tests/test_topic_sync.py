"""Topic metadata sync: MM2's decisions without a broker, then partition growth and config
sync against Apache Kafka (ACL sync is in test_security, on brokers with an authorizer)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.kafka import alter_topic, config_file, create_topic
from helpers.pauses import recorded_pauses
from mirrorflow.config.loader import load_config, parse_config
from mirrorflow.run import metadata_step
from mirrorflow.source import topic_sync
from mirrorflow.source.plan import build_plan
from mirrorflow.source.topic_sync import TopicAcl

FLOW = parse_config("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
                    "a->b.enabled = true\na->b.topics.exclude = secret\n").flow("a->b")


def entry(value: str | None, default: bool = False, read_only: bool = False,
          sensitive: bool = False, source: str = "DYNAMIC_TOPIC_CONFIG") -> SimpleNamespace:
    """A config entry as confluent-kafka's DescribeConfigs gives it."""
    return SimpleNamespace(value=value, is_default=default, is_read_only=read_only,
                           is_sensitive=sensitive, source=SimpleNamespace(name=source))


SOURCE = {
    "retention.ms": entry("86400000"),
    "cleanup.policy": entry("delete", default=True, source="DEFAULT_CONFIG"),
    "segment.bytes": entry("1073741824", default=True, source="DEFAULT_CONFIG"),
    "min.insync.replicas": entry("2"),  # MM2's default exclusion
    "message.timestamp.type": entry("LogAppendTime"),  # excluded too
    "sasl.secret": entry(None, sensitive=True),
    "log.dirs": entry("/data", read_only=True, source="STATIC_BROKER_CONFIG"),
    "max.message.bytes": entry("2000000", source="STATIC_BROKER_CONFIG"),
}


def test_new_remote_topics_take_the_source_settings_minus_mm2_exclusions() -> None:
    exclude = FLOW.get("config.properties.exclude")
    assert topic_sync.new_topic_configs(SOURCE, exclude) == {"retention.ms": "86400000"}
    assert topic_sync.new_topic_configs(SOURCE, exclude, "source") == {
        "retention.ms": "86400000", "cleanup.policy": "delete", "segment.bytes": "1073741824"}


def test_config_changes_set_what_differs_and_remove_overrides_of_source_defaults() -> None:
    exclude = FLOW.get("config.properties.exclude")
    target = {
        "retention.ms": entry("1000"),  # differs: set
        "cleanup.policy": entry("compact"),  # source default, target override: delete
        "segment.bytes": entry("1073741824", default=True),  # both default: untouched
        "min.insync.replicas": entry("1", default=True),  # excluded: untouched
    }
    assert topic_sync.config_changes(SOURCE, target, exclude) == {
        "retention.ms": "86400000", "cleanup.policy": None}
    assert topic_sync.config_changes(SOURCE, target, exclude, "source") == {
        "retention.ms": "86400000", "cleanup.policy": "delete", "segment.bytes": "1073741824"}
    synced = {"retention.ms": entry("86400000"), "cleanup.policy": entry("delete", True)}
    assert topic_sync.config_changes(SOURCE, synced, exclude) == {}
    assert topic_sync.config_changes(SOURCE, target, [r"retention\..*", r"min\..*",
                                                      r"message\..*"]) == {"cleanup.policy": None}


def test_partitions_grow_only_where_the_remote_topic_has_fewer() -> None:
    remote = {"orders": "a.orders", "clicks": "a.clicks", "new": "a.new"}
    assert topic_sync.partition_increases({"orders": 6, "clicks": 2, "new": 3},
                                          {"a.orders": 3, "a.clicks": 4},
                                          remote) == {"a.orders": 6}


def test_acls_read_copied_write_never_all_downgraded_to_read() -> None:
    source = [
        TopicAcl("orders", "User:alice", "*", "READ", "ALLOW"),
        TopicAcl("orders", "User:bob", "*", "ALL", "ALLOW"),  # -> READ
        TopicAcl("orders", "User:carol", "*", "WRITE", "ALLOW"),  # never copied
        TopicAcl("orders", "User:mallory", "*", "WRITE", "DENY"),  # a denial is kept
        TopicAcl("secret", "User:alice", "*", "READ", "ALLOW"),  # topic not replicated
        TopicAcl("b.orders", "User:alice", "*", "READ", "ALLOW"),  # came from b: a cycle
    ]
    target = [TopicAcl("a.orders", "User:alice", "*", "READ", "ALLOW")]  # already there
    wanted = topic_sync.acls_to_sync(source, target, FLOW.topic_filter().should_replicate,
                                     lambda t: f"a.{t}")
    assert wanted == [TopicAcl("a.orders", "User:bob", "*", "READ", "ALLOW"),
                      TopicAcl("a.orders", "User:mallory", "*", "WRITE", "DENY")]


def test_other_writers_of_remote_topics_are_reported() -> None:
    target = [TopicAcl("a.orders", "User:mirror", "*", "WRITE", "ALLOW"),
              TopicAcl("a.orders", "User:eve", "*", "ALL", "ALLOW"),
              TopicAcl("a.orders", "User:alice", "*", "READ", "ALLOW"),
              TopicAcl("orders", "User:eve", "*", "WRITE", "ALLOW")]
    assert topic_sync.foreign_writers(target, ["a.orders"], "User:mirror") == [target[1]]


# --------------------------------------------------------------------------- on Apache Kafka


@pytest.mark.broker
@pytest.mark.spark
def test_partition_growth_on_the_source_is_mirrored(spark, two_clusters: dict[str, str],
                                                    tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    from helpers.kafka import produce, read_partition, varied_records
    from mirrorflow.run import run_cycle

    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(40), 2)
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true",
                       "emit.heartbeats.enabled = false\n")
    assert run_cycle(path, "a->b", run_id="r1", spark=spark).records == 40
    admin = AdminClient({"bootstrap.servers": a})
    admin.create_partitions([NewPartitions("orders", 3)])["orders"].result(10)
    produce(a, "orders", varied_records(30, 40), 3)  # 10 into each, the new one too
    second = run_cycle(path, "a->b", run_id="r2", spark=spark)
    assert sorted((p.partition, p.records) for p in second.partitions) == [
        (0, 10), (1, 10), (2, 10)]
    assert len(AdminClient({"bootstrap.servers": b}).list_topics(timeout=10)
               .topics["a.orders"].partitions) == 3
    for p in range(3):
        assert read_partition(b, "a.orders", p) == read_partition(a, "orders", p)


@pytest.mark.broker
def test_topic_configs_sync_as_mm2_does(two_clusters: dict[str, str], tmp_path: Path) -> None:
    """New remote topics take the source's own settings minus MM2's exclusions; later
    changes are applied incrementally, and an override the source drops is removed from
    the remote topic (use.defaults.from = target)."""
    a = two_clusters["a"]
    create_topic(a, "orders", 1, {"retention.ms": "86400000", "segment.bytes": "10485760",
                                  "min.insync.replicas": "1",
                                  "message.timestamp.type": "LogAppendTime"})
    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    flow = config.flow("a->b")
    build_plan(config, flow, "r")
    remote = topic_sync.describe_configs(config.cluster("b"), ["a.orders"])["a.orders"]
    assert remote["retention.ms"].value == "86400000" and not remote["retention.ms"].is_default
    assert remote["segment.bytes"].value == "10485760"
    for excluded in ("min.insync.replicas", "message.timestamp.type"):  # MM2's exclusions
        assert topic_sync.config_source(remote[excluded]) != "DYNAMIC_TOPIC_CONFIG", excluded
    assert remote["message.timestamp.type"].value == "CreateTime"

    alter_topic(a, "orders", {"retention.ms": "3600000", "segment.bytes": None})
    result = metadata_step(config, flow, force=True)
    assert result["configs"] == {"a.orders": {"retention.ms": "3600000",
                                              "segment.bytes": None}}
    remote = topic_sync.describe_configs(config.cluster("b"), ["a.orders"])["a.orders"]
    assert remote["retention.ms"].value == "3600000" and remote["segment.bytes"].is_default
    assert metadata_step(config, flow) == {"synced": []}  # within the 600 s intervals
    assert metadata_step(config, flow, force=True)["configs"] == {}  # nothing differs now


def test_a_topic_the_broker_does_not_know_is_described_again_ever_less_often(
        two_clusters: dict[str, str], monkeypatch) -> None:
    """A topic a moment old may be unknown to the broker: it is asked again, at pauses
    doubling from 0.1 s up to 1.6 s (a broker opening thousands of new partitions was slowed
    by descriptions five times a second), until the time is up; then the error names it."""
    config = parse_config(f"clusters = a, b\na.bootstrap.servers = {two_clusters['a']}\n"
                          f"b.bootstrap.servers = {two_clusters['b']}\na->b.enabled = true\n")
    pauses = recorded_pauses(monkeypatch)
    monkeypatch.setattr(topic_sync, "ADMIN_TIMEOUT_S", 4.0)
    with pytest.raises(topic_sync.MetadataSyncError,
                       match=r"^cluster 'b': cannot describe the configs of topic 'a\.never': "):
        topic_sync.describe_configs(config.cluster("b"), ["a.never"])
    assert pauses[:4] == [0.1, 0.2, 0.4, 0.8]
    assert set(pauses[4:]) <= {1.6}
