"""mirrorflow's own flow properties (``mirrorflow.*``, and the Spark-style
``failOnDataLoss``): scheduling, Spark, leases, limits, the proof, reports and alerts."""

from __future__ import annotations

from mirrorflow.config.property_spec import PropertySpec
from mirrorflow.config.values import (
    as_bool,
    as_fraction,
    as_int,
    as_non_negative_int,
    as_positive_int,
    as_schedule,
    as_string,
)

MIRRORFLOW_SPECS = [
    PropertySpec(
        "mirrorflow.schedule",
        "*/5 * * * *",
        as_schedule,
        "Airflow schedule of the flow's DAG: cron, a preset (@hourly), '@continuous' (runs "
        "back to back, one at a time: a flow's lag is one run, not an interval plus a run), "
        "or 'none' for manual.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.schedule.spread.seconds",
        "60",
        as_non_negative_int,
        "Enabled flows on a cron schedule start this many seconds apart in all, in the "
        "order of their names: flow k of n starts k * spread / n seconds after each cron time, "
        "so that their plans and mirrors do not all queue at the same second. 0 starts "
        "them together.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.spark.master",
        "local[*]",
        as_string,
        "Spark master for the mirror job when run without Airflow's Spark connection.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.spark.conn.id",
        "spark_default",
        as_string,
        "Airflow connection the SparkSubmitOperator uses.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.retry.delay.seconds",
        "15",
        as_non_negative_int,
        "Airflow's delay before a failed task of the flow's DAG is retried the first time; "
        "each of the other two retries waits twice as long as the one before (Airflow's "
        "exponential backoff, with its jitter: 15, 30, 60 s), at most 5 minutes; 0 "
        "retries at once.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.cluster.wait.seconds",
        "120",
        as_non_negative_int,
        "How long a run's plan (and every retry of its tasks) waits for a source or target "
        "cluster none of whose brokers answers, asking every second, before it fails naming "
        "the cluster: a run that meets a broker's restart goes on within a second of its "
        "return instead of at its next retry. A cluster that answers and refuses "
        "(credentials, TLS) fails at once, a listener that closes connections unanswered "
        "(another protocol's, or a broker's still starting) after 10 s unless the cluster "
        "was down in this wait; every cluster fails at once with 0.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.task.timeout.seconds",
        "600",
        as_positive_int,
        "Airflow's execution_timeout of every task of the flow's DAG but mirror and "
        "await_heartbeat (of plan: each execution, not its wait for the flow); a task "
        "process still running a tenth later (stuck where Python cannot interrupt it) "
        "dumps its threads' stacks to the task log and exits, and Airflow retries it.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.mirror.timeout.seconds",
        "7200",
        as_positive_int,
        "The same for the mirror task, whose length follows the backlog (a retry resumes "
        "after the last committed transaction).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.mirror.repeat.seconds",
        "0",
        as_non_negative_int,
        "A DAG run's mirror task, once its plan is proved, commits it and plans, mirrors "
        "and proves what arrived since, cycle after cycle, until this many seconds after "
        "it started; its last plan goes to the run's validate, commit and sync tasks like "
        "a run's one plan; the run reports every cycle. With "
        "'@continuous' on a busy machine it pays a run's Airflow part (a task process and a "
        "scheduler round per task) once for several plans. 0: one plan per run.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.lease.timeout.seconds",
        "30",
        as_positive_int,
        "A step's hold on the flow lapses this long after its process stops renewing it.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.lease.wait.seconds",
        "60",
        as_non_negative_int,
        "How long a run waits for another run of the same flow before it fails.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.lease.run.timeout.seconds",
        "900",
        as_positive_int,
        "A DAG run owns its flow from its plan task to its report task; between its tasks the "
        "ownership lapses this long after the last task let go (a run killed hard).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.max.records.per.partition",
        "1000000",
        as_positive_int,
        "Largest range one run plans for one source partition; the rest waits for the next run.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.transaction.records",
        "100000",
        as_positive_int,
        "Records per writer transaction (also bounded to 64 MiB): each commits its records "
        "with their ranges' resume positions, so a retry redoes at most one transaction.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.write.tasks",
        "8",
        as_positive_int,
        "Write tasks per run at most: the plan deals its ranges out to this many slots "
        "(fewer for a small plan: mirrorflow.write.records.per.task), balanced by size, and "
        "each slot's ranges are written by one Spark task with one transactional producer "
        "(a transactional id per flow and slot) whose transactions span all of them. A "
        "slot's ranges stay in it for every attempt of the plan, so a retry fences each "
        "zombie. The proof reads the ranges in as many tasks (more where long ranges are "
        "split). More than Spark's cores costs a producer, a commit and a task's "
        "scheduling per extra task; fewer leaves cores idle on few large ranges. Left at "
        "this default, a plan's offsets ask for no more slots than Spark's cores where "
        "its master tells them: local[N], local[*] and a Spark Connect server on a "
        "loopback address (this machine's cores).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.write.records.per.task",
        "50000",
        as_positive_int,
        "A plan opens a write slot per this many offsets (and per 500 ranges), up to "
        "mirrorflow.write.tasks: a plan of fewer is written, and proven, by one Spark "
        "task, since each task costs a consumer, a producer and a commit. Lower it for "
        "records far larger than a few KiB, which are worth "
        "spreading over the cores sooner.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.records.per.spark.partition",
        "2000000",
        as_positive_int,
        "The completeness check reads a range longer than this in several Spark input "
        "partitions (the mirror reads each range in one, to keep its order). Each piece "
        "costs a Kafka consumer of its own, which pays off only where ranges are fewer "
        "than cores; the default reads a default plan's range (its records and their "
        "transaction markers) in one.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.validate.fraction",
        "1.0",
        lambda raw: as_fraction(raw),
        "Share of ranges the completeness check verifies (1.0 = everything).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.validate.expectations.dir",
        "",
        as_string,
        "Folder of extra Great Expectations suites (JSON) run over the mirrored records; "
        "empty = include/expectations of the project.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.reports.retention.runs",
        "1000",
        as_positive_int,
        "Run reports (summary and Data Docs) kept per flow: the newest this many; each run "
        "removes older ones as it writes its own.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.reports.retention.days",
        "7",
        as_positive_int,
        "Run reports older than this many days are removed, whatever their number.",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.alert.max.lag.records",
        "-1",
        as_int,
        "Fail the run's report task (after the report is written) when a partition lags "
        "more records than this after the run (-1 = off).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "mirrorflow.alert.max.heartbeat.age.ms",
        "-1",
        as_int,
        "Fail the run's report task (after the report is written) when the newest "
        "heartbeat on the target is older (-1 = off).",
        origin="mirrorflow",
    ),
    PropertySpec(
        "failOnDataLoss",
        "true",
        as_bool,
        "Spark-style: fail when retention removed records not yet mirrored; "
        "false records the gap and goes on.",
        origin="Spark",
    ),
]
