"""Hostile configuration, fuzzed: random text and mutated real configs fed to
``mirrorflow config check`` and to the DAG file. Every outcome is a clean result or one
line naming what is wrong (for the DAG file: one ConfigError, the import error Airflow
shows), never a stray exception."""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirrorflow.cli import main
from mirrorflow.config.model import FLOW_PROPERTIES

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEEDS = [p.read_text() for p in sorted(FIXTURES.glob("*.properties"))] + [
    (Path(__file__).resolve().parents[1] / "include" / "config" / "mm2.properties").read_text()]
KEYS = [
    *sorted(FLOW_PROPERTIES), "clusters", "bootstrap.servers", "enabled", "a.bootstrap.servers",
    "a->b.enabled",
    "config.providers", "config.providers.x.class", "replication.policy.class",
    "replication.policy.separator", "a.producer.acks", "a.sasl.jaas.config",
    "topics.blacklist", "a->a.enabled", "x->y.topics", "->.enabled", "a.b.c->d.e.enabled"]
NASTY = ["", " ", "\\", "\\u12", "\\uZZZZ", "=", ":", "#", "!", "->", ",", ", ,", "*", "(",
         "[a-", ".*", "\x00", "\u2028", "\ud7ff", "-1", "0", "9" * 30, "true", "FALSE", "none",
         "@hourly", "* * *", "${env:NOPE}", "${", "${x:y:z}", "a, a", "a,b,,c",
         "org.apache.kafka.connect.mirror.IdentityReplicationPolicy", "com.acme.Nope"]
values = st.one_of(st.sampled_from(NASTY), st.text(max_size=40))
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=30),
                 st.builds(lambda a, k: f"{a}.{k}", st.sampled_from(["a", "b", "a->b", "us-west"]),
                           st.sampled_from(KEYS)))


@st.composite
def mutated_config(draw: st.DrawFn) -> str:
    """A real config with a few lines deleted, duplicated, rewritten or added."""
    lines = draw(st.sampled_from(SEEDS)).splitlines()
    for _ in range(draw(st.integers(1, 6))):
        action = draw(st.sampled_from(["drop", "dup", "value", "key", "add", "join", "sep"]))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if not lines:
            lines.append("")
        line = lines[i]
        key, _, value = line.partition("=")
        if action == "drop":
            del lines[i]
        elif action == "dup":
            lines.insert(i, line)
        elif action == "value":
            lines[i] = f"{key}= {draw(values)}"
        elif action == "key":
            lines[i] = f"{draw(keys)} = {value}"
        elif action == "add":
            lines.insert(i, f"{draw(keys)} = {draw(values)}")
        elif action == "join":
            lines[i] = line + "\\"
        else:
            lines[i] = line.replace("=", draw(st.sampled_from([":", " ", "==", ""])), 1)
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\\", "\r\n"]))


configs = st.one_of(mutated_config(),
                    st.text(max_size=300),
                    st.lists(st.builds(lambda k, v: f"{k} = {v}", keys, values),
                             max_size=12).map("\n".join))


def check(text: str) -> tuple[int, str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mm2.properties"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        out, err = io.StringIO(), io.StringIO()
        handlers = logging.root.handlers[:]  # as in a fresh process: main() sets up logging
        logging.root.handlers = []
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(["config", "check", "--json", str(path)])
        finally:
            logging.root.handlers = handlers
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(configs)
def test_config_check_gives_a_result_or_one_line_error(text: str) -> None:
    code, out, err = check(text)
    assert "Traceback" not in out + err
    errors = [line for line in err.splitlines() if not line.startswith("warning: ")]
    if code == 0:
        assert out.startswith("{") and errors == []
    else:
        assert code == 1 and out == ""
        assert len(errors) == 1 and errors[0].startswith("mirrorflow: error: "), err


@pytest.mark.airflow
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(configs)
def test_dag_file_gives_dags_or_one_config_error(text: str) -> None:
    import os

    from airflow.dag_processing.dagbag import DagBag

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mm2.properties"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        old = os.environ.get("MIRRORFLOW_CONFIG")
        os.environ["MIRRORFLOW_CONFIG"] = str(path)
        try:
            bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
        finally:
            if old is None:
                del os.environ["MIRRORFLOW_CONFIG"]
            else:
                os.environ["MIRRORFLOW_CONFIG"] = old
    if bag.import_errors:
        (error,) = bag.import_errors.values()
        last = error.strip().splitlines()[-1]
        assert last.startswith("mirrorflow.config.errors.ConfigError: "), error
    else:
        assert all(dag_id.startswith("mirror__") for dag_id in bag.dags)
