"""The status view: every flow with its last run, lag per topic, heartbeat age, last
validation result, a link to the report, and a chart of lag over recent runs.

Served by the Airflow plugin (:mod:`mirrorflow.airflow.plugin`) at ``/mirrorflow/status``
and linked from the Airflow UI's navigation; built from the reports directory only, so it
needs neither a broker nor the metadata database.
"""

from __future__ import annotations

import html

from mirrorflow.quality import reports

CHART_RUNS = 30


def _flows() -> list[str]:
    return sorted(p.name.replace("__", "->", 1) for p in reports.reports_dir().glob("*")
                  if p.is_dir() and any(p.glob(f"*/{reports.SUMMARY}")))


def chart(values: list[int | None], width: int = 240, height: int = 48) -> str:
    """An inline SVG sparkline of lag over runs (oldest left)."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if not points:
        return "<span class=muted>no data</span>"
    top = max(v for _, v in points) or 1
    step = width / max(len(values) - 1, 1)
    xy = [(4 + i * step, height - 4 - (v / top) * (height - 8)) for i, v in points]
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#017cee"/>' for x, y in xy)
    return (f'<svg width="{width + 8}" height="{height}" role="img" aria-label="lag over '
            f'recent runs"><line x1="0" y1="{height - 4}" x2="{width + 8}" y2="{height - 4}" '
            f'stroke="#ccc"/><polyline fill="none" stroke="#017cee" stroke-width="2" '
            f'points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}"/>{dots}'
            f'<text x="{width + 6}" y="10" text-anchor="end" font-size="10">max {top}</text>'
            "</svg>")


def flows() -> list[str]:
    """Every flow with a reported run, by name (``a->b``)."""
    return _flows()


def delivery(summary: dict) -> str:
    """A warning under the verdict when the run delivered at-least-once."""
    found = summary.get("delivery") or {}
    if found.get("exactly_once") is not False:
        return ""
    reasons = html.escape("; ".join(found.get("reasons", [])))
    return f'<br><span class=bad title="{reasons}">at-least-once</span>'


def breaks(summary: dict) -> str:
    """The run's named breaks (a recreated topic, retention, a reset...) under the verdict:
    "passed" means every source offset is mirrored or explained by one of them."""
    found = summary.get("breaks") or []
    if not found:
        return ""
    items = "".join(f"<br>{html.escape(reports.describe_break(b))}" for b in found)
    return f"<br><span class=muted>{len(found)} named break(s){items}</span>"


def page(base_url: str = "/mirrorflow", shown: list[str] | None = None) -> str:
    """The status page for the flows in ``shown`` (default: every reported flow)."""
    rows = []
    for flow in _flows() if shown is None else shown:
        last = reports.read(flow)
        validation = last.get("validation") or {}
        state = reports.verdict(last)
        heartbeat = (last.get("heartbeat") or {}).get("age_ms")
        lag_by_topic: dict[str, int] = {}
        for key, value in (last.get("lag") or {}).items():
            topic = key.rsplit("[", 1)[0]
            lag_by_topic[topic] = lag_by_topic.get(topic, 0) + value
        lag_cell = "<br>".join(f"{html.escape(t)}: {n}" for t, n in sorted(lag_by_topic.items()))
        run_dir = reports.run_dir(flow, str(last.get("run_id", "")))
        link = f"{base_url}/reports/{run_dir.parent.name}/{run_dir.name}/"
        docs = (f'<a href="{link}index.html">Data Docs</a> · ' if validation.get("data_docs")
                else "")
        rows.append(
            f"<tr><td><b>{html.escape(flow)}</b></td>"
            f"<td>{html.escape(str(last.get('run_id', '')))}<br><span class=muted>"
            f"{last.get('records', 0)} records in {last.get('duration_s', '?')} s</span></td>"
            f"<td>{lag_cell or '-'}</td>"
            f"<td>{'-' if heartbeat is None else f'{heartbeat / 1000:.1f} s'}</td>"
            f'<td class="{"ok" if state == "passed" else "bad"}">{html.escape(state)}'
            f'{delivery(last)}{breaks(last)}</td>'
            f"<td>{chart([r['lag'] for r in reports.runs(flow)[-CHART_RUNS:]])}</td>"
            f'<td>{docs}<a href="{link}{reports.SUMMARY}">summary</a> · '
            f'<a href="{base_url}/reports/{run_dir.parent.name}/index.html">all runs</a></td>'
            "</tr>")
    body = ("".join(rows) if rows else
            '<tr><td colspan=7 class=muted>No run reported yet.</td></tr>')
    return (
        "<!doctype html><meta charset=utf-8><title>mirrorflow status</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
        "table{border-collapse:collapse}td,th{padding:.5em .9em;border-bottom:1px solid #ddd;"
        "text-align:left;vertical-align:top}th{background:#f4f6f8}.ok{color:#067d17}"
        ".bad{color:#b00020;font-weight:bold}.muted{color:#777;font-size:.9em}"
        "a{color:#017cee}</style>"
        "<h2>mirrorflow: replication status</h2>"
        "<table><tr><th>flow</th><th>last run</th><th>lag (records) per topic</th>"
        "<th>heartbeat age</th><th>completeness</th><th>lag, last runs</th><th>report</th>"
        f"</tr>{body}</table>"
        f'<p class=muted>Metrics: <a href="{base_url}/metrics">{base_url}/metrics</a> '
        "(OpenMetrics)</p>")

