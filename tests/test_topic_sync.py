"""Topic metadata sync: MM2's decisions without a broker, the calls against Tansu (which
lacks CreatePartitions and crashes clients on CreateAcls: both must be reported clearly),
and the full sync against Apache Kafka when ``MIRRORFLOW_TEST_KAFKA_BOOTSTRAP`` names one."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.kafka import config_file, create_topic
from mirrorflow import topic_sync
from mirrorflow.config import load_config, parse_config
from mirrorflow.plan import PlanError, build_plan
from mirrorflow.run import metadata_step
from mirrorflow.topic_sync import TopicAcl

KAFKA = os.environ.get("MIRRORFLOW_TEST_KAFKA_BOOTSTRAP")
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


# --------------------------------------------------------------------------- on Tansu


@pytest.mark.broker
def test_partition_growth_on_a_broker_without_create_partitions_fails_clearly(
        two_clusters: dict[str, str], tmp_path: Path) -> None:
    create_topic(two_clusters["a"], "orders", 3)
    create_topic(two_clusters["b"], "a.orders", 2)
    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    with pytest.raises(PlanError, match=r"remote topic 'a\.orders' on cluster 'b' has 2 "
                                        r"partitions and its source has 3: the broker does "
                                        r"not support CreatePartitions"):
        build_plan(config, config.flow("a->b"), "r")


@pytest.mark.broker
def test_config_sync_and_acl_sync_run_on_tansu(two_clusters: dict[str, str],
                                               tmp_path: Path) -> None:
    """Tansu labels every topic config a default, so nothing differs; the alter call and
    the ACL listing (empty) are real."""
    create_topic(two_clusters["a"], "orders", 1)
    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    flow = config.flow("a->b")
    build_plan(config, flow, "r")
    first = metadata_step(config, flow)
    assert first["synced"] == ["configs", "acls"] and first["configs"] == {}
    assert first["acls"] == []
    assert metadata_step(config, flow) == {"synced": []}  # within the 600 s intervals
    target = config.cluster("b")
    topic_sync.alter_configs(target, {"a.orders": {"retention.ms": "1234"}})
    described = topic_sync.describe_configs(target, ["a.orders"])["a.orders"]
    assert described["retention.ms"].value == "1234"


@pytest.mark.broker
def test_create_acls_crash_on_tansu_is_reported_not_fatal(two_clusters: dict[str, str],
                                                          tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    with pytest.raises(topic_sync.MetadataSyncError,
                       match=r"cluster 'b': the Kafka client crashed .* does not implement "
                             r"CreateAcls .*User:bob READ on topic a.orders"):
        topic_sync.create_acls(config.cluster("b"),
                               [TopicAcl("a.orders", "User:bob", "*", "READ", "ALLOW")])


# --------------------------------------------------------------------------- on Apache Kafka


@pytest.mark.skipif(not KAFKA, reason="set MIRRORFLOW_TEST_KAFKA_BOOTSTRAP to an Apache Kafka "
                                      "bootstrap address to run the real CreatePartitions, "
                                      "IncrementalAlterConfigs and CreateAcls calls")
def test_full_sync_against_apache_kafka(tmp_path: Path) -> None:
    """Both aliases on one Apache Kafka cluster: source ``t-…``, remote ``a.t-…``."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(KAFKA, topic, 3, {"retention.ms": "86400000"})
    create_topic(KAFKA, f"a.{topic}", 1)
    path = config_file(tmp_path / "mm2.properties", {"a": KAFKA, "b": KAFKA},
                       f"a->b.enabled = true\na->b.topics = {topic}\n"
                       "a->b.replication.factor = 1\nemit.heartbeats.enabled = false\n")
    config = load_config(path)
    flow = config.flow("a->b")
    plan = build_plan(config, flow, "r")
    assert {r.partition for r in plan.ranges} <= {0, 1, 2}
    admin = topic_sync.clients.admin_client(config.cluster("b"))
    assert len(admin.list_topics(timeout=10).topics[f"a.{topic}"].partitions) == 3
    result = metadata_step(config, flow, force=True)
    assert result["configs"] == {f"a.{topic}": {"retention.ms": "86400000"}}
    acls = topic_sync.describe_topic_acls(config.cluster("a"))
    if acls is None:
        assert any("no ACL authorizer" in n for n in result["notes"])
    else:
        bob = TopicAcl(topic, "User:bob", "*", "ALL", "ALLOW")
        topic_sync.create_acls(config.cluster("a"), [bob])
        result = metadata_step(config, flow, force=True)
        assert f"ALLOW User:bob READ on topic a.{topic} from *" in result["acls"]
