"""The Airflow plugin: a FastAPI app under ``/mirrorflow`` on Airflow's API server, and a
"Replication" entry in the UI's navigation.

* ``/mirrorflow/metrics``: the flows' metrics, OpenMetrics text (scrape it with
  Prometheus; ``include/monitoring/prometheus.yml``);
* ``/mirrorflow/status``: the status view (:mod:`mirrorflow.airflow.status`);
* ``/mirrorflow/reports/<source>__<target>/...``: a flow's reports (Data Docs,
  summaries, index page).

Airflow does not authenticate a plugin's app for it, so every route does, as the core
API's routes do: the caller is Airflow's user of the request (its JWT, as a bearer token
or the UI's session cookie), and the auth manager decides, per flow, whether that user
may read the flow's DAG (``mirror__<source>__<target>``). Anonymous requests get 401, a
user without read access to a flow 403 (status and metrics list only the flows the user
may read). For Prometheus, ``[mirrorflow] metrics_token`` (or
``AIRFLOW__MIRRORFLOW__METRICS_TOKEN``) names a bearer token that may read every flow's
metrics, and nothing else.

Everything is read from the reports directory; no broker.
"""

from __future__ import annotations

import hmac
import mimetypes
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mirrorflow.airflow import status
from mirrorflow.quality import metrics, reports

PREFIX = "/mirrorflow"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

app = FastAPI(title="mirrorflow", description="Replication metrics, status and reports.")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(HTTPBearer(auto_error=False))]


def dag_id_of(flow_dir: str) -> str:
    """The DAG of a flow's reports folder (``a__b`` -> ``mirror__a__b``)."""
    return f"mirror__{flow_dir}"


METRICS_TOKEN = object()  # the caller presented [mirrorflow] metrics_token


async def _caller(request: Request, credentials: Bearer) -> Any:
    """Who calls: the metrics token's bearer (:data:`METRICS_TOKEN`), or Airflow's user of
    the request, authenticated as the core API authenticates (401/403 otherwise)."""
    from airflow.api_fastapi.core_api.security import get_user

    token = _metrics_token()
    if token and credentials and hmac.compare_digest(credentials.credentials.encode(),
                                                     token.encode()):
        return METRICS_TOKEN
    return await get_user(request, None, credentials)


Caller = Annotated[Any, Depends(_caller)]


def _readable(caller, flow_dirs: list[str]) -> list[str]:
    """Those of the flows' folders whose DAG the caller may read (the auth manager says;
    the metrics token reads no report)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    if caller is METRICS_TOKEN:
        return []
    manager = get_auth_manager()
    return [d for d in flow_dirs if manager.is_authorized_dag(
        method="GET", details=DagDetails(id=dag_id_of(d)), user=caller)]


def _metrics_token() -> str | None:
    from airflow.configuration import conf

    return conf.get("mirrorflow", "metrics_token", fallback=None) or None


@app.get("/metrics")
def get_metrics(caller: Caller) -> Response:
    flows = status.flows()
    if caller is not METRICS_TOKEN:
        allowed = set(_readable(caller, [reports.flow_dir(f).name for f in flows]))
        flows = [f for f in flows if reports.flow_dir(f).name in allowed]
    return Response(metrics.exposition(flows), media_type=OPENMETRICS)


@app.get("/status", response_class=HTMLResponse)
def get_status(caller: Caller) -> HTMLResponse:
    flows = {reports.flow_dir(f).name: f for f in status.flows()}
    allowed = _readable(caller, list(flows))
    if caller is METRICS_TOKEN or (flows and not allowed):
        raise HTTPException(status_code=403, detail="no access to any mirrorflow flow's DAG")
    return HTMLResponse(status.page(PREFIX, [flows[d] for d in allowed]))


@app.get("/reports/{path:path}")
def get_report(path: str, caller: Caller) -> Response:
    """A file of the reports directory (local, or any fsspec filesystem), for a caller who
    may read the flow's DAG."""
    flow_dir = path.split("/", 1)[0]
    if not _readable(caller, [flow_dir]):
        raise HTTPException(status_code=403,
                            detail=f"no read access to the DAG {dag_id_of(flow_dir)}")
    missing = HTTPException(status_code=404, detail=f"no report file {path!r}")
    if ".." in path.split("/"):
        raise missing
    target = reports.report_file(path)
    if target.is_dir():
        target = target / "index.html"
    if reports.is_local(target):
        # Symlinked Data Docs assets resolve inside the flow's folder, still under the root.
        target = target.resolve()
        if not target.is_relative_to(reports.reports_dir() / flow_dir) or not target.is_file():
            raise missing
        return FileResponse(target)
    if not target.is_file():
        raise missing
    kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    return Response(target.read_bytes(), media_type=kind)
