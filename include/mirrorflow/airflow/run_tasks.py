"""What the tasks of a flow's DAG do (:mod:`mirrorflow.airflow.dags` builds the DAG):
``plan`` once its run owns the flow, ``validate``, ``commit``, ``checkpoint``,
``sync_group_offsets`` and ``sync_topic_configs``, each calling the one step of
:mod:`mirrorflow.run` that ``mirrorflow run`` calls too. ``mirror`` is
:class:`mirrorflow.airflow.operators.MirrorJobOperator`, ``report``
:mod:`mirrorflow.airflow.report_task`. Every write holds the flow's lease for the run;
the report lets go of it. Each task does its own step only: retried or cleared alone, it
redoes nothing of another, and a task of an older run moves nothing back (a plan no
longer pending is not committed again; checkpoints and group offsets go forward only)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import NoReturn

from mirrorflow.airflow import COMMIT_TASK
from mirrorflow.airflow.xcoms import brief, handoff
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.plain import plain

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _leased(config_file: str, flow_name: str, run_id: str
            ) -> Iterator[tuple[MirrorConfig, FlowConfig]]:
    """The config and flow, with the flow's lease held for ``run_id`` (one writer at a
    time, even beside a ``mirrorflow run`` or another deployment), in a run's heap scope
    (:func:`mirrorflow.heap.run_scope`)."""
    from mirrorflow import heap
    from mirrorflow.lease import FlowLease

    config = load_config(config_file)
    flow = config.flow(flow_name)
    with heap.run_scope(), FlowLease(config, flow, run_id):
        yield config, flow


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
    dry = build_plan(config, flow, run_id, dry_run=True, starts=starts,
                     **plan_limits(params, flow.get("mirrorflow.spark.conn.id")))
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
    stored, resumed = plan_run(config, flow, run_id,
                               **plan_limits(params, flow.get("mirrorflow.spark.conn.id")))
    return {"plan_id": stored.plan_id, "resumed": resumed, "ranges": len(stored.ranges),
            "offsets": stored.offsets}


def validate(config_file: str, flow_name: str, run_id: str, ti=None) -> dict:
    """The ``validate`` task: the verdict of the proof the run's Spark job computed for
    its last plan (:func:`mirrorflow.run.validate_step`), with its Data Docs. A failed
    check fails here, without retries (the data would not change), naming the partitions
    and offsets at fault; nothing is committed. Skipped where the run's last plan has
    nothing to mirror, and where it is no longer pending (a task of an older run)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from mirrorflow.quality.verdicts import ValidationError
    from mirrorflow.run import validate_step
    from mirrorflow.source.plan_records import PlanNotPendingError
    from mirrorflow.source.plan_store import PlanStore

    planned = last_plan(ti.xcom_pull(task_ids="plan") or {}, ti) if ti is not None else {}
    config = load_config(config_file)
    flow = config.flow(flow_name)
    store = PlanStore(config, flow)
    try:
        store.require_pending(planned["plan_id"])
    except PlanNotPendingError as exc:
        raise AirflowSkipException(str(exc)) from None
    plan = store.load(planned["plan_id"])
    if not plan.ranges:
        raise AirflowSkipException(f"plan {plan.plan_id} has nothing to mirror; no proof")
    try:
        validation = validate_step(config, flow, plan, run_id, planned.get("resumed", False))
    except ValidationError as exc:
        raise AirflowFailException(str(exc)) from None
    validation.wait_for_docs()
    return {"plan_id": plan.plan_id, "success": True,
            "verified_records": validation.verified_records,
            "verified_fraction": round(validation.verified_fraction, 6),
            "data_docs": validation.data_docs, "notes": brief(validation.notes)}


def commit(config_file: str, flow_name: str, planned: dict, run_id: str, ti=None,
           outlet_events=None) -> dict:
    """The ``commit`` task: emit offset syncs, then commit positions (MM2's offset store)
    of the run's last plan (:func:`mirrorflow.run.commit_step`: only while it is pending,
    only with its passing proof), and publish what it wrote as asset events
    (:mod:`mirrorflow.airflow.assets`).

    The plan is the run's last: the ``plan`` task's, or the one ``mirror`` planned last
    where it repeated its cycle (:mod:`mirrorflow.repeat`), whose earlier cycles the
    result then holds too. A retry after a commit that failed on its way out finds the
    plan committed by this run and reports that commit again. A plan that is no longer
    pending otherwise (this task of an older run, cleared or re-run) commits nothing: the
    task says who committed or superseded it."""
    from mirrorflow import repeat
    from mirrorflow.airflow import assets

    planned = last_plan(planned, ti)
    with _leased(config_file, flow_name, run_id) as (config, flow):
        committed = _commit(config, flow, planned, run_id)
    # None where another run committed the plan: its result has no partitions.
    result = plain(committed)
    assets.keep(flow, run_id, assets.events_of(config, flow, result))
    assets.lineage(config, flow, result)
    if outlet_events is not None:
        assets.publish(flow, run_id, outlet_events)
    return handoff(flow_name, run_id, COMMIT_TASK,
                   _with_cycles(repeat.kept(flow_name, run_id), committed))


def checkpoint(config_file: str, flow_name: str, run_id: str) -> dict:
    """The ``checkpoint`` task: MM2's checkpoints for the selected groups, from the
    positions and offset syncs committed so far (:func:`mirrorflow.run.checkpoint_step`)."""
    from mirrorflow.run import RunResult, checkpoint_step

    with _leased(config_file, flow_name, run_id) as (config, flow):
        found = RunResult(flow_name, run_id, "", False)
        checkpoint_step(config, flow, found)
    return handoff(flow_name, run_id, "checkpoint", {
        "checkpoints": found.checkpoints, "checkpoint_latency_ms": found.checkpoint_latency_ms})


def sync_group_offsets(config_file: str, flow_name: str, run_id: str) -> dict:
    """The ``sync_group_offsets`` task: the selected groups' translated offsets into
    their idle target groups, forward only (:func:`mirrorflow.run.group_sync_step`)."""
    from mirrorflow.run import RunResult, group_sync_step

    with _leased(config_file, flow_name, run_id) as (config, flow):
        found = RunResult(flow_name, run_id, "", False)
        group_sync_step(config, flow, found)
    return handoff(flow_name, run_id, "sync_group_offsets", {"group_sync": found.group_sync})


def sync_topic_configs(config_file: str, flow_name: str, run_id: str) -> dict:
    """The ``sync_topic_configs`` task: topic configs and READ ACLs to the remote topics,
    per interval (``sync.topic.configs`` / ``sync.topic.acls``:
    :func:`mirrorflow.run.metadata_step`)."""
    from mirrorflow.run import metadata_step

    with _leased(config_file, flow_name, run_id) as (config, flow):
        done = metadata_step(config, flow)
    return handoff(flow_name, run_id, "sync_topic_configs", {"metadata": done})


def _with_cycles(earlier: dict | None, committed) -> dict:
    """The commit's result with the run's earlier cycles folded in; where the plan is one
    of theirs (``mirror`` skipped after its cycles committed it), theirs, with its note."""
    from mirrorflow import repeat

    result = plain(committed)
    if committed.plan_id not in repeat.plan_ids(earlier):
        return repeat.fold(earlier, result)
    return {**earlier, "note": result["note"]}


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


