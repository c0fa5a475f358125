"""The ``mirror`` task: the Spark job's spark-submit (mirror, then the completeness check,
in one JVM), through the Spark provider's connection, skipped when the run's plan has
nothing to mirror.

A flow without heartbeats often has nothing new; starting a JVM to learn that costs
more than the rest of the run. The skipped ``mirror`` stores the empty result, as
``mirrorflow run`` does, so ``commit_and_sync_offsets`` closes the empty plan.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowSkipException


class MirrorJobOperator(SparkSubmitOperator):
    """spark-submit of ``spark_jobs/mirror_batch.py --steps <steps>`` for the stored plan."""

    def __init__(self, *, config_file: str, flow_name: str, steps: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.config_file, self.flow_name, self.steps = config_file, flow_name, steps

    def execute(self, context: Any) -> None:
        planned = context["ti"].xcom_pull(task_ids="plan")
        if not planned["ranges"]:
            if "mirror" in self.steps.split(","):
                from mirrorflow.config import load_config
                from mirrorflow.plan import PlanStore

                config = load_config(self.config_file)
                PlanStore(config, config.flow(self.flow_name)).save_empty_result(
                    planned["plan_id"])
            raise AirflowSkipException(f"plan {planned['plan_id']} has nothing to mirror; "
                                       "no Spark job started")
        return super().execute(context)
