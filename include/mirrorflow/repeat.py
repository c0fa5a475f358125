"""A DAG run that repeats its cycle (``mirrorflow.mirror.repeat.seconds``): its ``mirror``
task, once its plan is proved, commits it and plans, mirrors and proves what arrived since,
again and again, until that many seconds after the task started; its last plan (or one
whose proof failed, or an empty one) goes to the run's ``validate``, ``commit`` and sync
tasks like a run's one plan; the run's report covers every cycle.

Why: a run's Airflow part (a scheduler round and a task process per task, the DAG parsed
by each) costs about as much CPU as its mirroring, and under ``@continuous`` a record
waits for a whole run. Cycles inside one task pay it once for several plans. Each cycle is
the same plan, mirror, proof and commit that a run does, each commit only after its proof
passed, each write fenced by the run's lease; a cycle that fails leaves its plan pending
for the task's retry or the next run, as a failed run does.

The committed cycles are folded into one result (:func:`fold`), kept beside the run's
report as the part :data:`PART`; the commit task folds its last plan's commit into it.
"""

from __future__ import annotations

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.quality import reports
from mirrorflow.run import checkpoint_step, commit_step, group_sync_step
from mirrorflow.source.plan_records import Plan

PART = "cycles"  # the folded result of a run's committed cycles, in its report folder
SUMMED = ("records", "already_there", "bytes", "offset_syncs", "checkpoints")
PARTITION_SUMMED = ("records", "bytes", "skipped", "write_seconds", "restamped")


def commit_cycle(config: MirrorConfig, flow: FlowConfig, plan: Plan, run_id: str,
                 resumed: bool, verified_records: int) -> dict:
    """Commit a cycle's proved plan (:func:`mirrorflow.run.
    commit_step`: only while pending, only with its passing proof) with its checkpoints
    and group offset sync, as the commit task does; the result, plain, with its proof in
    brief (the task's verdict: :func:`_cycle` reads it; the run's report takes the last
    plan's whole proof from the plan store)."""
    report = commit_step(config, flow, plan, run_id, resumed)
    report.validation = {"success": True, "verified_records": verified_records}
    checkpoint_step(config, flow, report)
    group_sync_step(config, flow, report)
    return report.summary()


def keep(flow_name: str, run_id: str, earlier: dict | None) -> None:
    """Keep the run's earlier cycles folded (None: none)."""
    reports.write_part(flow_name, run_id, PART, earlier)


def forget(flow_name: str, run_id: str) -> None:
    """Drop the run's kept cycles as its ``plan`` starts: a run cleared whole and run again
    begins with none, since the execution that committed them reported them (and counted
    them in the metrics); a retry of ``mirror`` alone keeps them."""
    if kept(flow_name, run_id) is not None:
        keep(flow_name, run_id, None)


def kept(flow_name: str, run_id: str) -> dict | None:
    """The run's earlier cycles, folded; None where it had none."""
    return reports.read_part(flow_name, run_id, PART)


def count(earlier: dict | None) -> int:
    """How many cycles ``earlier`` (a :func:`fold`) holds."""
    return 0 if earlier is None else len(earlier.get("cycles", [])) + 1


def plan_ids(earlier: dict | None) -> list[str]:
    """The plans of the cycles ``earlier`` holds."""
    if earlier is None:
        return []
    return [*(c["plan_id"] for c in earlier.get("cycles", [])), earlier["plan_id"]]


def fold(earlier: dict | None, later: dict) -> dict:
    """One result for two cycles in a row of the same run: ``later``'s plan, proof and
    syncs, the records, bytes and syncs of both, each partition's range from the first
    cycle's start to the last's end, and ``cycles``: each cycle before the last, in
    brief (its plan, records and proof)."""
    if earlier is None:
        return later
    folded = dict(later)
    for key in SUMMED:
        folded[key] = earlier.get(key, 0) + later.get(key, 0)
    for key in ("gaps", "breaks"):
        folded[key] = [*earlier.get(key, []), *later.get(key, [])]
    delivery = earlier.get("delivery") or {"exactly_once": True, "reasons": []}
    reasons = [*delivery["reasons"], *(r for r in later["delivery"]["reasons"]
                                      if r not in delivery["reasons"])]
    folded["delivery"] = {"exactly_once": delivery["exactly_once"]
                          and later["delivery"]["exactly_once"], "reasons": reasons}
    parts = {(p["topic"], p["partition"]): p for p in earlier.get("partitions", [])}
    for p in later.get("partitions", []):
        tp = (p["topic"], p["partition"])
        parts[tp] = _fold_partition(parts[tp], p) if tp in parts else p
    folded["partitions"] = list(parts.values())
    folded["cycles"] = [*earlier.get("cycles", []), _cycle(earlier)]
    return folded


def _cycle(result: dict) -> dict:
    """A cycle in brief, for the run's report: its plan, what it wrote and its proof."""
    validation = result.get("validation") or {}
    return {"plan_id": result["plan_id"],
            "records": result["records"] - sum(c["records"] for c in result.get("cycles", [])),
            "verified_records": validation.get("verified_records"),
            "proof": "passed" if validation.get("success") else "none"}


def _fold_partition(a: dict, b: dict) -> dict:
    out = dict(b, planned_start=a["planned_start"],
               exactly_once=a.get("exactly_once", True) and b.get("exactly_once", True))
    for key in PARTITION_SUMMED:
        out[key] = a.get(key, 0) + b.get(key, 0)
    first, last = a.get("first_downstream"), b.get("last_downstream")
    out["first_downstream"] = first if first is not None else b.get("first_downstream")
    out["last_downstream"] = last if last is not None else a.get("last_downstream")
    for metric in ("record_age_ms", "replication_latency_ms"):
        out[metric] = _fold_stats(a.get(metric), a["records"], b.get(metric), b["records"])
    return out


def _fold_stats(a: dict | None, a_n: int, b: dict | None, b_n: int) -> dict | None:
    """min, max and the records-weighted avg of two cycles' figures of one partition."""
    if not a or not b:
        return b or a
    total = a_n + b_n
    return {"min": min(a["min"], b["min"]), "max": max(a["max"], b["max"]),
            "avg": (a["avg"] * a_n + b["avg"] * b_n) / total if total else b["avg"]}
