"""One replication cycle of a flow: heartbeat, plan, mirror with Spark, prove the target
complete, commit positions and offset syncs, checkpoints and group offset sync, then sense
the heartbeat on the target and write the run's report.

These are the very functions the DAG's tasks call; ``mirrorflow run`` calls them in a row.
A failure at any step leaves the committed positions where they were and the plan
pending, so the next attempt finishes the same plan without writing a record twice.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from mirrorflow import heap
from mirrorflow.checkpoint import checkpoints
from mirrorflow.checkpoint.remote import topic_names
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.heartbeat import heartbeats
from mirrorflow.kafka.internal_topics import one_transaction, settle_writes
from mirrorflow.lease import FlowLease, unfenced_reason
from mirrorflow.plain import plain
from mirrorflow.progress import Sink, WriteProgress, describe_plan
from mirrorflow.quality import metrics, reports
from mirrorflow.quality.verdicts import Validation
from mirrorflow.source import history, ledger, offset_syncs, topic_sync
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import discover_topics, plan_run
from mirrorflow.source.plan_records import Plan
from mirrorflow.source.plan_store import PlanStore
from mirrorflow.spark.job import (
    EXIT_VALIDATION_FAILED,
    RESULT_MARKER,
    VALIDATION_MARKER,
    job_failure,
    run_steps,
)
from mirrorflow.spark.mirror import MirrorJobError
from mirrorflow.spark.session import flow_session_key, get_session, is_connect, spark_cores
from mirrorflow.spark.submit import classic_environment, driver_class_archive, submit_command

log = logging.getLogger(__name__)


class CommitRefusedError(MirrorflowError):
    """A plan without a passing completeness check was asked to commit (e.g. a ``mirror``
    task failed by its proof and marked success); nothing was committed."""


@dataclass(frozen=True)
class PartitionReport:
    topic: str
    partition: int
    remote_topic: str
    planned_start: int
    planned_end: int
    records: int
    bytes: int
    skipped: int
    first_downstream: int | None
    last_downstream: int | None
    record_age_ms: dict | None = None
    replication_latency_ms: dict | None = None
    write_seconds: float = 0.0
    exactly_once: bool = True  # written in transactions (else at-least-once)
    restamped: int = 0  # records stamped at or before the epoch, written with the plan's time


@dataclass
class RunResult:
    """What one cycle did: per topic-partition, the planned range and what was written."""

    flow: str
    run_id: str
    plan_id: str
    resumed: bool
    partitions: list[PartitionReport] = field(default_factory=list)
    breaks: list[dict] = field(default_factory=list)  # the chains' named breaks (Break)
    plan_run_id: str | None = None  # the run that made the plan
    note: str | None = None  # what a step that did nothing says instead
    source_isolation: str = "read_committed"  # read_uncommitted copies aborted transactions
    # How the run delivered: exactly-once, or at-least-once and why (a target that refuses
    # transactions under exactly.once.support = requested).
    delivery: dict = field(default_factory=lambda: {"exactly_once": True, "reasons": []})
    gaps: list[dict] = field(default_factory=list)
    records: int = 0  # written by this run
    already_there: int = 0  # of the plan's records, written by an earlier attempt
    bytes: int = 0  # written by this run
    offset_syncs: int = 0
    checkpoints: int = 0
    group_sync: list[dict] = field(default_factory=list)
    checkpoint_latency_ms: dict[str, float] = field(default_factory=dict)
    lag: dict[str, int] | None = None
    heartbeat: dict | None = None
    metadata: dict | None = None
    validation: dict | None = None
    duration_s: float | None = None

    def to_json(self) -> str:
        return json.dumps(self.summary(), indent=2)

    def summary(self) -> dict:
        """The result as plain values; its validation is one already (a verdict per
        partition, which :func:`plain` would walk again: 0.05 s at 10,000 partitions)."""
        out = plain(replace(self, validation=None))
        out["validation"] = self.validation
        return out


def mirror_step(config: MirrorConfig, config_path: str, flow: FlowConfig, plan: Plan,
                master: str | None = None, timeout: float | None = None,
                run_id: str | None = None) -> tuple[dict, Validation | None]:
    """Run the Spark job (mirror, then validate, in one JVM) on the plan with
    ``spark-submit``; return the stored result and the validation, which may have failed.
    A failed job raises its own error (:func:`job_failure`), naming its driver's log,
    which is kept with the run's report."""
    master = master or flow.get("mirrorflow.spark.master")
    run_id = run_id or plan.run_id
    settle_writes()  # the job reads the plan this process may have just stored
    submitted_ms = int(time.time() * 1000)
    with driver_class_archive(master) as archive, \
            tempfile.TemporaryDirectory(prefix="mirrorflow-submit-") as work_dir:
        command = submit_command(config_path, flow.name, plan.plan_id, master, Path(work_dir),
                                 run_id=run_id, archive=archive)
        log.info("submitting: %s", " ".join(command))
        # The job loads mirrorflow from the submitted zip, whose default reports folder
        # would be beside the zip: it writes the Data Docs where this run reports.
        with classic_environment():
            env = {**os.environ, reports.REPORTS_ENV: str(reports.reports_dir())}
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False, env=env)
        if proc.returncode not in (0, EXIT_VALIDATION_FAILED):
            output = proc.stdout + proc.stderr
            path = reports.write_driver_log(flow.name, run_id, output)
            raise job_failure(output, PlanStore(config, flow), plan.plan_id, run_id,
                              submitted_ms, str(path))
    found: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        for marker in (RESULT_MARKER, VALIDATION_MARKER):
            if line.startswith(marker):
                found[marker] = line[len(marker):]
    if RESULT_MARKER not in found or VALIDATION_MARKER not in found:
        raise MirrorJobError(f"flow {flow.name}: the Spark job printed no result")
    return (json.loads(found[RESULT_MARKER]),
            Validation.from_dict(json.loads(found[VALIDATION_MARKER])))


def summarize(flow: FlowConfig, plan: Plan, result: dict | None,
              resumed: bool = False) -> RunResult:
    """The run's figures from the plan's result, checking the result covers the plan."""
    if result is None:
        raise MirrorJobError(f"flow {flow.name}: plan {plan.plan_id} has no result; the mirror "
                             "job did not finish, nothing was committed")
    by_tp = {(r["topic"], r["partition"]): r for r in result["ranges"]}
    report = RunResult(flow.name, plan.run_id, plan.plan_id, resumed,
                       gaps=[plain(g) for g in plan.gaps], plan_run_id=plan.run_id,
                       breaks=[plain(b) for b in plan.all_breaks],
                       source_isolation=plan.isolation)
    for rng in plan.ranges:
        r = by_tp.get((rng.topic, rng.partition))
        if r is None:
            raise MirrorJobError(f"flow {flow.name}: plan {plan.plan_id} has no result for "
                                 f"{rng.topic}[{rng.partition}]; nothing was committed")
        report.gaps += [{"topic": rng.topic, "partition": rng.partition, "start": a, "end": b}
                        for a, b in r.get("gaps", [])]
        part = PartitionReport(
            rng.topic, rng.partition, rng.remote_topic, rng.start, rng.end, r["records"],
            r.get("bytes_written", 0), r["records"] - r.get("records_written", 0),
            r.get("first_downstream"), r.get("last_downstream"), r.get("record_age_ms"),
            r.get("replication_latency_ms"), r.get("write_seconds", 0.0),
            r.get("transactional", True), r.get("restamped", 0))
        report.partitions.append(part)
        if not part.exactly_once:
            note_at_least_once(report, r.get("at_least_once")
                               or "the range was written without transactions")
        report.records += part.records - part.skipped
        report.already_there += part.skipped
        report.bytes += r.get("bytes_written", 0)
    return report


def note_at_least_once(report: RunResult, reason: str) -> None:
    """Record that the run delivered at-least-once, and why (once per reason)."""
    report.delivery["exactly_once"] = False
    if reason not in report.delivery["reasons"]:
        report.delivery["reasons"].append(reason)


def result_records(result: dict) -> tuple[int, int]:
    """(records this attempt wrote, records of the plan earlier attempts wrote)."""
    written = sum(r.get("records_written", 0) for r in result["ranges"])
    return written, sum(r["records"] for r in result["ranges"]) - written


def failed_proof(flow: FlowConfig, plan: Plan, result: dict, resumed: bool, run_id: str,
                 validation: Validation, duration_s: float | None = None,
                 health: dict | None = None) -> Exception:
    """A run whose proof failed: its report and metrics (what was written, the findings,
    and ``health``: the lag and heartbeat age measured now, which keep rising while runs
    fail), and the error to raise. Nothing is committed; the plan stays pending."""
    failed = summarize(flow, plan, result, resumed)
    failed.lag = (health or {}).get("lag")
    failed.heartbeat = (health or {}).get("heartbeat")
    failed.run_id, failed.validation = run_id, validation.to_dict()
    failed.duration_s = None if duration_s is None else round(duration_s, 3)
    summary = failed.summary()
    reports.write(flow.name, run_id, summary, reports.Retention.of(flow))
    metrics.update(flow.name, summary)
    return validation.error()


class NoVerdictError(MirrorflowError):
    """No completeness check of the plan by this run is stored: its Spark job did not
    finish one."""


def validate_step(config: MirrorConfig, flow: FlowConfig, plan: Plan, run_id: str,
                  resumed: bool = False, duration_s: float | None = None) -> Validation:
    """The verdict of the proof run ``run_id``'s Spark job computed for ``plan`` (stored
    with it): the Great Expectations outcome, with its Data Docs rendered from the suites'
    results kept with the run (started in the background: the caller waits for them,
    :meth:`~mirrorflow.quality.verdicts.Validation.wait_for_docs`). A failed check writes
    the run's report and metrics and raises its :class:`ValidationError`, naming the
    partitions and offsets at fault, once its Data Docs are written; nothing is
    committed."""
    from mirrorflow.quality.validate import docs_of

    store = PlanStore(config, flow)
    stored = store.validation(plan.plan_id)
    if stored is None or stored.get("run_id") != run_id:
        raise NoVerdictError(
            f"flow {flow.name}: no completeness check of plan {plan.plan_id} by run {run_id} "
            "is stored; clear the run's mirror task to mirror (nothing twice) and check again")
    validation = Validation.from_dict(stored)
    docs_of(validation)
    if not validation.success:
        validation.wait_for_docs()  # what the operator reads first about the failure
        raise failed_proof(flow, plan, store.result(plan.plan_id), resumed, run_id,
                           validation, duration_s, metrics.health(config, flow))
    validation.start_docs()
    return validation


def record_history(config: MirrorConfig, flow: FlowConfig, plan: Plan, result: dict,
                   validation: Validation | None) -> None:
    """Add the plan to the flow's history: the remote offsets its records occupy, how far
    the check proved each remote partition, the positions being committed, its syncs."""
    target = config.cluster(flow.target)
    store = history.HistoryStore(target, flow.source, flow.get("replication.factor"))
    stored = store.read_all()
    remote, syncs = stored.remote, stored.syncs
    ends = validation.verified_ends() if validation is not None else {}
    positions = plan.positions
    changed: dict[tuple[str, int], history.RemotePartition] = {}
    for r in result["ranges"]:
        rp = (r["remote_topic"], r["partition"])
        item = remote.get(rp) or history.RemotePartition(*rp)
        item.owned = history.merge_spans([*item.owned, *(tuple(s) for s in r["owned"])])
        item.position = positions.get((r["topic"], r["partition"]), item.position)
        changed[rp] = item
        pairs = [tuple(s) for s in r["syncs"]]
        if pairs:
            kept = [s for s in syncs.get((r["topic"], r["partition"]), [])
                    if s[0] < pairs[0][0]]  # a reset invalidates later syncs, as MM2 does
            syncs[(r["topic"], r["partition"])] = kept + pairs
    for rp, end in ends.items():
        item = changed.get(rp) or remote.get(rp) or history.RemotePartition(*rp)
        item.verified_end = end
        changed[rp] = item
    touched = {(r["topic"], r["partition"]) for r in result["ranges"] if r["syncs"]}
    store.write(changed.values(), {tp: syncs[tp] for tp in touched},
                plan.chains_after(stored.chains))


def commit_step(config: MirrorConfig, flow: FlowConfig, plan: Plan, run_id: str,
                resumed: bool = False, result: dict | None = None) -> RunResult:
    """Commit ``plan`` for run ``run_id``: only while it is the pending plan (else
    :class:`PlanNotPendingError`: a stale run's task does nothing) and, when it has
    ranges, only with a passing completeness check stored for it (else
    :class:`CommitRefusedError`). Then emit offset syncs, record the history, commit
    positions and close the plan: the syncs first, then the rest in one transaction fenced
    by the flow's lease, so a crash leaves all of it or none (and the retry repeats it;
    a repeated sync is harmless). ``result`` is the plan's stored result where the caller
    holds it (the process that just stored it: a run of 10,000 ranges read it back as
    megabytes of JSON); else it is read from the plan store."""
    store = PlanStore(config, flow)
    store.require_pending(plan.plan_id)
    result = result if result is not None else store.result(plan.plan_id)
    report = summarize(flow, plan, result, resumed)
    report.run_id = run_id
    refused = unfenced_reason()
    if refused:
        note_at_least_once(report, f"{refused}: state writes lease-checked, not fenced")
    stored = store.validation(plan.plan_id)
    passed = Validation.from_dict(stored) if stored and stored.get("success") else None
    if plan.ranges and passed is None:
        state = "failed" if stored else "none is stored"
        raise CommitRefusedError(
            f"plan {plan.plan_id} of flow {flow.name} has no passing completeness check "
            f"({state}); nothing was committed. Clear the run's mirror task to mirror "
            "(nothing twice) and check again, or repair the remote topic and reset the "
            "flow (docs/operations.md, after a failed completeness check)")
    if plan.run_id != run_id:
        log.info("run %s commits plan %s, made by run %s", run_id, plan.plan_id, plan.run_id)
    offsets = OffsetStore(config.cluster(flow.target), flow.source,
                          flow.get("replication.factor"))
    current = offsets.positions()
    backward = [f"{t}[{p}] {current[(t, p)]} -> {o}" for (t, p), o in plan.positions.items()
                if current.get((t, p), -1) > o and not plan.restarts((t, p))]
    if backward:
        raise CommitRefusedError(
            f"plan {plan.plan_id} of flow {flow.name} would move positions backward "
            f"({', '.join(backward[:5])}); positions move back only through a reset. "
            "Something else moved them while the plan was pending (MirrorMaker 2 on the "
            "same flow?); nothing was committed")
    # One transaction of the flow's state producer: the history, positions and plan mark
    # land together or not at all (offset syncs on the source first, unfenced).
    with one_transaction():
        if flow.get("emit.offset-syncs.enabled"):
            report.offset_syncs = offset_syncs.emit(
                config, flow, offset_syncs.syncs_from_results(result["ranges"]))
        record_history(config, flow, plan, result, passed)
        if plan.positions:
            offsets.commit(plan.positions)
        store.mark_committed(plan, run_id)
        ledger.drop_spans(config.cluster(flow.target), flow.source, plan.plan_id)
    return report


def metadata_step(config: MirrorConfig, flow: FlowConfig, force: bool = False) -> dict:
    """Sync topic configs and ACLs of the flow's mirrored topics when their interval
    (``sync.topic.configs.interval.seconds``, ``sync.topic.acls.interval.seconds``) has
    passed since the last sync; partition counts are synced by every plan."""
    store = PlanStore(config, flow)
    now = int(time.time() * 1000)
    due = {kind: flow.get(f"sync.topic.{kind}.enabled") and (
        force or (store.last_synced(kind) or 0) + flow.get(f"sync.topic.{kind}.interval.seconds")
        * 1000 <= now) for kind in ("configs", "acls")}
    if not any(due.values()):
        return {"synced": []}
    present = set(topic_names(config.cluster(flow.target)))
    policy = flow.policy()
    topics = [t for t in discover_topics(config, flow)
              if policy.format_remote_topic(flow.source, t) in present]
    result = topic_sync.sync_topic_metadata(config, flow, topics, configs=due["configs"],
                                            acls=due["acls"])
    for kind, done in due.items():
        if done:
            store.mark_synced(kind, now)
    return {"synced": [k for k, done in due.items() if done], **plain(result)}


def checkpoint_latency(computed: list, started: float) -> dict[str, float]:
    """Per group, ms from reading its offsets (``started``, epoch s) to now, when its
    checkpoints are written: MM2's checkpoint-latency-ms, batch style."""
    latency = round((time.time() - started) * 1000, 1)
    return {c.group: latency for c in computed}


def checkpoint_step(config: MirrorConfig, flow: FlowConfig, report: RunResult) -> None:
    """Emit checkpoints for the selected groups (MM2's checkpoint connector), when
    enabled, into ``report``."""
    if not flow.get("emit.checkpoints.enabled"):
        return
    started = time.time()
    computed = checkpoints.compute(config, flow)
    report.checkpoints = checkpoints.emit(config, flow, computed)
    report.checkpoint_latency_ms = checkpoint_latency(computed, started)


def group_sync_step(config: MirrorConfig, flow: FlowConfig, report: RunResult) -> None:
    """Sync the translated offsets of the selected groups into idle target groups, forward
    only (``sync.group.offsets.enabled``), into ``report``."""
    if flow.get("sync.group.offsets.enabled"):
        report.group_sync = [plain(g) for g in checkpoints.sync_group_offsets(config, flow)]


def publish(config: MirrorConfig, flow: FlowConfig, run_id: str, summary: dict) -> dict:
    """Write the run's report and metrics; raise LagAlertError past an alert limit."""
    summary = dict(summary, run_id=run_id, lag=metrics.replication_lag(config, flow))
    reports.write(flow.name, run_id, summary, reports.Retention.of(flow))
    metrics.update(flow.name, summary)
    found = metrics.alerts(flow, summary)
    if found:
        raise metrics.LagAlertError("\n".join(found))
    return summary


def run_cycle(config_path: str | Path, flow_name: str, *, run_id: str | None = None,
              master: str | None = None, only_topics: Iterable[str] | None = None,
              max_records: int | None = None, spark=None,
              progress: Sink | None = None) -> RunResult:
    """Plan (or resume the pending plan), mirror and validate with Spark, commit, report,
    holding the flow's lease throughout (its Spark job joins it). A failed validation
    raises ValidationError before anything is committed.

    Spark: a running SparkSession given as ``spark`` (a notebook, a pyspark shell, a
    test) runs the job's steps in it; else ``master`` (default
    ``mirrorflow.spark.master``): an ``sc://`` URL runs them here as a Spark Connect
    client of that (warm) server, anything else is a ``spark-submit`` of the job.

    ``progress`` (default: the log) gets the plan when it is made, the records written
    while the job runs, and the proof's outcome."""
    started = time.monotonic()
    progress = progress or Sink()
    config = load_config(config_path)
    flow = config.flow(flow_name)
    run_id = run_id or f"manual__{time.strftime('%Y%m%dT%H%M%S')}_{uuid.uuid4().hex[:6]}"
    # The run's steps share their descriptions of topic configs (plan, mirror and proof,
    # seconds apart); what one of them alters is described again.
    with heap.run_scope(), FlowLease(config, flow, run_id), topic_sync.shared_descriptions():
        beat = heartbeats.emit(config, flow) if heartbeats.emits(config, flow) else None
        master = master or flow.get("mirrorflow.spark.master")
        plan, resumed = plan_run(config, flow, run_id, only_topics=only_topics,
                                 max_records=max_records,
                                 cores=None if spark is not None else spark_cores(master))
        progress.note(describe_plan(plan, resumed))
        validation, result = None, None
        if plan.ranges:
            with WriteProgress(config, flow, plan, progress):
                if spark is None and is_connect(master):
                    spark = get_session(master, session_key=flow_session_key(config, flow))
                if spark is not None:
                    result, validation = run_steps(spark, config, flow, plan, run_id=run_id)
                else:
                    result, validation = mirror_step(config, str(config_path), flow, plan,
                                                     master, run_id=run_id)
            written, there = result_records(result)
            progress.note(f"written {written:,} records"
                          + (f" ({there:,} more already there)" if there else "")
                          + "; proof "
                          f"{'passed' if validation.success else 'FAILED'}: "
                          f"{validation.verified_records:,} records verified")
            validation = validate_step(config, flow, plan, run_id, resumed,
                                       time.monotonic() - started)
        else:
            PlanStore(config, flow).save_empty_result(plan.plan_id)
        try:
            report = commit_step(config, flow, plan, run_id, resumed, result)
            report.validation = validation.to_dict() if validation else None
            # The DAG's tasks after its commit, in their order.
            checkpoint_step(config, flow, report)
            group_sync_step(config, flow, report)
            report.metadata = metadata_step(config, flow)
            if beat is not None and heartbeats.senses(config, flow):
                report.heartbeat = plain(heartbeats.status(config, flow, beat))
            report.duration_s = round(time.monotonic() - started, 3)
            report.lag = publish(config, flow, run_id, report.summary())["lag"]
        finally:
            if validation is not None:
                validation.wait_for_docs()
    return report
