"""`mirrorflow config check`: resolved flows, or one error line and exit status 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mirrorflow.cli import main


def test_check_prints_enabled_flows(fixtures: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["config", "check", str(fixtures / "geo_unidirectional.properties")]) == 0
    out = capsys.readouterr().out
    assert "1 enabled flow(s)" in out
    assert "primary->secondary  (DAG mirror__primary__secondary)" in out
    assert "  topics = foo.*\n" in out
    assert "  groups.exclude = console-consumer-.*, connect-.*, __.*  # default" in out


def test_check_json(fixtures: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["config", "check", "--json", str(fixtures / "geo_six_clusters.properties")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["flows"]) == 12
    first = doc["flows"][0]
    assert first["dag_id"] == "mirror__west-1__west-2"
    assert first["properties"]["replication.factor"] == "2"
    assert first["properties"]["emit.heartbeats.enabled"] == "true"


def test_check_error_is_one_line_and_exit_1(fixtures: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mirrorflow.cli", "config", "check",
         str(fixtures / "geo_enable_misspelt.properties")],
        capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("mirrorflow: error: line 7, property 'primary->secondary.enable'")


def test_check_prints_warnings_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "c.properties"
    path.write_text("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
                    "a->b.enabled = true\na->b.emit.heartbeat.enabled = false\n")
    assert main(["config", "check", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: line 5: unknown flow property 'a->b.emit.heartbeat.enabled'" in err


def test_reference_lists_every_property(capsys: pytest.CaptureFixture) -> None:
    from mirrorflow.config.model import FLOW_PROPERTIES

    assert main(["config", "reference"]) == 0
    out = capsys.readouterr().out
    for name in FLOW_PROPERTIES:
        assert f"| `{name}` |" in out


def test_property_reference_is_current(repo: Path, capsys: pytest.CaptureFixture) -> None:
    """docs/configuration.md's property table is the generated one: defaults cannot drift."""
    assert main(["config", "reference"]) == 0
    assert capsys.readouterr().out in (repo / "docs" / "configuration.md").read_text()


def test_readme_is_short_and_its_links_resolve(repo: Path) -> None:
    import re

    readme = (repo / "README.md").read_text()
    assert len(readme.encode()) <= 15 * 1024
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert "docs/configuration.md" in links
    assert [link for link in links if not link.startswith("http")
            and not (repo / link).exists()] == []


@pytest.mark.broker
@pytest.mark.parametrize("down", ["a", "b"])
def test_every_command_names_an_unreachable_cluster_in_one_line(two_clusters, tmp_path: Path,
                                                                down: str) -> None:
    """Each subcommand that talks to a cluster, with the source or the target down: one
    line naming the cluster's alias and address, exit status 1, no traceback."""
    from mirrorflow.dev.localcluster import free_port

    dead = f"127.0.0.1:{free_port()}"
    clusters = {**two_clusters, down: dead}
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = a, b\n" + "".join(f"{a}.bootstrap.servers = {b}\n"
                                                  for a, b in clusters.items())
                    + "a->b.enabled = true\nreplication.factor = 1\n")
    commands = {
        "run": ["run", str(path), "--flow", "a->b"],
        "translate": ["translate", str(path), "--flow", "a->b", "--group", "g"],
        "inspect": ["inspect", str(path), "--cluster", down, "--topic", "heartbeats"],
    }
    touched = {"run": "ab", "translate": "b", "inspect": down}
    for name, argv in commands.items():
        result = subprocess.run([sys.executable, "-m", "mirrorflow.cli", *argv],
                                capture_output=True, text=True, check=False, timeout=120)
        if down not in touched[name]:
            assert result.returncode == 0, (name, result.stderr)
            continue
        assert result.returncode == 1, (name, result.stderr)
        assert result.stderr.splitlines() == [
            f"mirrorflow: error: cluster '{down}' ({dead}) is not reachable: no broker "
            "answers there"], (name, result.stderr)


def test_check_shows_where_new_partitions_start(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "c.properties"
    path.write_text("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
                    "a->b.enabled = true\nb->a.enabled = true\n"
                    "a.consumer.auto.offset.reset = latest\n")
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "  source.consumer.auto.offset.reset = latest  # from " \
           "a.consumer.auto.offset.reset\n" in out
    assert "  source.consumer.auto.offset.reset = earliest  # default\n" in out  # b->a
    assert main(["config", "check", "--json", str(path)]) == 0
    flows = json.loads(capsys.readouterr().out)["flows"]
    assert [f["auto_offset_reset"] for f in flows] == [
        {"value": "latest", "property": "a.consumer.auto.offset.reset"},
        {"value": "earliest", "property": None}]
