"""Airflow DAGs generated from the MM2 config: one DAG per enabled flow.

Parsing reads only the config file: no broker, no Spark, no Great Expectations import.
A broken config raises ConfigError, which Airflow shows as one import error of the DAG
file naming the property at fault. Every task calls the one step of :mod:`mirrorflow.run`
that ``mirrorflow run`` calls too, and does that step only, so that an operator sees
which one failed and retries or clears it alone:

``plan`` (claims the flow, writes the run's heartbeats, plans) -> ``mirror`` (the Spark
job: read, write, the proof's computation) -> ``validate`` (the Great Expectations
verdict and its Data Docs) -> ``commit`` (offset syncs and positions; asset events) ->
``checkpoint`` -> ``sync_group_offsets``, with ``sync_topic_configs`` beside them and
``await_heartbeat`` beside the chain from ``mirror`` on; ``report`` last, whatever the
others did. Tasks a flow's MM2 properties switch off are not generated.

``plan`` writes the run's heartbeat before it plans, so that this run's own mirror
carries the heartbeat to the target, where ``await_heartbeat`` senses it; waiting for the
next run instead could never succeed with ``max_active_runs = 1``. A red ``mirror`` is a
copy that failed; a red ``validate`` a data-quality finding, named, which keeps the plan
pending and gets no commit, checkpoints or group offsets. Records are visible on the
target when the writers' transactions commit, in ``mirror``: the tasks after it are off
the records' critical path.
"""

from __future__ import annotations

import functools
import os
from datetime import datetime, timedelta
from pathlib import Path

from mirrorflow.airflow import COMMIT_TASK, assets
from mirrorflow.airflow.report_task import report
from mirrorflow.airflow.run_tasks import (
    checkpoint,
    commit,
    plan,
    sync_group_offsets,
    sync_topic_configs,
    validate,
)
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import FlowConfig, MirrorConfig

CONFIG_ENV = "MIRRORFLOW_CONFIG"
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "mm2.properties"
START_DATE = datetime(2024, 1, 1)
# Three retries, 15, 30 and 60 s apart by default. A broker's restart costs none: the plan
# and every retry wait for a cluster that does not answer (sensors.check_clusters).
RETRIES = 3
BACKOFF = 2.0  # each retry's delay over the one before (Airflow 3.3 takes a multiplier)
MAX_RETRY_DELAY = timedelta(minutes=5)
SPARK_POOL = "mirrorflow_spark"
HEARTBEAT_TIMEOUT_S = 600
# Shorter reschedules race with LocalExecutor's events in Airflow 3.3 (a waiting run's
# sensor seen as failed: 'finished with state success, but ... queued'); a triggerer
# (default_deferrable) waits without that race.
CLAIM_POKE_S = 30
CLAIM_TIMEOUT_S = 24 * 3600  # an owner that stops lapses long before


def config_path() -> Path:
    """The config the DAGs are generated from: $MIRRORFLOW_CONFIG or the bundled default."""
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)


# --------------------------------------------------------------------------- the DAG


def _params():
    from airflow.sdk import Param

    return {
        "topics": Param(None, type=["null", "array"], items={"type": "string"},
                        description="Only these source topics, one per line (empty: every "
                                    "topic the flow selects)."),
        "max_records_per_partition": Param(None, type=["null", "integer"], minimum=1,
                                           description="Cap this run's range per partition."),
        "dry_run": Param(False, type="boolean",
                         description="Plan only and log the plan (after the reset, if one "
                                     "is given: its positions are logged, not set); nothing "
                                     "is written to either cluster."),
        "reset": Param("none", enum=["none", "earliest", "latest", "timestamp"],
                       description="Operator's tool: move the flow's positions first."),
        "reset_timestamp_ms": Param(None, type=["null", "integer"],
                                    description="For reset = timestamp: epoch milliseconds."),
        "confirm_reset": Param("", type="string",
                               description="A reset runs only if this is the flow name, "
                                           "e.g. a->b."),
    }


def _doc(flow: FlowConfig, config: MirrorConfig, offset: timedelta) -> str:
    seconds = offset.total_seconds()
    after = (f", {seconds:g} s after each cron time (mirrorflow.schedule.spread.seconds)"
             if seconds else "")
    source = config.clusters[flow.source].bootstrap_servers
    target = config.clusters[flow.target].bootstrap_servers
    sample = flow.policy().format_remote_topic(flow.source, "<topic>")
    return (
        f"### Replication flow `{flow.name}`\n\n"
        f"Mirrors topics matching `{', '.join(flow.get('topics'))}` "
        f"(excluding `{', '.join(flow.get('topics.exclude'))}`) from cluster "
        f"**{flow.source}** (`{source}`) to **{flow.target}** (`{target}`) as `{sample}`.\n\n"
        f"Generated by mirrorflow from `{config.path}`; schedule "
        f"`{flow.get('mirrorflow.schedule') or 'manual only'}`{after}. Trigger with "
        "parameters to limit topics, cap records, do a dry run, or reset positions "
        "(confirmed by the flow name). Re-running or backfilling an old run never mirrors "
        "a record twice: every run starts from the committed positions."
    )


def build_flow_dag(flow: FlowConfig, config: MirrorConfig):
    """The DAG of one flow; tasks a flow's MM2 properties switch off are not generated."""
    from airflow.sdk import DAG, task

    from mirrorflow.airflow import watchdog
    from mirrorflow.airflow.operators import MirrorJobOperator
    from mirrorflow.airflow.sensors import FlowClaimSensor, HeartbeatSensor
    from mirrorflow.airflow.timetables import flow_schedule, schedule_offset
    from mirrorflow.heartbeat import heartbeats

    path, name = str(config.path), flow.name
    offset = schedule_offset(flow, config)
    # Every task's execution but the heartbeat's (a sensor's wait, deferred or rescheduled,
    # has a timeout of its own), held to it by Airflow and, where Python cannot be
    # interrupted, by mirrorflow.airflow.watchdog.
    limit = timedelta(seconds=flow.get("mirrorflow.task.timeout.seconds"))
    with DAG(
        dag_id=flow.dag_id,
        schedule=flow_schedule(flow, offset),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=[watchdog.TAG, f"flow:{name}", f"source:{flow.source}", f"target:{flow.target}"],
        default_args=_retries(flow, path),
        params=_params(),
        doc_md=_doc(flow, config, offset),
    ) as dag:
        planned = FlowClaimSensor(
            task_id="plan", config_file=path, flow_name=name,
            then=functools.partial(plan, path, name), mode="reschedule",
            pre_execute=None,  # checks its clusters on every try
            poke_interval=CLAIM_POKE_S, timeout=CLAIM_TIMEOUT_S, execution_timeout=limit,
            deferrable=_default_deferrable(),
            doc_md="Both clusters answer (one none of whose brokers answers is asked every "
                   "second for mirrorflow.cluster.wait.seconds, then fails the task naming "
                   "it); then this run "
                   "takes the flow for itself until its report lets go (while another live "
                   "run of the flow owns it: a backfill, a manual trigger, another "
                   "deployment, it waits here, deferred or rescheduled, holding no worker "
                   "slot); then this run's heartbeats as MM2 emits them (the pair's into the "
                   "target, the reverse pair's into the source, so that this run's mirror "
                   "carries them), the reset if one is asked, and the run's ranges stored (a "
                   "retry reuses them).")
        alias, sources = assets.alias(flow), assets.source_assets(config, flow)
        mirror = MirrorJobOperator(
            config_file=path, flow_name=name, conn_id=flow.get("mirrorflow.spark.conn.id"),
            task_id="mirror", pool=SPARK_POOL, inlets=sources,
            # A repeating mirror commits its cycles: their asset events are its.
            outlets=[alias] if flow.get("mirrorflow.mirror.repeat.seconds") else [],
            execution_timeout=timedelta(seconds=flow.get("mirrorflow.mirror.timeout.seconds")),
            doc_md="The Spark job mirrors the stored plan (mirrorflow's range source, each "
                   "write slot's ranges written by the task that reads them), then computes "
                   "the proof (counts, digests, duplicates, gaps, offset syncs, checkpoints, "
                   "the Great Expectations suites) on the connection's Spark (Spark Connect, "
                   "or spark-submit) and stores it with the plan. Red here is a copy that "
                   "failed, with the job's own error. Skipped when the plan is empty.")
        validated = task(task_id="validate", execution_timeout=limit, multiple_outputs=False,
                         doc_md="The Great Expectations verdict of the proof `mirror` "
                                "stored, and its Data Docs in the run's reports. Red here "
                                "is a data-quality failure, named (partition, offsets), "
                                "without retries; nothing is committed and the plan stays "
                                "pending.")(validate)(path, name)
        # Runs after a skipped validate (nothing to mirror), not after a failed one. Its
        # dict is one XCom, the brief (mirrorflow.airflow.xcoms), as the report's: from the
        # `-> dict` annotation TaskFlow infers multiple_outputs, an XCom per key besides, an
        # Execution API call and a database row each (about a second of a task under load).
        committed = task(task_id=COMMIT_TASK, execution_timeout=limit,
                         trigger_rule="none_failed_min_one_success", multiple_outputs=False,
                         inlets=sources, outlets=[alias],
                         doc_md="Emit offset syncs, then commit positions (MM2's offset "
                                "store), forward only; then an asset event per remote topic "
                                "the plan wrote to (`kafka://<server>/<topic>`, through the "
                                f"alias `{assets.alias_name(flow)}`).")(commit)(
            path, name, planned.output)
        planned >> mirror >> validated >> committed
        last = [committed]
        if flow.get("emit.checkpoints.enabled"):
            last.append(task(task_id="checkpoint", execution_timeout=limit,
                             multiple_outputs=False,
                             doc_md="MM2's checkpoints for the selected groups, from the "
                                    "committed positions and offset syncs.")(checkpoint)(
                path, name))
            committed >> last[-1]
        if flow.get("sync.group.offsets.enabled"):
            synced = task(task_id="sync_group_offsets", execution_timeout=limit,
                          multiple_outputs=False,
                          doc_md="The newest checkpoints' offsets into the same groups on "
                                 "the target where they are idle, forward only (MM2's "
                                 "sync.group.offsets).")(sync_group_offsets)(path, name)
            last[-1] >> synced
            last.append(synced)
        if flow.get("sync.topic.configs.enabled") or flow.get("sync.topic.acls.enabled"):
            last.append(task(task_id="sync_topic_configs", execution_timeout=limit,
                             multiple_outputs=False,
                             doc_md="Topic configs and READ ACLs to the remote topics, per "
                                    "interval (sync.topic.configs / sync.topic.acls).")(
                sync_topic_configs)(path, name))
            committed >> last[-1]
        if heartbeats.senses(config, flow):
            sensed = HeartbeatSensor(
                task_id="await_heartbeat",
                doc_md="The reverse pair's heartbeat, mirrored by this run, is on the target.",
                config_file=path, flow_name=name,
                since_ms="{{ (ti.xcom_pull(task_ids='plan') or {}).get('heartbeat_ms') }}",
                poke_interval=5, timeout=HEARTBEAT_TIMEOUT_S, mode="reschedule",
                trigger_rule="none_failed_min_one_success", deferrable=_default_deferrable())
            # Beside the chain, after the mirror that carried the beat (and, as the commit,
            # after a skipped mirror too).
            [planned, mirror] >> sensed
            last.append(sensed)
        summary = task(task_id="report", trigger_rule="all_done", execution_timeout=limit,
                       multiple_outputs=False,
                       doc_md="Whatever the other tasks did: the run lets go of the flow, "
                              "writes its summary, the flow's report index and metrics (the "
                              "lag and heartbeat age measured now), then fails past "
                              "mirrorflow.alert.max.lag.records or "
                              "mirrorflow.alert.max.heartbeat.age.ms, and after a run that "
                              "failed before its commit or has a failed task.")(
            report)(path, name)
        last >> summary
    return dag


def _retries(flow: FlowConfig, config_file: str) -> dict:
    """Every task's retries: the first after ``mirrorflow.retry.delay.seconds``, each later
    one after twice as long (Airflow's exponential backoff, with its jitter), at most
    MAX_RETRY_DELAY; each retry first waits for a restarting cluster
    (:func:`clusters_before_retry`)."""
    delay = flow.get("mirrorflow.retry.delay.seconds")
    return {"retries": RETRIES, "retry_delay": timedelta(seconds=delay),
            "retry_exponential_backoff": BACKOFF if delay else 0,
            "max_retry_delay": MAX_RETRY_DELAY,
            "pre_execute": functools.partial(clusters_before_retry, config_file, flow.name)}


def clusters_before_retry(config_file: str, flow_name: str, context) -> None:
    """A task's ``pre_execute`` hook: on a retry, the flow's clusters answer first
    (:func:`mirrorflow.airflow.sensors.check_clusters`: a restarting one is waited for), so
    that a task that failed as a broker stopped goes on within a second of its return, not
    at its next retry. A first try trusts the plan's check of its run."""
    from mirrorflow.airflow.sensors import check_clusters

    if context["ti"].try_number > 1:
        check_clusters(config_file, flow_name)


def _default_deferrable() -> bool:
    """Airflow's [operators] default_deferrable: defer where a triggerer runs."""
    from airflow.configuration import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


def build_flow_dags(path: Path | None = None) -> dict:
    """dag_id -> DAG for every enabled flow of the config; where Airflow parses the file for
    one DAG (a task process, ``airflow dags test``: its parsing context names it), that
    flow's alone. Every task parses the DAG file anew before it runs, and the other flows'
    DAGs cost it time on its run's critical path (Airflow's "dynamic DAG generation"
    advice)."""
    from airflow.sdk import get_parsing_context

    config = load_config(path or config_path())
    flows, parsing = config.enabled_flows(), get_parsing_context().dag_id
    wanted = [flow for flow in flows if flow.dag_id == parsing]
    return {flow.dag_id: build_flow_dag(flow, config) for flow in wanted or flows}
