"""What the tasks of a flow's DAG do (:mod:`mirrorflow.airflow.dags` builds the DAG):
``plan`` once its run owns the flow, ``commit_and_sync_offsets`` and ``report``, each
calling the library functions that ``mirrorflow run`` calls. ``mirror`` is
:class:`mirrorflow.airflow.operators.MirrorJobOperator`. Every write holds the flow's
lease for the run; the report lets go of it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import datetime
from typing import NoReturn

from mirrorflow.airflow import COMMIT_TASK
from mirrorflow.airflow.xcoms import brief, handoff, received
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.plain import plain

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _leased(config_file: str, flow_name: str, run_id: str
            ) -> Iterator[tuple[MirrorConfig, FlowConfig]]:
    """The config and flow, with the flow's lease held for ``run_id`` (one writer at a
    time, even beside a ``mirrorflow run`` or another deployment)."""
    from mirrorflow.lease import FlowLease

    config = load_config(config_file)
    flow = config.flow(flow_name)
    with FlowLease(config, flow, run_id):
        yield config, flow


def _release(config_file: str, flow_name: str, run_id: str) -> None:
    """The run lets go of its flow (its state-writing tasks are done, whatever their
    outcome), so the next run's ``plan`` goes on at once."""
    from mirrorflow.lease import FlowLease

    config = load_config(config_file)
    FlowLease(config, config.flow(flow_name), run_id).release_run()


def plan(config_file: str, flow_name: str, params: dict, run_id: str) -> dict:
    """What the ``plan`` task does once its run owns the flow
    (:class:`mirrorflow.airflow.sensors.FlowClaimSensor`): write this run's heartbeats (as
    MM2's connectors of the pair and its reverse do, first, so that this run's mirror
    carries them; ``heartbeat_ms`` is their timestamp), forget the cycles an earlier
    execution of this run kept (:func:`mirrorflow.repeat.forget`), reset positions if asked
    (confirmed), then plan or resume the pending plan. A dry run takes no lease and writes
    nothing: it logs the reset's positions and the plan that would follow, and skips the
    rest of the run."""
    from mirrorflow import repeat
    from mirrorflow.heartbeat import heartbeats

    if params.get("dry_run"):
        config = load_config(config_file)
        _dry_run(config, config.flow(flow_name), params, run_id)
    with _leased(config_file, flow_name, run_id) as (config, flow):
        repeat.forget(flow_name, run_id)
        beat = heartbeats.emit(config, flow) if heartbeats.emits(config, flow) else None
        return {**_plan(config, flow, params, run_id), "heartbeat_ms": beat}


def _dry_run(config: MirrorConfig, flow: FlowConfig, params: dict, run_id: str) -> NoReturn:
    from airflow.sdk.exceptions import AirflowSkipException

    from mirrorflow.airflow.operators import plan_limits
    from mirrorflow.operations import reset_starts
    from mirrorflow.source.plan import build_plan

    starts = None
    if params.get("reset", "none") != "none":
        starts = reset_starts(config, flow, params["reset"], params.get("reset_timestamp_ms"))
        log.info("dry run: a reset to %s would set the next offsets:\n%s", params["reset"],
                 "\n".join(f"{t}[{p}] {s}" for (t, p), s in sorted(starts.items())))
    dry = build_plan(config, flow, run_id, dry_run=True, starts=starts, **plan_limits(params))
    lines = [f"{r.topic}[{r.partition}] {r.start}..{r.end - 1} -> {r.remote_topic}"
             for r in dry.ranges]
    log.info("dry run, nothing written; the plan would be:\n%s", "\n".join(lines) or "empty")
    raise AirflowSkipException(f"dry run: {len(dry.ranges)} ranges, "
                               f"{dry.offsets} offsets; nothing written")


def _plan(config: MirrorConfig, flow: FlowConfig, params: dict, run_id: str) -> dict:
    from mirrorflow.airflow.operators import plan_limits
    from mirrorflow.operations import check_confirmation, reset_positions
    from mirrorflow.source.plan import plan_run

    if params.get("reset", "none") != "none":
        check_confirmation(flow, params.get("confirm_reset"))
        result = reset_positions(config, flow, params["reset"], params.get("reset_timestamp_ms"),
                                 run_id)
        log.warning("positions of %s reset to %s: %s", flow.name, result.mode, result.positions)
    stored, resumed = plan_run(config, flow, run_id, **plan_limits(params))
    return {"plan_id": stored.plan_id, "resumed": resumed, "ranges": len(stored.ranges),
            "offsets": stored.offsets}


def commit_and_sync_offsets(config_file: str, flow_name: str, planned: dict,
                            run_id: str, ti=None) -> dict:
    """Check the Spark job's result and its passing proof, emit offset syncs, commit
    positions; then what MM2's checkpoint connector does (checkpoints, translated offsets
    into idle target groups) and the topic configs and ACLs that are due, each as the flow
    enables it, in the order ``mirrorflow run`` does them. One task, not three: each
    follows the commit and needs no task boundary, which costs a scheduler round and a task
    process, a second or more of a run.

    The plan is the run's last: the ``plan`` task's, or the one ``mirror`` planned last
    where it repeated its cycle (:mod:`mirrorflow.repeat`), whose earlier cycles the
    result then holds too. A retry after a commit whose syncs failed finds the plan
    committed by this run: it reports that commit again and redoes the syncs, each forward
    only. A plan that is no longer pending otherwise (this task of an older run, cleared or
    re-run) commits nothing: the task says who committed or superseded it, then syncs what
    is due."""
    from mirrorflow import repeat
    from mirrorflow.run import checkpoint_step, metadata_step

    planned = last_plan(planned, ti)
    with _leased(config_file, flow_name, run_id) as (config, flow):
        committed = _commit(config, flow, planned, run_id)
        # For the report, should a sync below fail: the run committed all the same.
        earlier = repeat.kept(flow_name, run_id)
        handoff(flow_name, run_id, COMMIT_TASK, _with_cycles(earlier, committed))
        checkpoint_step(config, flow, committed)
        committed.metadata = metadata_step(config, flow)
    return handoff(flow_name, run_id, COMMIT_TASK, _with_cycles(earlier, committed))


def _with_cycles(earlier: dict | None, committed) -> dict:
    """The commit's result with the run's earlier cycles folded in; where the plan is one
    of theirs (``mirror`` skipped after its cycles committed it), theirs, with its note."""
    from mirrorflow import repeat

    result = plain(committed)
    if committed.plan_id not in repeat.plan_ids(earlier):
        return repeat.fold(earlier, result)
    return {**earlier, "note": result["note"], "metadata": result["metadata"]}


def last_plan(planned: dict, ti) -> dict:
    """The run's last plan: the one its ``mirror`` task mirrored last (it may have planned
    again: :mod:`mirrorflow.repeat`), else (``mirror`` skipped) the ``plan`` task's."""
    mirrored = ti.xcom_pull(task_ids="mirror") if ti is not None else None
    return {**planned, **{k: mirrored[k] for k in ("plan_id", "resumed") if k in mirrored}} \
        if mirrored else planned


def _commit(config: MirrorConfig, flow: FlowConfig, planned: dict, run_id: str):
    """The commit's :class:`mirrorflow.run.RunResult`, or what stands for it where the
    plan is no longer pending."""
    from mirrorflow.run import RunResult, commit_step, summarize
    from mirrorflow.source.plan_records import PlanNotPendingError
    from mirrorflow.source.plan_store import PlanStore

    store = PlanStore(config, flow)
    plan_id, resumed = planned["plan_id"], planned["resumed"]
    try:
        store.require_pending(plan_id)  # before load: old plans are pruned
        return commit_step(config, flow, store.load(plan_id), run_id, resumed)
    except PlanNotPendingError as exc:
        log.warning("%s", exc)
        if exc.committed_by != run_id:
            return RunResult(flow.name, run_id, plan_id, resumed, note=str(exc))
    again = summarize(flow, store.load(plan_id), store.result(plan_id), resumed)
    again.run_id, again.note = run_id, f"plan {plan_id} was committed by an earlier attempt"
    return again


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
