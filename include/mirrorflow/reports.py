"""Run reports: one JSON summary per run under a reports directory, per flow.

The directory is ``$MIRRORFLOW_REPORTS_DIR``, default ``reports/`` at the project root.
On a multi-worker deployment point it at shared storage.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

REPORTS_ENV = "MIRRORFLOW_REPORTS_DIR"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "reports"


def reports_dir() -> Path:
    return Path(os.environ.get(REPORTS_ENV) or DEFAULT_DIR)


def _flow_dir(flow_name: str) -> Path:
    return reports_dir() / flow_name.replace("->", "__")


def _file_name(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", run_id) + ".json"


def write(flow_name: str, run_id: str, summary: dict) -> Path:
    directory = _flow_dir(flow_name)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / _file_name(run_id)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return path


def read(flow_name: str, run_id: str | None = None) -> dict:
    """A run's summary, or the newest one; FileNotFoundError names what is missing."""
    directory = _flow_dir(flow_name)
    if run_id is not None:
        path = directory / _file_name(run_id)
    else:
        found = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise FileNotFoundError(f"no report for flow {flow_name!r} in {directory}")
        path = found[-1]
    if not path.exists():
        raise FileNotFoundError(f"no report for run {run_id!r} of flow {flow_name!r} in "
                                f"{directory}")
    return json.loads(path.read_text())
