"""One replication cycle on the test session's Spark without validation: the same library
steps as the DAG's plan, mirror and commit tasks, for tests of faults and soak that check
the target themselves."""

from __future__ import annotations

from pathlib import Path

from mirrorflow.config import load_config
from mirrorflow.lease import FlowLease
from mirrorflow.plan import plan_run
from mirrorflow.run import RunResult, commit_step
from mirrorflow.spark.job import run_steps


def cycle_in_session(spark, path: Path, flow_name: str = "a->b",
                     run_id: str = "test-run") -> RunResult:
    config = load_config(path)
    flow = config.flow(flow_name)
    with FlowLease(config, flow, run_id):
        plan, resumed = plan_run(config, flow, run_id)
        run_steps(spark, config, flow, plan, ("mirror",), run_id)
        return commit_step(config, flow, plan, resumed)
