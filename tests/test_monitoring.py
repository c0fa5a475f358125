"""Metrics and the status view: computed from a real run, scraped from the plugin's
endpoint, parsed as OpenMetrics; lag alerts fail the run after it committed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from helpers.kafka import commit, config_file, create_topic, produce, varied_records
from mirrorflow.airflow.plugin import app
from mirrorflow.config.loader import load_config
from mirrorflow.quality import metrics, reports
from mirrorflow.quality.metrics import LagAlertError, alerts
from mirrorflow.run import run_cycle


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def summary(records: int, lag: int, failures: int = 0) -> dict:
    return {"flow": "a->b", "run_id": "r", "duration_s": 12.5, "records": records,
            "partitions": [{"topic": "orders", "partition": 0, "records": records,
                            "bytes": records * 10, "write_seconds": 2.0,
                            "record_age_ms": {"min": 5, "max": 50, "avg": 20.5},
                            "replication_latency_ms": {"min": 9, "max": 90, "avg": 30}}],
            "lag": {"orders[0]": lag}, "checkpoint_latency_ms": {"billing": 42},
            "heartbeat": {"age_ms": 1500},
            "validation": {"success": failures == 0, "failures": ["x"] * failures}}


def test_counters_add_up_and_gauges_are_the_last_runs(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(reports.REPORTS_ENV, str(tmp_path))
    metrics.update("a->b", summary(100, 7))
    path = metrics.update("a->b", summary(30, 3, failures=2))
    got = families(path.read_text())
    # Records count once, when their plan commits: the failed run's 30 wait for the run
    # that commits them. Bytes count as written.
    [count] = got["mirrorflow_record_count"].samples
    assert count.value == 100 and count.labels == {
        "flow": "a->b", "source": "a", "target": "b", "topic": "orders", "partition": "0"}
    assert got["mirrorflow_byte_count"].samples[0].value == 1300
    assert got["mirrorflow_replication_lag_records"].samples[0].value == 3
    assert got["mirrorflow_byte_rate"].samples[0].value == 150
    assert got["mirrorflow_checkpoint_latency_ms"].samples[0].labels["group"] == "billing"
    assert got["mirrorflow_validation_failures"].samples[0].value == 2
    runs = {s.labels["outcome"]: s.value for s in got["mirrorflow_runs"].samples}
    assert runs == {"ok": 1, "failed": 1}
    assert metrics.exposition().endswith("# EOF\n")


def test_alerts_name_the_topic_and_the_limit(tmp_path) -> None:
    path = config_file(tmp_path / "mm2.properties", {"a": "127.0.0.1:1", "b": "127.0.0.1:2"},
                       "a->b.enabled = true\n",
                       "mirrorflow.alert.max.lag.records = 5\n"
                       "mirrorflow.alert.max.heartbeat.age.ms = 1000\n")
    flow = load_config(path).flow("a->b")
    assert alerts(flow, summary(10, 5)) == [
        "flow a->b: heartbeat on the target is 1500 ms old, above "
        "mirrorflow.alert.max.heartbeat.age.ms = 1000"]
    assert "orders[0] lags 6 records behind the source, above " \
           "mirrorflow.alert.max.lag.records = 5" in alerts(flow, summary(10, 6))[0]


@pytest.mark.broker
@pytest.mark.spark
def test_endpoint_after_a_real_run(spark, two_clusters, tmp_path, monkeypatch, capsys) -> None:
    """A real run with its reports on a filesystem that is not the local disk (fsspec's
    in-memory one, what a URL such as s3://… gives), served by the plugin and read by
    ``mirrorflow report``."""
    from upath import UPath

    from mirrorflow.cli import main

    root = UPath(f"memory://reports-{tmp_path.name}")
    monkeypatch.setenv(reports.REPORTS_ENV, str(root))
    a = two_clusters["a"]
    create_topic(a, "orders", 2)
    produce(a, "orders", varied_records(400), 2)
    commit(a, "billing", "orders", {0: 40})
    path = config_file(tmp_path / "mm2.properties", two_clusters, "a->b.enabled = true\n",
                       "mirrorflow.max.records.per.partition = 150\n"
                       "mirrorflow.alert.max.lag.records = 10\n")
    started = time.monotonic()
    with pytest.raises(LagAlertError, match=r"orders\[0\] lags 50 records"):
        run_cycle(path, "a->b", spark=spark)
    took = time.monotonic() - started

    # Who may read what is the auth test's (below); here every flow is readable.
    from mirrorflow.airflow import plugin as airflow_plugin

    monkeypatch.setitem(app.dependency_overrides, airflow_plugin._caller, lambda: "reader")
    monkeypatch.setattr(airflow_plugin, "_readable", lambda caller, flow_dirs: flow_dirs)
    client = TestClient(app)
    scraped = client.get("/metrics")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("application/openmetrics-text")
    got = families(scraped.text)
    labels = {"flow": "a->b", "source": "a", "target": "b", "topic": "orders"}
    for name in ("record_count", "byte_count", "byte_rate", "record_age_ms_min",
                 "record_age_ms_max", "record_age_ms_avg", "replication_latency_ms_min",
                 "replication_latency_ms_max", "replication_latency_ms_avg",
                 "replication_lag_records"):
        samples = {s.labels["partition"]: s.value for s in got[f"mirrorflow_{name}"].samples
                   if s.labels.items() >= labels.items()}
        assert set(samples) == {"0", "1"}, name
        assert all(v >= 0 for v in samples.values()), (name, samples)
    by_name = {n: {s.labels.get("partition"): s.value for s in f.samples}
               for n, f in got.items()}
    assert by_name["mirrorflow_record_count"] == {"0": 150, "1": 150}
    assert by_name["mirrorflow_replication_lag_records"] == {"0": 50, "1": 50}
    # Records carry explicit November 2023 timestamps: their age is large and ordered.
    age = by_name["mirrorflow_record_age_ms_max"]["0"]
    assert age >= by_name["mirrorflow_record_age_ms_min"]["0"] > 9e10
    assert by_name["mirrorflow_replication_latency_ms_min"]["0"] >= \
        by_name["mirrorflow_record_age_ms_min"]["0"]
    assert got["mirrorflow_checkpoint_latency_ms"].samples[0].labels["group"] == "billing"
    assert 0 <= got["mirrorflow_heartbeat_age_ms"].samples[0].value < 600_000
    assert got["mirrorflow_validation_failures"].samples[0].value == 0
    # The run's own duration: within the test's clock around it, not a guess at its speed.
    assert 0 < got["mirrorflow_run_duration_seconds"].samples[0].value <= took

    page = client.get("/status").text
    assert "a-&gt;b" in page and "passed" in page and "orders: 100" in page
    run_id = reports.read("a->b")["run_id"]
    report = client.get(f"/reports/a__b/{run_id}/summary.json")
    assert json.loads(report.text)["lag"] == {"heartbeats[0]": 0, "orders[0]": 50, "orders[1]": 50}
    assert report.headers["content-type"] == "application/json"
    assert client.get("/reports/../../etc/passwd").status_code == 404
    # The run's Data Docs were uploaded; their fonts and styles once per flow, served to
    # the run's pages from there.
    run = reports.run_dir("a->b", run_id)
    assert run.protocol == "memory" and (run / "index.html").is_file()
    docs = client.get(f"/reports/a__b/{run_id}/")
    assert docs.status_code == 200 and './static/images/favicon.ico' in docs.text
    style = "static/styles/data_docs_default_styles.css"
    assert not (run / style).exists() and (run.parent / "_static" / style[7:]).is_file()
    served = client.get(f"/reports/a__b/{run_id}/{style}")
    assert served.status_code == 200 and served.headers["content-type"].startswith("text/css")
    assert (f'<a href="{run.name}/index.html">Data Docs</a>'
            in client.get("/reports/a__b/index.html").text)
    capsys.readouterr()
    assert main(["report", str(path), "--flow", "a->b"]) == 0
    assert f"flow a->b  run {run_id}" in capsys.readouterr().out
    root.fs.rm(root.path, recursive=True)


def test_airflow_loads_the_plugin(repo: Path) -> None:
    listed = subprocess.run([str(Path(sys.executable).parent / "airflow"), "plugins", "-o",
                             "json"], capture_output=True, text=True, check=True).stdout
    plugins = json.loads(listed[listed.index("[{"):])  # after unit-test-mode log lines
    plugin = next(p for p in plugins if p["name"] == "mirrorflow")
    assert "/mirrorflow" in json.dumps(plugin["fastapi_apps"])
    assert "Replication" in json.dumps(plugin["external_views"])


ENCODED = ("/mirrorflow/reports/c__d/%2E%2E/a__b/index.html",
           "/mirrorflow/reports/c__d%2F%2E%2E%2Fa__b/index.html",
           "/mirrorflow/reports/a%5F%5Fb/index.html")


REQUESTS = r'''
import json
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app, get_auth_manager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

client = TestClient(create_app())
manager = get_auth_manager()
tokens = {name: manager.generate_jwt(SimpleAuthManagerUser(username=name, role="viewer"))
          for name in ("alice", "bob")}
out = {}
for who in ("anonymous", "alice", "bob", "scraper", "forger"):
    headers = {"Authorization": "Bearer " + {"scraper": "scrape-secret", "forger": "guess"}
               .get(who, tokens.get(who, ""))} if who != "anonymous" else {}
    for route in ("/mirrorflow/status", "/mirrorflow/metrics",
                  "/mirrorflow/reports/a__b/index.html", "/mirrorflow/reports/c__d/index.html",
                  *ENCODED_ROUTES):
        got = client.get(route, headers=headers)
        out[f"{who} {route}"] = [got.status_code, got.text]
print("RESULT " + json.dumps(out))
'''
REQUESTS = REQUESTS.replace("ENCODED_ROUTES", repr(ENCODED))


@pytest.mark.airflow
def test_plugin_routes_need_airflow_auth_and_the_flows_dag_permission(
        airflow_db, tmp_path, repo, monkeypatch) -> None:
    """Through Airflow's own API server app, with its plugins mounted: anonymous calls are
    refused (401), a user without read access to mirror__a__b is refused its reports
    (403) and does not see it in status or metrics, a user with access is served, and the
    configured metrics token reads every flow's metrics and nothing else."""
    reports_dir = tmp_path / "reports"
    monkeypatch.setenv(reports.REPORTS_ENV, str(reports_dir))
    for flow in ("a->b", "c->d"):
        reports.write(flow, "run-1", {**summary(10, 1), "flow": flow})
        metrics.update(flow, {**summary(10, 1), "flow": flow})
        reports.write_index(flow)
    env = {**__import__("os").environ, "MIRRORFLOW_REPORTS_DIR": str(reports_dir),
           "AIRFLOW__CORE__AUTH_MANAGER": "helpers.auth_manager.PerDagAuthManager",
           "AIRFLOW__MIRRORFLOW__METRICS_TOKEN": "scrape-secret",
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(repo / "plugins"),
           "PYTHONPATH": str(repo / "tests")}
    proc = subprocess.run([sys.executable, "-c", REQUESTS], env=env, capture_output=True,
                          text=True, timeout=240, check=False)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, proc.stderr[-3000:]
    got = {k: (code, text) for k, (code, text) in json.loads(line[0][7:]).items()}
    for route in ("status", "metrics", "reports/a__b/index.html"):
        assert got[f"anonymous /mirrorflow/{route}"][0] == 401, route
        assert got[f"forger /mirrorflow/{route}"][0] == 403, route  # not a valid JWT
    assert got["bob /mirrorflow/reports/a__b/index.html"][0] == 403
    assert "mirror__a__b" in got["bob /mirrorflow/reports/a__b/index.html"][1]
    assert got["bob /mirrorflow/reports/c__d/index.html"][0] == 200
    bob_status, alice_status = got["bob /mirrorflow/status"], got["alice /mirrorflow/status"]
    assert bob_status[0] == 200 and "c-&gt;d" in bob_status[1] and "a-&gt;b" not in bob_status[1]
    assert alice_status[0] == 200 and "a-&gt;b" in alice_status[1] and "c-&gt;d" in alice_status[1]
    assert got["alice /mirrorflow/reports/a__b/index.html"][0] == 200
    bob_metrics = families(got["bob /mirrorflow/metrics"][1])
    assert {s.labels["flow"] for s in bob_metrics["mirrorflow_record_count"].samples} == {"c->d"}
    for who in ("alice", "scraper"):
        flows = {s.labels["flow"] for s in families(got[f"{who} /mirrorflow/metrics"][1])[
            "mirrorflow_record_count"].samples}
        assert flows == {"a->b", "c->d"}, who
    for route in ("status", "reports/a__b/index.html"):  # the token reads metrics only
        assert got[f"scraper /mirrorflow/{route}"][0] == 403, route
    # Percent-encoded dots and slashes never leave the folder authorized, and an encoded
    # flow name is the flow's name: bob reads none of a__b through them.
    assert [got[f"bob {route}"][0] for route in ENCODED] == [404, 404, 403]
    assert [got[f"alice {route}"][0] for route in ENCODED] == [404, 404, 200]
