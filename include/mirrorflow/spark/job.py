"""The Spark part of a run: mirror a stored plan, then prove the target complete.

:func:`run_steps` runs in any SparkSession: a Spark Connect client (a warm server: the run
starts no JVM), an in-process driver (``local[*]``), or the driver of a ``spark-submit``
of ``spark_jobs/mirror_batch.py`` (:func:`main`; clusters: standalone, YARN, Kubernetes).
``--steps`` picks ``mirror``, ``validate`` or both (the default). The plan's result and
the validation are stored with the plan and, from ``spark-submit``, printed on lines
prefixed ``MIRRORFLOW_RESULT`` and ``MIRRORFLOW_VALIDATION``. A failed validation exits
with status 2, or 0 with ``--no-fail-on-validation`` (the DAG's ``mirror`` task then
fails on the stored verdict). Any other failure exits with status 1 after a line prefixed
``MIRRORFLOW_ERROR`` (its type and one-line message, also stored with the plan), which
:func:`job_failure` turns back into the error on the submitting side.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.errors import MirrorflowError, described, error_named
from mirrorflow.lease import FlowLease
from mirrorflow.source.plan_records import Plan
from mirrorflow.source.plan_store import PlanStore
from mirrorflow.source.topic_sync import shared_descriptions

if TYPE_CHECKING:
    from mirrorflow.quality.verdicts import Validation

RESULT_MARKER = "MIRRORFLOW_RESULT "
VALIDATION_MARKER = "MIRRORFLOW_VALIDATION "
ERROR_MARKER = "MIRRORFLOW_ERROR "
EXIT_VALIDATION_FAILED = 2
STEPS = ("mirror", "validate")


class NoMirrorResultError(MirrorflowError):
    """Validation was asked for a plan the mirror step has not finished."""


def run_steps(spark, config: MirrorConfig, flow: FlowConfig, plan: Plan,
              steps: Sequence[str] = STEPS, run_id: str | None = None,
              ) -> tuple[dict | None, Validation | None]:
    """The job's steps in ``spark``, holding the flow's lease (which a run holding it
    under the same ``run_id`` lends) for a plan that is still pending: mirror, then
    validate; both results are stored with the plan. Returns the plan's result and the
    validation (None when not asked for)."""
    from mirrorflow.quality.gx_import import prepare_validation
    from mirrorflow.quality.validate import validate_plan
    from mirrorflow.spark.mirror import mirror

    store = PlanStore(config, flow)
    run_id = run_id or plan.run_id
    if "validate" in steps and plan.ranges:
        prepare_validation()
    with FlowLease(config, flow, run_id), shared_descriptions():
        # A cleared or re-run task of an older run finds its plan committed or superseded:
        # PlanNotPendingError, before a record moves (it would be written twice).
        store.require_pending(plan.plan_id)
        try:
            if "mirror" in steps:
                result = mirror(spark, config, flow, plan)
                store.save_result(plan.plan_id, result)
            else:
                result = store.result(plan.plan_id)
            if "validate" not in steps:
                return result, None
            if result is None:
                raise NoMirrorResultError(f"plan {plan.plan_id} of flow {flow.name} has no "
                                          "mirror result: run the mirror step first")
            validation = validate_plan(spark, config, flow, plan, result, run_id)
        except Exception as exc:
            store.save_failure(plan.plan_id, run_id, exc)
            raise
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
                             "(the DAG's mirror task gives the verdict)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except Exception as exc:
        # The driver's log is pages of Spark's shutdown after the error: the one line the
        # submitting side reports (job_failure) goes on its own marked line.
        traceback.print_exc()
        name, message = described(exc)
        print(ERROR_MARKER + json.dumps({"error": name, "message": message}), flush=True)
        return 1


def _run(args: argparse.Namespace) -> int:
    from pyspark.sql import SparkSession

    from mirrorflow.spark.session import SPARK_CONF

    config = load_config(args.config)
    flow = config.flow(args.flow)
    plan = PlanStore(config, flow).load(args.plan_id)
    builder = SparkSession.builder.appName(f"mirrorflow {flow.name} {plan.plan_id}")
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        result, validation = run_steps(spark, config, flow, plan, args.steps, args.run_id)
    finally:
        spark.stop()
    print(RESULT_MARKER + json.dumps(result), flush=True)
    if validation is not None:
        print(VALIDATION_MARKER + json.dumps(validation.to_dict()), flush=True)
        if not validation.success:
            print(str(validation.error()), file=sys.stderr, flush=True)
            return 0 if args.no_fail_on_validation else EXIT_VALIDATION_FAILED
    return 0


def job_failure(output: str, store: PlanStore, plan_id: str, run_id: str, since_ms: int,
                log_path: str) -> MirrorflowError:
    """Why a submitted job failed, as the error it raised (its type and one-line
    message) and where its whole log is: its marked line where the driver ran here
    (client deploy mode, on every master), else the failure it stored with the plan (a
    driver on a cluster), else the first exception its log shows."""
    from mirrorflow.errors import first_exception
    from mirrorflow.spark.mirror import MirrorJobError

    where = f" (driver log: {log_path})"
    for line in output.splitlines():
        if line.startswith(ERROR_MARKER):
            found = json.loads(line[len(ERROR_MARKER):])
            return error_named(found["error"], found["message"] + where, MirrorJobError)
    stored = store.failure(plan_id)
    if stored and stored.get("run_id") == run_id and stored.get("at_ms", 0) >= since_ms:
        return error_named(stored["error"], stored["message"] + where, MirrorJobError)
    first = first_exception(output)
    lines = output.strip().splitlines()
    return MirrorJobError(f"the Spark job failed: {first or (lines[-1] if lines else 'no output')}"
                          f"; nothing was committed, the next run resumes plan {plan_id}{where}")

if __name__ == "__main__":
    sys.exit(main())
