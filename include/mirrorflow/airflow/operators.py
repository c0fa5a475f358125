"""The ``mirror`` task: the run's Spark job (mirror, then the completeness check), on the
Spark of the flow's Airflow connection (``mirrorflow.spark.conn.id``), chosen when the task
runs by the connection's type, and then the check's verdict:

* ``spark_connect`` (the provider's Spark Connect connection): the steps run in this task
  as a client of that warm server; no JVM starts;
* ``spark`` (``local[*]``, ``spark://``, ``yarn``, ``k8s://``): ``spark-submit`` of
  ``spark_jobs/mirror_batch.py`` through the provider's hook, with the Kafka connector's
  jars and the ``mirrorflow`` package as ``--py-files``, as ``mirrorflow run`` submits it.

A failed check fails the task without retries (the data would not change), naming the
partition and offsets at fault; clearing the task mirrors what is left (nothing twice) and
checks again. Skipped, with no Spark at all, when the run's plan has nothing to mirror:
the skipped task stores the empty result, as ``mirrorflow run`` does, so the commit closes
the plan. Skipped too when the plan is no longer pending (the task of an older run,
cleared or re-run): its records were committed, or superseded, and mirroring them again
would write them twice.
"""

from __future__ import annotations

import os
import sys
import tempfile
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
        from mirrorflow.config.loader import load_config
        from mirrorflow.lease import FlowLease
        from mirrorflow.source.plan_records import PlanNotPendingError
        from mirrorflow.source.plan_store import PlanStore

        self.log.info("imports: %s", f"inherited from Airflow's forkserver ({PRELOAD})"
                      if imports_inherited() else "made by this task process")
        planned = context["ti"].xcom_pull(task_ids="plan")
        config = load_config(self.config_file)
        flow = config.flow(self.flow_name)
        store = PlanStore(config, flow)
        try:
            store.require_pending(planned["plan_id"])
            if not planned["ranges"]:
                with FlowLease(config, flow, self.run_id):
                    store.require_pending(planned["plan_id"])
                    store.save_empty_result(planned["plan_id"])
                raise AirflowSkipException(f"plan {planned['plan_id']} has nothing to "
                                           "mirror; no Spark job started")
            from airflow.sdk import BaseHook

            from mirrorflow.progress import Sink, WriteProgress

            plan = store.load(planned["plan_id"])
            # Records written, in the task's log every 10 s, read where the writers commit.
            with WriteProgress(config, flow, plan, Sink(self.log)):
                connection = BaseHook.get_connection(self.conn_id)
                if connection.conn_type == "spark_connect":
                    validation = self._run_connected(config, flow, plan)
                else:
                    self._submit(planned["plan_id"], connection.host or "")
                    validation = None
        except PlanNotPendingError as exc:
            raise AirflowSkipException(str(exc)) from None
        return self._verdict(config, flow, store, planned, validation)

    def _verdict(self, config, flow, store, planned: dict, validation) -> dict:
        """Fail, without retries, when this run's completeness check failed, or (from
        ``spark-submit``, whose job stored it with the plan) is not there; else its figures
        (the task's XCom)."""
        from airflow.sdk.exceptions import AirflowFailException

        from mirrorflow.quality import metrics
        from mirrorflow.quality.verdicts import Validation

        plan_id = planned["plan_id"]
        if validation is None:
            stored = store.validation(plan_id)
            if stored is None or stored.get("run_id") != self.run_id:
                raise AirflowFailException(
                    f"flow {flow.name}: no completeness check of plan {plan_id} by run "
                    f"{self.run_id} is stored; clear the mirror task to mirror (nothing "
                    "twice) and check again")
            validation = Validation.from_dict(stored)
        if not validation.success:
            from mirrorflow.run import failed_proof

            error = failed_proof(flow, store.load(plan_id), store.result(plan_id),
                                 planned["resumed"], self.run_id, validation,
                                 health=metrics.health(config, flow))
            raise AirflowFailException(str(error))
        return {"verified_records": validation.verified_records,
                "verified_fraction": validation.verified_fraction}

    def _run_connected(self, config, flow, plan):
        """The job's steps as a client of the connection's server; their validation."""
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from mirrorflow.spark.job import run_steps
        from mirrorflow.spark.session import flow_session_key, get_session

        url = SparkConnectHook(conn_id=self.conn_id).get_connection_url()
        self.log.info("mirroring plan %s on the Spark Connect server %s", plan.plan_id, url)
        session = get_session(url, session_key=flow_session_key(config, flow))
        _, validation = run_steps(session, config, flow, plan, run_id=self.run_id)
        validation.wait_for_docs()
        return validation

    def _submit(self, plan_id: str, master: str) -> None:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        from mirrorflow.quality import reports
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
        with driver_class_archive(master) as archive, \
                tempfile.TemporaryDirectory(prefix="mirrorflow-submit-") as work_dir:
            self._hook = SparkSubmitHook(
                conn_id=self.conn_id,
                conf={**submit_conf(archive), "spark.pyspark.python": python},
                jars=",".join(connector_jars()), py_files=str(package_zip(Path(work_dir))),
                name=f"mirrorflow {self.flow_name}", env_vars=env,
                application_args=[*job_arguments(self.config_file, self.flow_name, plan_id,
                                                 run_id=self.run_id),
                                  "--no-fail-on-validation"])
            with classic_environment():
                self._hook.submit(str(JOB_SCRIPT))

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
