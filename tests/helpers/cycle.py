"""One replication cycle on the test session's Spark (no spark-submit, no JVM start): the
same library steps as the DAG's tasks (plan, the job's mirror, commit), validation aside."""

from __future__ import annotations

from pathlib import Path

from mirrorflow.config import load_config
from mirrorflow.lease import FlowLease
from mirrorflow.plan import PlanStore, plan_run
from mirrorflow.run import RunResult, commit_step
from mirrorflow.spark.job import mirror


def cycle_in_session(spark, path: Path, flow_name: str = "a->b",
                     run_id: str = "test-run") -> RunResult:
    config = load_config(path)
    flow = config.flow(flow_name)
    with FlowLease(config, flow, run_id):
        plan, resumed = plan_run(config, flow, run_id)
        if plan.ranges:
            mirror(spark, str(path), flow, plan)
        else:
            PlanStore(config, flow).save_result(plan.plan_id, {"plan_id": plan.plan_id,
                                                               "ranges": []})
        return commit_step(config, flow, plan, resumed)
