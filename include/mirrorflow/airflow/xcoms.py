"""What a flow's DAG tasks hand each other through XCom: bounded, whatever the partition
count.

Airflow keeps every XCom in its metadata database (and renders it in the UI). A run's
figures per partition or group (its commit's ranges, the lag, synced group offsets) grow
with the flow: 10,000 partitions make megabytes, every run, for months. A task therefore
writes what it did beside the run's report (:func:`handoff`) and returns it in
:func:`brief`; the task that needs the whole reads it from there (:func:`received`), or
takes the brief where the reports directory is not shared with it.
"""

from __future__ import annotations

import logging
from typing import Any

from mirrorflow.quality import reports

log = logging.getLogger(__name__)

ITEMS = 20  # list items and dict entries kept at each level
CHARACTERS = 2000  # of a string


def brief(value: Any, top: bool = True) -> Any:
    """``value`` with every list and every nested dict cut to its first :data:`ITEMS` (a
    list then ends with ``"... N more"``, a dict gets the key ``"..."``: N more) and every
    string to :data:`CHARACTERS`: JSON of a bounded size that still names the first
    partitions, groups or failures. A dict at the top keeps all its keys: it is a
    record's fields (a run's summary), not entries per partition."""
    if isinstance(value, dict):
        items = list(value.items())
        out = {k: brief(v, False) for k, v in (items if top else items[:ITEMS])}
        if len(items) > len(out):
            out["..."] = f"{len(items) - ITEMS} more"
        return out
    if isinstance(value, (list, tuple)):
        out = [brief(v, False) for v in value[:ITEMS]]
        return [*out, f"... {len(value) - ITEMS} more"] if len(value) > ITEMS else out
    if isinstance(value, str) and len(value) > CHARACTERS:
        return f"{value[:CHARACTERS]}... ({len(value)} characters)"
    return value


def handoff(flow_name: str, run_id: str, task_id: str, value: Any) -> Any:
    """Keep ``value`` (JSON) beside the run's report as task ``task_id``'s output; its
    :func:`brief` for the task to return as its XCom."""
    reports.write_part(flow_name, run_id, task_id, value)
    return brief(value)


def received(flow_name: str, run_id: str, task_id: str, ti) -> Any:
    """What task ``task_id`` of this run handed off: the whole where its XCom (the brief,
    None when the task returned nothing) is there and the part can be read."""
    short = ti.xcom_pull(task_ids=task_id) if ti is not None else None
    if short is None:
        return None
    whole = reports.read_part(flow_name, run_id, task_id)
    if whole is None:
        log.warning("%s of run %s: no whole output in the reports directory (not shared "
                    "with this worker?); the report has its brief", task_id, run_id)
        return short
    return whole
