"""The ``report`` task of a flow's DAG: whatever the run's other tasks did, it lets go of
the flow, writes the run's summary (the commit's result with what the tasks after it did),
the flow's report index and metrics, and fails where the run must."""

from __future__ import annotations

import logging
from datetime import datetime

from mirrorflow.airflow import COMMIT_TASK
from mirrorflow.airflow.run_tasks import last_plan
from mirrorflow.airflow.xcoms import brief, received
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import FlowConfig, MirrorConfig

log = logging.getLogger(__name__)

# The tasks after the commit, whose outputs the summary takes in.
SYNC_TASKS = ("checkpoint", "sync_group_offsets", "sync_topic_configs")


def _release(config_file: str, flow_name: str, run_id: str) -> None:
    """The run lets go of its flow (its state-writing tasks are done, whatever their
    outcome), so the next run's ``plan`` goes on at once."""
    from mirrorflow.lease import FlowLease

    config = load_config(config_file)
    FlowLease(config, config.flow(flow_name), run_id).release_run()


def report(config_file: str, flow_name: str, run_id: str, params: dict | None = None,
           ti=None, dag_run=None) -> dict:
    """The run's last task, whatever the others did: it lets go of the flow, writes the
    run's summary and the flow's metrics, then fails where the run must.

    After a commit the summary holds the commit's result, the validation, what the other
    tasks returned and the lag after the run. After a failure: the report the failed step
    wrote (if any), marked failed, with the lag and heartbeat age measured now, so that
    they keep rising in the metrics while runs fail. It then fails, without retries,
    naming flow, partition and limit, past ``mirrorflow.alert.*``, and after a failed run:
    one that failed before its commit, and one whose later task failed (a checkpoint, a
    metadata sync, a heartbeat that never arrived), which would otherwise end green behind
    this task's ``all_done``. (One task, not three: a task costs a scheduler round and a
    task process, a second or more of every run.)"""
    from airflow.sdk.exceptions import AirflowSkipException

    if (params or {}).get("dry_run"):
        raise AirflowSkipException("dry run: nothing held, nothing to report")
    _release(config_file, flow_name, run_id)
    summary = _summary(config_file, flow_name, run_id, ti, dag_run)
    _check(flow_name, run_id, summary, ti)
    return summary


def _summary(config_file: str, flow_name: str, run_id: str, ti, dag_run) -> dict:
    """Write the run's report and metrics; return the summary in brief, with its alerts."""
    from mirrorflow.quality import metrics, reports
    from mirrorflow.source.plan_store import PlanStore

    config = load_config(config_file)
    flow = config.flow(flow_name)
    committed = committed_output(flow_name, run_id, ti)
    if committed is None:
        return _failed_report(config, flow, run_id)
    for task_id in SYNC_TASKS:  # what the tasks after the commit did, each its own part
        committed = {**committed, **(received(flow_name, run_id, task_id, ti) or {})}
    summary = dict(committed, run_id=run_id,
                   validation=PlanStore(config, flow).validation(committed["plan_id"]),
                   lag=metrics.replication_lag(config, flow))
    # The sensor's XCom is its whole status (one pair's heartbeat, not per partition).
    heartbeat = ti.xcom_pull(task_ids="await_heartbeat") if ti is not None else None
    if heartbeat is not None:
        summary["heartbeat"] = heartbeat
    if dag_run is not None and dag_run.start_date is not None:
        summary["duration_s"] = round(
            (datetime.now(dag_run.start_date.tzinfo) - dag_run.start_date).total_seconds(), 3)
    path = reports.write(flow_name, run_id, summary, reports.Retention.of(flow))
    metrics.update(flow_name, summary)
    log.info("report of %s written to %s", flow_name, path)
    return _for_check(flow, summary)


def committed_output(flow_name: str, run_id: str, ti) -> dict | None:
    """What the run's commit task handed off: the whole behind its XCom; else, where the
    task failed after its commit (a checkpoint, a metadata sync), what it kept before its
    syncs, if that is of this run's plan (not left by an earlier attempt of the run, cleared
    since, whose plan was committed then); else the cycles its ``mirror`` committed before
    it failed (:mod:`mirrorflow.repeat`), if any."""
    from mirrorflow import repeat
    from mirrorflow.quality import reports

    committed = received(flow_name, run_id, COMMIT_TASK, ti)
    if committed is not None or ti is None:
        return committed
    kept = reports.read_part(flow_name, run_id, COMMIT_TASK)
    planned = last_plan(ti.xcom_pull(task_ids="plan") or {}, ti)
    if kept is not None and kept.get("plan_id") == planned.get("plan_id"):
        return kept
    return repeat.kept(flow_name, run_id)  # the cycles ``mirror`` committed before it failed


def _for_check(flow: FlowConfig, summary: dict) -> dict:
    """The report task's XCom: the summary in brief, with the alerts the task fails on
    (computed here, from the whole summary)."""
    from mirrorflow.quality import metrics

    return {**brief({k: v for k, v in summary.items() if k != "alerts"}),
            "alerts": brief(metrics.alerts(flow, summary))}


def _failed_report(config: MirrorConfig, flow: FlowConfig, run_id: str) -> dict:
    """A run that did not commit: the report its failed step wrote (already counted in
    the metrics), else a new one, with the lag and heartbeat age measured now."""
    from mirrorflow.quality import metrics, reports

    try:
        summary, counted = reports.read(flow.name, run_id), True
    except FileNotFoundError:
        summary, counted = {"flow": flow.name, "run_id": run_id, "partitions": []}, False
    summary.update(metrics.health(config, flow), failed=True)
    reports.write(flow.name, run_id, summary, reports.Retention.of(flow))
    metrics.update(flow.name, summary, counters=not counted)
    return _for_check(flow, summary)


def _check(flow_name: str, run_id: str, summary: dict, ti) -> None:
    """Fail (no retry: the summary is written) after a failed run, or past an alert."""
    from airflow.sdk.exceptions import AirflowFailException

    found = summary.get("alerts", [])
    if summary.get("failed"):
        raise AirflowFailException("\n".join([f"flow {flow_name}: the run failed before its "
                                              "commit (see its failed task)", *found]))
    failed = _failed_tasks(ti, run_id) if ti is not None else []
    if failed:
        which = (f"task {failed[0]} failed (see its log)" if len(failed) == 1
                 else f"tasks {', '.join(failed)} failed (see their logs)")
        raise AirflowFailException("\n".join([f"flow {flow_name}: the run committed, but its "
                                              f"{which}", *found]))
    if found:
        raise AirflowFailException("\n".join(found))


def _failed_tasks(ti, run_id: str) -> list[str]:
    """The run's tasks that failed, or did not run because an upstream one failed."""
    states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[run_id]).get(run_id, {})
    return sorted(task for task, state in states.items()
                  if state in ("failed", "upstream_failed"))
