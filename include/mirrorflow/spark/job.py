"""The mirror batch job: read a stored plan's ranges from the source, write them to the target.

Submitted with ``spark-submit`` (``spark_jobs/mirror_batch.py`` calls :func:`main`), on
``local[*]`` or any master. The per-range results are stored with the plan by the data
source's commit, which Spark runs only after every write task succeeded, and are printed
on one line prefixed ``MIRRORFLOW_RESULT``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict

from mirrorflow.config import FlowConfig, load_config
from mirrorflow.plan import Plan, PlanStore

RESULT_MARKER = "MIRRORFLOW_RESULT "
# Arrow batches handed to the writer: small enough that 1 MiB records stay bounded in memory.
ARROW_RECORDS_PER_BATCH = 2_000


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="mirrorflow mirror batch job")
    parser.add_argument("--config", required=True)
    parser.add_argument("--flow", required=True)
    parser.add_argument("--plan-id", required=True)
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    config = load_config(args.config)
    flow = config.flow(args.flow)
    store = PlanStore(config, flow)
    plan = store.load(args.plan_id)
    spark = (SparkSession.builder.appName(f"mirrorflow {flow.name} {plan.plan_id}")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", ARROW_RECORDS_PER_BATCH)
             .getOrCreate())
    try:
        if plan.ranges:
            mirror(spark, args.config, flow, plan)
        else:
            store.save_result(plan.plan_id, {"plan_id": plan.plan_id, "ranges": []})
    finally:
        spark.stop()
    print(RESULT_MARKER + json.dumps(store.result(plan.plan_id)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
