"""The ``mirror`` task: the run's Spark job (the mirror, then the proof's computation), on
the Spark of the flow's Airflow connection (``mirrorflow.spark.conn.id``), chosen when the
task runs by the connection's type:

* ``spark_connect`` (the provider's Spark Connect connection): the steps run in this task
  as a client of that warm server; no JVM starts;
* ``spark`` (``local[*]``, ``spark://``, ``yarn``, ``k8s://``): ``spark-submit`` of
  ``spark_jobs/mirror_batch.py`` through the provider's hook, with the range source's
  jars and the ``mirrorflow`` package as ``--py-files``, as ``mirrorflow run`` submits it.

The job stores the proof with the plan; the ``validate`` task gives its verdict. So a red
``mirror`` is a copy that failed (a broker, a refused write, data loss, a fenced writer),
never a data-quality finding. Skipped, with no Spark at all, when the run's plan has
nothing to mirror: the skipped task stores the empty result, as ``mirrorflow run`` does,
so the commit closes the plan. Skipped too when the plan is no longer pending (the task of
an older run, cleared or re-run): its records were committed, or superseded, and
mirroring them again would write them twice.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from mirrorflow.airflow import PRELOAD


def imports_inherited() -> bool:
    """Whether this process inherited its imports from Airflow's forkserver
    (:mod:`mirrorflow.airflow.preload` loaded, and by another process); asks without
    importing it, which would make those imports here."""
    module = sys.modules.get(PRELOAD)
    return module is not None and os.getpid() != module.LOADED_BY


def plan_limits(params: dict, conn_id: str) -> dict:
    """``plan_run``'s limits from a run's parameters (its topics, its cap per partition)
    and the cores of the Spark of connection ``conn_id``, where its master tells them
    (:func:`~mirrorflow.spark.session.spark_cores`; a connection not there yet leaves
    them unknown: the ``mirror`` task names it)."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.sdk import BaseHook

    from mirrorflow.spark.session import spark_cores

    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        cores = None
    else:
        cores = spark_cores(connect_url(conn_id) if connection.conn_type == "spark_connect"
                            else connection.host or "")
    return {"only_topics": params.get("topics") or None,
            "max_records": params.get("max_records_per_partition"), "cores": cores}


def connect_url(conn_id: str) -> str:
    """The ``sc://`` URL of the provider's Spark Connect connection ``conn_id``."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    return SparkConnectHook(conn_id=conn_id).get_connection_url()


class MirrorJobOperator(BaseOperator):
    """The run's Spark job for the plan the ``plan`` task stored."""

    template_fields = ("run_id",)

    def __init__(self, *, config_file: str, flow_name: str, conn_id: str,
                 run_id: str = "{{ run_id }}", **kwargs: Any):
        super().__init__(**kwargs)
        self.config_file, self.flow_name, self.conn_id = config_file, flow_name, conn_id
        self.run_id = run_id
        self._hook = None

    def execute(self, context: Any) -> dict:
        from mirrorflow import heap

        with heap.run_scope():
            return self._execute(context)

    def _execute(self, context: Any) -> dict:
        from mirrorflow.config.loader import load_config
        from mirrorflow.source.plan_records import PlanNotPendingError
        from mirrorflow.source.plan_store import PlanStore

        self.log.info("imports: %s", f"inherited from Airflow's forkserver ({PRELOAD})"
                      if imports_inherited() else "made by this task process")
        started = time.monotonic()
        config = load_config(self.config_file)
        flow = config.flow(self.flow_name)
        store = PlanStore(config, flow)
        try:
            planned = self._pending(store, context["ti"].xcom_pull(task_ids="plan"))
            if not planned["ranges"]:
                self._close_empty(config, flow, store, planned["plan_id"])
                raise AirflowSkipException(f"plan {planned['plan_id']} has nothing to "
                                           "mirror; no Spark job started")
            plan = store.load(planned["plan_id"])
            validation = self._mirror(config, flow, store, planned, plan)
            window = flow.get("mirrorflow.mirror.repeat.seconds")
            if not window:
                return self._output(planned, validation, cycles=1)
            return self._repeat(config, flow, store, planned, plan, validation,
                                started + window, context)
        except PlanNotPendingError as exc:
            raise AirflowSkipException(str(exc)) from None

    @staticmethod
    def _output(planned: dict, validation, cycles: int) -> dict:
        """The task's XCom: its last plan, that plan's proof in figures (its verdict is
        the ``validate`` task's), the run's cycles."""
        return {"plan_id": planned["plan_id"], "resumed": planned["resumed"],
                "ranges": planned["ranges"], "cycles": cycles,
                "proof": None if validation is None else
                ("passed" if validation.success else "failed"),
                "verified_records": validation.verified_records if validation else 0}

    def _pending(self, store, planned: dict) -> dict:
        """The plan to mirror: the ``plan`` task's; where an earlier attempt of this task
        committed it in a cycle (``mirrorflow.mirror.repeat.seconds``) and planned again,
        the pending plan of this run."""
        from mirrorflow.source.plan_records import PlanNotPendingError

        try:
            store.require_pending(planned["plan_id"])
            return planned
        except PlanNotPendingError:
            # Only this run's tasks make plans of its id: its plan, and its cycles. (The
            # first plan's commit mark may be pruned already: KEEP_PLANS.)
            pending = store.pending()
            if pending is None or pending.run_id != self.run_id:
                raise
        self.log.info("plan %s was committed by an earlier attempt; resuming this run's "
                      "plan %s", planned["plan_id"], pending.plan_id)
        return {"plan_id": pending.plan_id, "resumed": True, "ranges": len(pending.ranges)}

    def _close_empty(self, config, flow, store, plan_id: str) -> None:
        """Store the empty result of a plan with nothing to mirror, so the commit closes it."""
        from mirrorflow.lease import FlowLease

        with FlowLease(config, flow, self.run_id):
            store.require_pending(plan_id)
            store.save_empty_result(plan_id)

    def _mirror(self, config, flow, store, planned: dict, plan):
        """The Spark job on the plan (``planned``'s :class:`~mirrorflow.source.plan_records.
        Plan`): the proof it stored (a :class:`~mirrorflow.quality.verdicts.Validation`,
        passing or not), or None where it stored none by this run."""
        from airflow.sdk import BaseHook

        from mirrorflow.progress import Sink, WriteProgress
        from mirrorflow.quality.verdicts import Validation

        # Records written, in the task's log every 10 s, read where the writers commit.
        with WriteProgress(config, flow, plan, Sink(self.log)):
            connection = BaseHook.get_connection(self.conn_id)
            if connection.conn_type == "spark_connect":
                self._run_connected(config, flow, plan)
            else:
                self._submit(store, planned["plan_id"], connection.host or "")
        stored = store.validation(planned["plan_id"])
        if stored is None or stored.get("run_id") != self.run_id:
            return None
        return Validation.from_dict(stored)

    def _repeat(self, config, flow, store, planned: dict, plan, validation, until: float,
                context: Any) -> dict:
        """Cycle after cycle until ``until`` (monotonic: ``mirrorflow.mirror.repeat.
        seconds`` after the task started; :mod:`mirrorflow.repeat`): commit the proved
        plan, plan what arrived since, mirror and prove it. The window over, or a proof
        that failed, the last plan is left to the tasks after this one (``validate``,
        ``commit`` and the syncs), as a run's one plan is; an empty plan ends the cycles
        early (the commit closes it). The task's XCom names that last plan."""
        from mirrorflow import heap, repeat
        from mirrorflow.airflow import assets
        from mirrorflow.lease import FlowLease
        from mirrorflow.source.plan import plan_run

        limits = plan_limits(context.get("params") or {}, self.conn_id)
        earlier = repeat.kept(flow.name, self.run_id)
        while True:
            if validation is None or not validation.success or time.monotonic() >= until:
                assets.publish(flow, self.run_id, context["outlet_events"])
                return self._output(planned, validation, repeat.count(earlier) + 1)
            with FlowLease(config, flow, self.run_id):
                done = repeat.commit_cycle(config, flow, plan, self.run_id,
                                           planned["resumed"], validation.verified_records)
                assets.keep(flow, self.run_id, assets.events_of(config, flow, done))
                earlier = repeat.fold(earlier, done)
                repeat.keep(flow.name, self.run_id, earlier)
                plan, resumed = plan_run(config, flow, self.run_id, **limits)
            self.log.info("cycle %d: committed plan %s (%d records)", repeat.count(earlier),
                          done["plan_id"], done["records"])
            planned = {"plan_id": plan.plan_id, "resumed": resumed, "ranges": len(plan.ranges)}
            self.log.info("plan %s: %d ranges", plan.plan_id, len(plan.ranges))
            heap.between_runs()
            if not plan.ranges:
                self._close_empty(config, flow, store, plan.plan_id)
                assets.publish(flow, self.run_id, context["outlet_events"])
                return self._output(planned, None, repeat.count(earlier) + 1)
            validation = self._mirror(config, flow, store, planned, plan)

    def _run_connected(self, config, flow, plan) -> None:
        """The job's steps as a client of the connection's server."""
        from mirrorflow.spark.job import run_steps
        from mirrorflow.spark.session import flow_session_key, get_session

        url = connect_url(self.conn_id)
        self.log.info("mirroring plan %s on the Spark Connect server %s", plan.plan_id, url)
        session = get_session(url, session_key=flow_session_key(config, flow))
        run_steps(session, config, flow, plan, run_id=self.run_id)

    def _submit(self, store, plan_id: str, master: str) -> None:
        """``spark-submit`` of the job; a failed job raises its own error, naming its
        driver's log, which is kept with the run's report (:func:`job_failure`)."""
        from mirrorflow.airflow.hooks import JobSubmitHook
        from mirrorflow.quality import reports
        from mirrorflow.spark.job import job_failure
        from mirrorflow.spark.session import connector_jars, package_zip
        from mirrorflow.spark.submit import (
            JOB_SCRIPT,
            classic_environment,
            driver_class_archive,
            job_arguments,
            submit_conf,
        )

        python = os.environ.get("PYSPARK_PYTHON", sys.executable)
        env = {"PYSPARK_PYTHON": python,  # the job writes its Data Docs where runs report
               reports.REPORTS_ENV: str(reports.reports_dir())}
        submitted_ms = int(time.time() * 1000)
        with driver_class_archive(master) as archive, \
                tempfile.TemporaryDirectory(prefix="mirrorflow-submit-") as work_dir:
            self._hook = JobSubmitHook(
                conn_id=self.conn_id,
                conf={**submit_conf(archive), "spark.pyspark.python": python},
                jars=",".join(connector_jars()), py_files=str(package_zip(Path(work_dir))),
                name=f"mirrorflow {self.flow_name}", env_vars=env,
                application_args=[*job_arguments(self.config_file, self.flow_name, plan_id,
                                                 run_id=self.run_id),
                                  "--no-fail-on-validation"])
            try:
                with classic_environment():
                    self._hook.submit(str(JOB_SCRIPT))
            except Exception:
                if not self._hook.output:  # the job never ran: the hook's own error
                    raise
                output = "".join(self._hook.output)
                path = reports.write_driver_log(self.flow_name, self.run_id, output)
                raise job_failure(output, store, plan_id, self.run_id, submitted_ms,
                                  str(path)) from None

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
