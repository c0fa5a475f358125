"""The mirror batch job: read a stored plan's ranges from the source, write them to the
target, then prove the target complete (:mod:`mirrorflow.validate`).

Submitted with ``spark-submit`` (``spark_jobs/mirror_batch.py`` calls :func:`main`), on
``local[*]`` or any master. ``--steps`` picks ``mirror``, ``validate`` or both (the default:
one JVM for the two, as ``mirrorflow run`` and the DAG's ``mirror`` task run them). The
per-range results are stored with the plan by the data source's commit, which Spark runs
only after every write task succeeded, and printed on one line prefixed
``MIRRORFLOW_RESULT``; the validation is stored with the plan too and printed after
``MIRRORFLOW_VALIDATION``. A failed validation exits with status 2, or 0 with
``--no-fail-on-validation`` (the DAG's ``validate`` task then fails on the stored verdict).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

from mirrorflow.config import FlowConfig, MirrorConfig, load_config
from mirrorflow.errors import MirrorflowError
from mirrorflow.lease import FlowLease
from mirrorflow.plan import Plan, PlanStore

if TYPE_CHECKING:
    from mirrorflow.validate import Validation

RESULT_MARKER = "MIRRORFLOW_RESULT "
VALIDATION_MARKER = "MIRRORFLOW_VALIDATION "
EXIT_VALIDATION_FAILED = 2
STEPS = ("mirror", "validate")
# Arrow batches handed to the writer: few round trips for small records, and bounded in
# bytes so that 1 MiB records never make a batch of gigabytes.
ARROW_RECORDS_PER_BATCH = 10_000
ARROW_BYTES_PER_BATCH = 8 * 1024 * 1024


def mirror(spark, config_path: str, flow: FlowConfig, plan: Plan) -> None:
    """Read the plan's ranges with ``kafka_range`` and write them with it, range by range."""
    from mirrorflow.spark.source import KafkaRangeDataSource

    spark.dataSource.register(KafkaRangeDataSource)
    ranges = json.dumps([asdict(r) for r in plan.ranges])
    frame = (spark.read.format("kafka_range")
             .option("mirrorflow.config", config_path)
             .option("mirrorflow.cluster", flow.source)
             .option("ranges", ranges)
             .load())
    (frame.write.format("kafka_range").mode("append")
     .option("mirrorflow.config", config_path)
     .option("mirrorflow.flow", flow.name)
     .option("mirrorflow.planId", plan.plan_id)
     .option("mirrorflow.exactlyOnce", flow.get("exactly.once.support"))
     .option("ranges", ranges)
     .save())


class NoMirrorResultError(MirrorflowError):
    """Validation was asked for a plan the mirror step has not finished."""


def run_steps(spark, config_path: str, config: MirrorConfig, flow: FlowConfig, plan: Plan,
              steps: Sequence[str] = STEPS, run_id: str | None = None,
              ) -> tuple[dict | None, Validation | None]:
    """The job's steps in ``spark``: mirror (holding the flow's lease, which a run holding
    it under the same ``run_id`` lends), then validate; both results are stored with the
    plan. Returns the mirror result and the validation (None when not asked for)."""
    from mirrorflow.validate import import_gx, validate_plan

    store = PlanStore(config, flow)
    run_id = run_id or plan.run_id
    if "validate" in steps and plan.ranges:
        # Great Expectations takes seconds to import; the driver mostly waits on Spark
        # while it mirrors, so the check's import happens meanwhile.
        threading.Thread(target=import_gx, daemon=True, name="import gx").start()
    if "mirror" in steps:
        with FlowLease(config, flow, run_id):
            if plan.ranges:
                mirror(spark, config_path, flow, plan)
            else:
                store.save_empty_result(plan.plan_id)
    result = store.result(plan.plan_id)
    if "validate" not in steps:
        return result, None
    if result is None:
        raise NoMirrorResultError(f"plan {plan.plan_id} of flow {flow.name} has no mirror "
                                  "result: run the mirror step first")
    validation = validate_plan(spark, config_path, config, flow, plan, result, run_id)
    store.save_validation(plan.plan_id, validation.to_dict())
    return result, validation


def _steps(text: str) -> list[str]:
    steps = [s.strip() for s in text.split(",") if s.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown or not steps:
        raise argparse.ArgumentTypeError(f"--steps takes {', '.join(STEPS)}; got {text!r}")
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="mirrorflow mirror batch job")
    parser.add_argument("--config", required=True)
    parser.add_argument("--flow", required=True)
    parser.add_argument("--plan-id", required=True)
    parser.add_argument("--steps", type=_steps, default=list(STEPS),
                        help="mirror, validate, or both (default)")
    parser.add_argument("--run-id", help="the run the report belongs to (default: the plan's)")
    parser.add_argument("--no-fail-on-validation", action="store_true",
                        help="exit 0 after a failed validation, which is stored with the plan "
                             "(the DAG's validate task gives the verdict)")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    config = load_config(args.config)
    flow = config.flow(args.flow)
    plan = PlanStore(config, flow).load(args.plan_id)
    spark = (SparkSession.builder.appName(f"mirrorflow {flow.name} {plan.plan_id}")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", ARROW_RECORDS_PER_BATCH)
             .config("spark.sql.execution.arrow.maxBytesPerBatch", ARROW_BYTES_PER_BATCH)
             .getOrCreate())
    try:
        result, validation = run_steps(spark, args.config, config, flow, plan, args.steps,
                                       args.run_id)
    except NoMirrorResultError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(RESULT_MARKER + json.dumps(result), flush=True)
    if validation is not None:
        print(VALIDATION_MARKER + json.dumps(validation.to_dict()), flush=True)
        if not validation.success:
            print(str(validation.error()), file=sys.stderr, flush=True)
            return 0 if args.no_fail_on_validation else EXIT_VALIDATION_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
