"""Run reports: per flow and run, a JSON summary and the Great Expectations Data Docs,
plus an index page per flow listing recent runs with pass/fail.

Layout under ``$MIRRORFLOW_REPORTS_DIR`` (default ``reports/`` at the project root)::

    <source>__<target>/index.html              recent runs of the flow
    <source>__<target>/runs.json               their rows (what the index and status show)
    <source>__<target>/<run id>/summary.json   the run's summary
    <source>__<target>/<run id>/index.html     the run's Data Docs (completeness suites)
    <source>__<target>/<run id>/parts/*.json   its DAG tasks' whole outputs

On a multi-worker deployment point it at shared storage: the variable takes a local path
or the URL of any filesystem fsspec knows (``s3://bucket/mirrorflow``, ``gs://…``,
``abfs://…``, ``sftp://…``; the matching fsspec package installed), through
universal-pathlib, which Airflow already depends on. Each run's last report removes the
reports ``mirrorflow.reports.retention.runs`` and ``.days`` no longer keep.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from upath import UPath

if TYPE_CHECKING:
    from mirrorflow.config.model import FlowConfig

REPORTS_ENV = "MIRRORFLOW_REPORTS_DIR"
DEFAULT_DIR = Path("reports")  # of the working directory; deployments set the variable
SUMMARY = "summary.json"
RUNS = "runs.json"
PARTS = "parts"
INDEX_RUNS = 50
SHARED_STATIC = "_static"


def reports_dir() -> UPath:
    """``$MIRRORFLOW_REPORTS_DIR`` (a local path or an fsspec URL), default ``reports/``."""
    root = UPath(os.environ.get(REPORTS_ENV) or DEFAULT_DIR)
    if root.protocol in ("", "file", "local"):
        return UPath(Path(root.path).resolve())
    return root


def is_local(path: UPath) -> bool:
    return isinstance(path, Path)


def flow_dir(flow_name: str) -> UPath:
    return reports_dir() / flow_name.replace("->", "__")


def run_dir(flow_name: str, run_id: str) -> UPath:
    return flow_dir(flow_name) / re.sub(r"[^A-Za-z0-9_.+-]", "_", run_id)


def docs_build_dir(flow_name: str, run_id: str) -> Path:
    """Where Great Expectations writes the run's Data Docs (it writes local files only):
    the run's directory, or a local scratch directory that :func:`publish_docs` uploads."""
    target = run_dir(flow_name, run_id)
    return target if is_local(target) else Path(tempfile.mkdtemp(prefix="mirrorflow-docs-"))


def publish_docs(flow_name: str, run_id: str, built: Path) -> None:
    """Data Docs copy 4 MB of fonts and styles into every site; keep one copy per flow
    (``_static``), so a run's report costs about 150 kB. Locally each run's ``static`` is
    a link to it; elsewhere the run's pages are uploaded without it and the plugin serves
    ``static`` from the flow's copy (:func:`report_file`)."""
    target = run_dir(flow_name, run_id)
    shared = target.parent / SHARED_STATIC
    static = built / "static"
    if is_local(target):
        if not static.is_dir() or static.is_symlink():
            return
        if shared.is_dir():
            shutil.rmtree(static)
        else:
            static.rename(shared)
        static.symlink_to(Path("..") / SHARED_STATIC)
        return
    upload_static = not shared.exists()
    for path in sorted(p for p in built.rglob("*") if p.is_file()):
        relative = path.relative_to(built)
        if relative.parts[0] == "static":
            if not upload_static:
                continue
            remote = shared.joinpath(*relative.parts[1:])
        else:
            remote = target.joinpath(*relative.parts)
        remote.fs.put_file(str(path), remote.path)
    shutil.rmtree(built, ignore_errors=True)


def report_file(relative: str) -> UPath:
    """The file at ``relative`` (``<flow>/<run>/…``) under the reports directory; a run's
    Data Docs asset (``<flow>/<run>/static/…``) kept once per flow away from local disk
    (see :func:`publish_docs`) is the flow's copy."""
    parts = [p for p in relative.split("/") if p]
    path = reports_dir().joinpath(*parts)
    if is_local(path) or len(parts) < 4 or parts[2] != "static" or path.exists():
        return path
    return reports_dir().joinpath(parts[0], SHARED_STATIC, *parts[3:])


@dataclass(frozen=True)
class Retention:
    """How many of a flow's run reports stay, and for how long
    (``mirrorflow.reports.retention.runs`` and ``.days``)."""

    runs: int
    days: int

    @classmethod
    def of(cls, flow: FlowConfig) -> Retention:
        return cls(flow.get("mirrorflow.reports.retention.runs"),
                   flow.get("mirrorflow.reports.retention.days"))


def write(flow_name: str, run_id: str, summary: dict,
          retention: Retention | None = None) -> UPath:
    """Write the run's summary and refresh the flow's index page; with ``retention``
    (a run's last report), remove the reports it no longer keeps."""
    directory = run_dir(flow_name, run_id)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / SUMMARY
    # One line: json's C encoder (indenting takes its Python one, 4x slower on a run of
    # 1,000 partitions); `mirrorflow report` renders it for people.
    path.write_text(json.dumps(summary, sort_keys=True) + "\n")
    gone: list[str] = []
    if retention is not None:
        gone = prune(flow_name, retention, keep=directory.name)
    rows = [r for r in runs(flow_name) if r["dir"] != directory.name and r["dir"] not in gone]
    rows = [*rows, _row(directory.name, summary)][-INDEX_RUNS:]
    _replace(flow_dir(flow_name) / RUNS, json.dumps(rows, indent=1))
    write_index(flow_name, rows)
    return path


def write_part(flow_name: str, run_id: str, name: str, value) -> UPath:
    """Keep ``value`` (JSON) in the run's directory as its part ``name`` (a DAG task's
    whole output, :mod:`mirrorflow.airflow.xcoms`)."""
    path = run_dir(flow_name, run_id) / PARTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    _replace(path, json.dumps(value))
    return path


DRIVER_LOG = "spark-driver.log"


def write_driver_log(flow_name: str, run_id: str, text: str) -> UPath:
    """Keep a failed spark-submit job's whole output (its driver's log) in the run's
    directory, beside its report: the error names this path."""
    path = run_dir(flow_name, run_id) / DRIVER_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    _replace(path, text)
    return path


def read_part(flow_name: str, run_id: str, name: str):
    """The run's part ``name``, or None where there is none."""
    try:
        return json.loads((run_dir(flow_name, run_id) / PARTS / f"{name}.json").read_text())
    except FileNotFoundError:
        return None


def prune(flow_name: str, retention: Retention, keep: str) -> list[str]:
    """Remove the flow's run reports past ``retention`` (never ``keep``, the run writing);
    the names removed. Its cost is bounded by what retention keeps, not by the runs the
    flow ever made."""
    found = sorted(((_mtime(p), p.parent.name)
                    for p in flow_dir(flow_name).glob(f"*/{SUMMARY}")), reverse=True)
    oldest = time.time() - retention.days * 86_400
    gone = [name for i, (mtime, name) in enumerate(found)
            if name != keep and (i >= retention.runs or mtime < oldest)]
    for name in gone:
        _remove(flow_dir(flow_name) / name)
    return gone


def _mtime(path: UPath) -> float:
    """When the file was last written (fsspec's ``modified`` away from local disk)."""
    return path.stat().st_mtime if is_local(path) else path.fs.modified(path.path).timestamp()


def _remove(directory: UPath) -> None:
    if is_local(directory):
        shutil.rmtree(directory, ignore_errors=True)
    elif directory.exists():
        directory.fs.rm(directory.path, recursive=True)


def _row(name: str, summary: dict) -> dict:
    """What the index page and the status view show of one run (its summary of a flow of
    thousands of partitions is megabytes: it is read only when that run is shown)."""
    lag = summary.get("lag")
    validation = summary.get("validation") or {}
    return {"dir": name, "run_id": str(summary.get("run_id", "")), "verdict": verdict(summary),
            "docs": bool(validation.get("data_docs")),
            "records": summary.get("records", 0),
            "verified_records": validation.get("verified_records", ""),
            "duration_s": summary.get("duration_s", ""),
            "lag": None if lag is None else sum(lag.values())}


def _replace(path: UPath, text: str) -> None:
    """Write ``text`` to ``path`` whole: a reader sees the old file or the new one (an
    object store's put is whole already)."""
    if not is_local(path):
        path.write_text(text)
        return
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(text)
    part.replace(path)


def runs(flow_name: str) -> list[dict]:
    """The rows of the flow's newest runs (at most :data:`INDEX_RUNS`), oldest first. A
    reports directory older than the rows file gets them from its newest summaries."""
    try:
        return json.loads((flow_dir(flow_name) / RUNS).read_text())
    except FileNotFoundError:
        return [_row(p.parent.name, summary) for p, summary in summaries(flow_name, INDEX_RUNS)]


def summaries(flow_name: str, last: int | None = None) -> list[tuple[UPath, dict]]:
    """(path, summary) of the flow's runs, oldest first; only the newest ``last`` are read."""
    found = sorted(flow_dir(flow_name).glob(f"*/{SUMMARY}"), key=_mtime)
    return [(p, json.loads(p.read_text())) for p in found[-last if last else 0:]]


def read(flow_name: str, run_id: str | None = None) -> dict:
    """A run's summary, or the newest one; FileNotFoundError names what is missing."""
    if run_id is None:
        newest = runs(flow_name)[-1:]
        path = flow_dir(flow_name) / newest[0]["dir"] / SUMMARY if newest else None
        if path is None or not path.exists():
            raise FileNotFoundError(f"no report for flow {flow_name!r} in "
                                    f"{flow_dir(flow_name)}")
        return json.loads(path.read_text())
    path = run_dir(flow_name, run_id) / SUMMARY
    if not path.exists():
        raise FileNotFoundError(f"no report for run {run_id!r} of flow {flow_name!r} in "
                                f"{flow_dir(flow_name)}")
    return json.loads(path.read_text())


def verdict(summary: dict) -> str:
    validation = summary.get("validation")
    if not validation:
        return "not validated"
    return "passed" if validation.get("success") else "FAILED"


def write_index(flow_name: str, shown: list[dict] | None = None) -> UPath:
    """The flow's index page: newest runs first (``shown``: their rows, by default
    :func:`runs`), with pass/fail and links."""
    rows = []
    for run in reversed(runs(flow_name) if shown is None else shown):
        name = html.escape(run["dir"])
        link = f'<a href="{name}/index.html">Data Docs</a>' if run.get("docs") else ""
        rows.append(
            f'<tr class="{"ok" if run["verdict"] == "passed" else "bad"}">'
            f"<td>{html.escape(run['run_id'])}</td>"
            f"<td>{html.escape(run['verdict'])}</td><td>{run['records']}</td>"
            f"<td>{run['verified_records']}</td>"
            f"<td>{run['duration_s']}</td>"
            f'<td><a href="{name}/{SUMMARY}">summary</a> {link}</td>'
            "</tr>")
    page = (
        "<!doctype html><meta charset=utf-8>"
        f"<title>mirrorflow {html.escape(flow_name)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:.3em .8em;"
        "border-bottom:1px solid #ddd;text-align:left}.ok td:nth-child(2){color:#060}"
        ".bad td:nth-child(2){color:#b00;font-weight:bold}</style>"
        f"<h1>mirrorflow: flow {html.escape(flow_name)}</h1>"
        "<table><tr><th>run</th><th>completeness</th><th>records mirrored</th>"
        "<th>records verified</th><th>seconds</th><th></th></tr>"
        + "".join(rows) + "</table>")
    path = flow_dir(flow_name) / "index.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


def describe_break(found: dict) -> str:
    """One named break in a source partition's chain (:class:`mirrorflow.source.plan_records.Break`
    as a dict): where, why, which offsets."""
    where = f"{found['topic']}[{found['partition']}]"
    skipped = (f"offsets {found['start']}..{found['end'] - 1}" if found["end"] > found["start"]
               else f"at offset {found['end']}")
    return f"{where} {found['cause']} {skipped}: {found['detail']}"


def render(summary: dict) -> str:
    """The summary as a terminal table: per partition planned, written by this run,
    written by an earlier attempt, verified, digest match and lag, then the failures, what
    the proof noted (timestamps not compared, compaction, restamped records), the data
    loss recorded, a schema transfer's id mappings and the heartbeat's age."""
    validation = summary.get("validation") or {}
    lines = [f"flow {summary.get('flow')}  run {summary.get('run_id')}  "
             f"plan {summary.get('plan_id')}",
             f"completeness: {verdict(summary)}"
             + (f"  (verified {validation.get('verified_records', 0)} of "
                f"{validation.get('planned_records', 0)} records, fraction setting "
                f"{validation.get('fraction')})" if validation else "")]
    cycles = summary.get("cycles") or []
    if cycles:
        lines.append(f"cycles: {len(cycles) + 1}; before this plan the run committed "
                     + ", ".join(f"plan {c['plan_id']} ({c['records']} records, proof "
                                 f"{c['proof']})" for c in cycles)
                     + "; 'written' counts every cycle, 'planned' and 'verified' the last")
    if summary.get("failed"):
        lines.append("the run failed before its commit: nothing of it was committed; the "
                     "lag and heartbeat age below were measured after the failure")
    delivery = summary.get("delivery") or {}
    if delivery.get("exactly_once") is False:
        lines.append("delivery: AT-LEAST-ONCE, not exactly-once: "
                     + "; ".join(delivery.get("reasons", [])))
    if summary.get("source_isolation") == "read_uncommitted":
        lines.append("source read read_uncommitted: records of aborted and open transactions "
                     "were mirrored as committed ones")
    written = {(p["topic"], p["partition"]): p for p in summary.get("partitions", [])}
    checked = {(r["topic"], r["partition"]): r for r in validation.get("ranges", [])}
    lags = summary.get("lag") or {}
    header = f"  {'partition':<32} {'planned':>10} {'written':>10} {'earlier':>10} " \
             f"{'verified':>10} {'digest':>7} {'lag':>8}"
    lines.append(header)
    for tp in sorted(set(written) | set(checked)):
        w, c = written.get(tp, {}), checked.get(tp, {})
        planned = c.get("planned", w.get("records", 0))
        verified = c.get("target_records") if c.get("verified") else "-"
        match = ("yes" if c.get("digest_match") else "NO") if c.get("verified") else "-"
        lag = lags.get(f"{tp[0]}[{tp[1]}]", c.get("lag"))
        lines.append(f"  {f'{tp[0]}[{tp[1]}]':<32} {planned:>10} "
                     f"{w.get('records', 0) - w.get('skipped', 0):>10} "
                     f"{w.get('skipped', 0):>10} {verified:>10} {match:>7} "
                     f"{'-' if lag is None else lag:>8}")
    lines += [f"  ! {failure}" for failure in validation.get("failures", [])]
    lines += [f"  note: {note}" for note in validation.get("notes", [])]
    lines += [f"  ! data loss recorded (failOnDataLoss = false): {g['topic']}[{g['partition']}] "
              f"offsets {g['start']}..{g['end'] - 1} were removed by retention before they "
              "were mirrored" for g in summary.get("gaps", [])]
    lines += [f"  break {describe_break(b)}" for b in summary.get("breaks", [])]
    lines += [f"  schema {m['remote_topic']} {m['part']}: source id {m['source_id']} -> target "
              f"id {m['target_id']} ({m['subject']} v{m['version']}, {m['schema_type']})"
              for m in validation.get("schemas", [])]
    heartbeat = summary.get("heartbeat") or {}
    if heartbeat.get("age_ms") is not None:
        lines.append(f"heartbeat: newest on the target {heartbeat['age_ms']} ms old")
    if validation.get("data_docs"):
        lines.append(f"Data Docs: {validation['data_docs']}")
    return "\n".join(lines)
