"""The Airflow plugin: a FastAPI app under ``/mirrorflow`` on Airflow's API server, and a
"Replication" entry in the UI's navigation.

* ``/mirrorflow/metrics``: every flow's metrics, OpenMetrics text (scrape it with
  Prometheus; ``include/monitoring/prometheus.yml``);
* ``/mirrorflow/status``: the status view (:mod:`mirrorflow.status`);
* ``/mirrorflow/reports/...``: the reports directory (Data Docs, summaries, index pages).

Everything is read from the reports directory; no broker, no metadata database.
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, Response

from mirrorflow import metrics, reports, status

PREFIX = "/mirrorflow"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

app = FastAPI(title="mirrorflow", description="Replication metrics, status and reports.")


@app.get("/metrics")
def get_metrics() -> Response:
    return Response(metrics.exposition(), media_type=OPENMETRICS)


@app.get("/status", response_class=HTMLResponse)
def get_status() -> HTMLResponse:
    return HTMLResponse(status.page(PREFIX))


@app.get("/reports/{path:path}")
def get_report(path: str) -> FileResponse:
    root = reports.reports_dir().resolve()
    target = (root / path).resolve()
    if target.is_dir():
        target = target / "index.html"
    # Symlinked Data Docs assets resolve inside the flow's folder, still under the root.
    if not target.is_relative_to(root) or not target.is_file():
        raise HTTPException(status_code=404, detail=f"no report file {path!r}")
    return FileResponse(target)

