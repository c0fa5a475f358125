"""Replication policies and topic filtering, with MM2's semantics."""

from __future__ import annotations

import pytest

from mirrorflow.config.errors import ConfigError
from mirrorflow.config.loader import parse_config
from mirrorflow.config.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    PolicyError,
    TopicFilter,
    load_policy,
)


def test_default_policy_naming() -> None:
    p = DefaultReplicationPolicy()
    assert p.format_remote_topic("a", "orders") == "a.orders"
    assert p.topic_source("a.orders") == "a"
    assert p.topic_source("orders") is None
    assert p.upstream_topic("a.orders") == "orders"
    assert p.upstream_topic("orders") is None
    assert p.upstream_topic("b.a.orders") == "a.orders"
    assert p.original_topic("b.a.orders") == "orders"
    assert p.original_topic("orders") == "orders"


def test_the_prefix_of_a_clusters_remote_topics_where_the_policy_has_one() -> None:
    class Suffixed(DefaultReplicationPolicy):
        def format_remote_topic(self, source_cluster_alias: str, topic: str) -> str:
            return f"{topic}.{source_cluster_alias}"

    assert DefaultReplicationPolicy().remote_topic_prefix("a") == "a."
    assert DefaultReplicationPolicy(separator="__").remote_topic_prefix("us.east") == "us.east__"
    assert IdentityReplicationPolicy(source_cluster_alias="a").remote_topic_prefix("a") is None
    assert Suffixed().remote_topic_prefix("a") is None


def test_internal_topic_names() -> None:
    p = DefaultReplicationPolicy()
    assert p.heartbeats_topic() == "heartbeats"
    assert p.offset_syncs_topic("b") == "mm2-offset-syncs.b.internal"
    assert p.checkpoints_topic("a") == "a.checkpoints.internal"
    assert p.is_checkpoints_topic("a.checkpoints.internal")
    assert p.is_heartbeats_topic("heartbeats") and p.is_heartbeats_topic("a.b.heartbeats")
    assert not p.is_heartbeats_topic("orders")


@pytest.mark.parametrize("topic", [
    "__consumer_offsets", "__transaction_state", ".hidden", "mm2-offset-syncs.b.internal",
    "a.checkpoints.internal", "connect-offsets-internal", "mm2-offsets.a.internal"])
def test_internal_topics(topic: str) -> None:
    assert DefaultReplicationPolicy().is_internal_topic(topic)


def test_custom_separator_and_internal_separator() -> None:
    p = DefaultReplicationPolicy(separator="_")
    assert p.format_remote_topic("a", "orders") == "a_orders"
    assert p.topic_source("a_orders") == "a"
    assert p.offset_syncs_topic("b") == "mm2-offset-syncs_b_internal"
    assert p.checkpoints_topic("a") == "a_checkpoints_internal"
    legacy = DefaultReplicationPolicy(separator="_", internal_topic_separator_enabled=False)
    assert legacy.offset_syncs_topic("b") == "mm2-offset-syncs.b.internal"
    assert legacy.checkpoints_topic("a") == "a.checkpoints.internal"


def test_multi_character_separator() -> None:
    p = DefaultReplicationPolicy(separator="__")
    assert p.topic_source("a__orders") == "a"
    assert p.upstream_topic("b__a__orders") == "a__orders"


def test_identity_policy() -> None:
    p = IdentityReplicationPolicy(source_cluster_alias="a")
    assert p.format_remote_topic("a", "orders") == "orders"
    assert p.topic_source("orders") == "a"
    assert p.upstream_topic("orders") == "orders"
    assert p.original_topic("orders") == "orders"
    # Heartbeats keep the prefix so that liveness can still be traced.
    assert p.format_remote_topic("a", "heartbeats") == "a.heartbeats"
    assert p.topic_source("a.heartbeats") == "a"


def test_load_policy_by_name() -> None:
    assert isinstance(load_policy("org.apache.kafka.connect.mirror.IdentityReplicationPolicy"),
                      IdentityReplicationPolicy)
    assert type(load_policy("DefaultReplicationPolicy")) is DefaultReplicationPolicy
    custom = load_policy("helpers.custom_policy.UpperCasePolicy")
    assert custom.format_remote_topic("a", "t") == "A.t"


@pytest.mark.parametrize("name,message", [
    ("com.acme.Policy", "Java class"),
    ("helpers.custom_policy.Missing", "cannot load"),
    ("no_such_module_xyz.Policy", "cannot load"),
    ("helpers.custom_policy.NotAPolicy", "not a subclass"),
    ("Bare", "not a dotted class name"),
])
def test_load_policy_errors(name: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        load_policy(name)


def _filter(target: str = "b", topics=(".*",), exclude=(r".*[\-\.]internal", r".*\.replica",
                                                         "__.*")) -> TopicFilter:
    return TopicFilter.for_flow(DefaultReplicationPolicy(), target, topics, exclude)


def test_filter_include_exclude_full_match() -> None:
    f = _filter(topics=("orders.*", "payments"), exclude=("orders-secret",))
    assert f.select(["orders", "orders-eu", "orders-secret", "payments", "payments-x", "x"]) == [
        "orders", "orders-eu", "payments"]


def test_filter_never_takes_internal_topics_even_when_included() -> None:
    f = _filter(exclude=())
    assert f.select(["__consumer_offsets", "mm2-offset-syncs.b.internal",
                     "a.checkpoints.internal", "orders"]) == ["orders"]


def test_filter_prevents_loops_in_active_active() -> None:
    # On cluster a, flow a->b: 'b.orders' came from b and must never go back.
    f = _filter(target="b")
    assert f.is_cycle("b.orders")
    assert f.is_cycle("c.b.orders")  # went b -> c -> a; still came from b
    assert not f.is_cycle("c.orders")
    assert f.select(["orders", "b.orders", "c.orders", "c.b.orders"]) == ["c.orders", "orders"]


def test_heartbeats_are_replicated_even_when_not_selected() -> None:
    f = _filter(topics=("orders",))
    assert f.select(["heartbeats", "c.heartbeats", "b.heartbeats", "other"]) == [
        "c.heartbeats", "heartbeats"]


def test_flow_topic_filter_from_config() -> None:
    config = parse_config("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
                          "a->b.enabled = true\nb->a.enabled = true\na->b.topics = orders.*\n")
    a_to_b = config.flow("a->b").topic_filter()
    b_to_a = config.flow("b->a").topic_filter()
    on_a = ["orders", "orders-eu", "b.orders", "heartbeats", "__consumer_offsets"]
    on_b = ["orders", "a.orders", "a.heartbeats", "heartbeats"]
    assert a_to_b.select(on_a) == ["heartbeats", "orders", "orders-eu"]
    assert b_to_a.select(on_b) == ["heartbeats", "orders"]


def test_identity_policy_refused_when_flows_form_a_loop() -> None:
    base = ("clusters = a, b, c\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
            "c.bootstrap.servers = z:1\n")
    with pytest.raises(ConfigError, match="a->b->a would replicate records in a loop"):
        parse_config(base + "a->b.enabled = true\nb->a.enabled = true\n"
                     "a->b.replication.policy.class = IdentityReplicationPolicy\n")
    with pytest.raises(ConfigError, match="loop"):
        parse_config(base + "a->b.enabled = true\nb->c.enabled = true\nc->a.enabled = true\n"
                     "replication.policy.class = IdentityReplicationPolicy\n")
    one_way = parse_config(base + "a->b.enabled = true\nb->c.enabled = true\n"
                           "replication.policy.class = IdentityReplicationPolicy\n")
    assert len(one_way.enabled_flows()) == 2
