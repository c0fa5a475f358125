"""Settings that decide what is copied are honoured or refused by name, never dropped with a
warning: Connect filters, transforms, converters and error tolerance; the source's isolation
level under exactly-once; two flows that would share a DAG."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mirrorflow.cli import main
from mirrorflow.config.errors import ConfigError
from mirrorflow.config.loader import parse_config

BASE = """clusters = a, b
a.bootstrap.servers = a1:9092
b.bootstrap.servers = b1:9092
a->b.enabled = true
"""

# (the line added to BASE (line 5), the property named, a fragment of the remedy)
REFUSED = [
    ("a->b.topic.filter.class = com.acme.PiiTopicFilter", "a->b.topic.filter.class",
     "express the selection with 'topics' and 'topics.exclude'"),
    ("group.filter.class = com.acme.GroupFilter", "group.filter.class",
     "'groups' and 'groups.exclude'"),
    ("a->b.config.property.filter.class = com.acme.ConfigFilter",
     "a->b.config.property.filter.class", "'config.properties.exclude'"),
    ("a->b.topic.filter.class = com.acme.DefaultTopicFilter", "a->b.topic.filter.class",
     "'topics' and 'topics.exclude'"),
    ("value.converter = org.apache.kafka.connect.json.JsonConverter", "value.converter",
     "copies the bytes unchanged"),
    ("a->b.errors.tolerance = all", "a->b.errors.tolerance", "never skips a record"),
    ("a->b.consumer.isolation.level = read_uncommitted", "a->b.consumer.isolation.level",
     "set 'a.consumer.isolation.level' instead"),
]


@pytest.mark.parametrize(("line", "prop", "remedy"), REFUSED,
                         ids=[r[1] for r in REFUSED])
def test_config_check_refuses_a_setting_that_changes_what_is_copied(
        tmp_path: Path, capsys: pytest.CaptureFixture, line: str, prop: str,
        remedy: str) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(BASE + line + "\n")
    assert main(["config", "check", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"mirrorflow: error: line 5, property '{prop}': ")
    assert remedy in err[0]
    scope = "flow a->b" if prop.startswith("a->b.") else "every flow"
    if "isolation" not in prop:
        assert f"(for {scope})" in err[0]


@pytest.mark.parametrize("line", [
    "topic.filter.class = org.apache.kafka.connect.mirror.DefaultTopicFilter",
    "a->b.group.filter.class = DefaultGroupFilter",
    "config.property.filter.class = org.apache.kafka.connect.mirror.DefaultConfigPropertyFilter",
    "key.converter = org.apache.kafka.connect.converters.ByteArrayConverter",
    "a->b.errors.tolerance = none",
    "value.converter.schemas.enable = false",
    "a->b.transaction.boundary = interval",
    "a->b.transaction.boundary.interval.ms = 3000",
])
def test_mm2_defaults_are_accepted_as_ignored_connect_settings(line: str) -> None:
    config = parse_config(BASE + line + "\n")
    prop = line.split(" = ")[0]
    assert config.warnings == (f"line 5: property '{prop}' is a Kafka Connect setting that "
                               "mirrorflow ignores",)
    assert config.flow("a->b").enabled


@pytest.mark.airflow
def test_a_refused_setting_generates_no_dag(repo: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    folder = tmp_path / "dags"
    folder.mkdir()
    shutil.copy(repo / "dags" / "mirror_flows.py", folder)
    for line, prop, _ in (REFUSED[0], REFUSED[4]):
        config = tmp_path / "mm2.properties"
        config.write_text(BASE + line + "\n")
        monkeypatch.setenv("MIRRORFLOW_CONFIG", str(config))
        bag = DagBag(dag_folder=str(folder))
        assert list(bag.dags) == []
        (error,) = bag.import_errors.values()
        assert f"line 5, property '{prop}'" in error


def test_source_is_read_committed_unless_the_file_says_otherwise() -> None:
    assert parse_config(BASE).cluster("a").isolation_level() == "read_committed"
    config = parse_config(BASE + "a.consumer.isolation.level = read_uncommitted\n")
    assert config.cluster("a").isolation_level() == "read_uncommitted"
    assert config.warnings == (
        "line 5: flow a->b reads its source with 'a.consumer.isolation.level = "
        "read_uncommitted': records of aborted and open transactions are mirrored as "
        "committed ones, and each run's report says so",)


def test_exactly_once_required_refuses_an_uncommitted_source_read() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + "a.consumer.isolation.level = read_uncommitted\n"
                     "a->b.exactly.once.support = required\n")
    message = str(info.value)
    assert message.startswith("line 6, property 'a->b.exactly.once.support': flow a->b "
                              "requires exactly-once delivery but reads its source with "
                              "'a.consumer.isolation.level = read_uncommitted'")
    # read_committed (the default) with required is fine.
    config = parse_config(BASE + "exactly.once.support = required\n")
    assert config.flow("a->b").get("exactly.once.support") == "required"


def test_two_flows_that_would_share_a_dag_are_refused() -> None:
    text = """clusters = a__b, c, a, b__c
a__b.bootstrap.servers = x:1
c.bootstrap.servers = x:2
a.bootstrap.servers = x:3
b__c.bootstrap.servers = x:4
a__b->c.enabled = true
a->b__c.enabled = true
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert str(info.value) == (
        "property 'clusters': flows a__b->c and a->b__c would both be the DAG "
        "'mirror__a__b__c' and Airflow would keep only one: rename a cluster alias so that "
        "'__' does not join them")


def test_a_run_that_read_uncommitted_says_so_in_its_report() -> None:
    from mirrorflow.quality.reports import render

    summary = {"flow": "a->b", "run_id": "r1", "plan_id": "p1", "partitions": []}
    assert "read_uncommitted" not in render({**summary, "source_isolation": "read_committed"})
    assert render({**summary, "source_isolation": "read_uncommitted"}).splitlines()[2] == (
        "source read read_uncommitted: records of aborted and open transactions were "
        "mirrored as committed ones")
