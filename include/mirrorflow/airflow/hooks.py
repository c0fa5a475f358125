"""Hooks of the ``mirror`` task: the Spark provider's ``spark-submit`` hook, keeping what
the job printed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook


class JobSubmitHook(SparkSubmitHook):
    """The provider's ``spark-submit`` hook, which logs the job's output line by line and,
    when the job fails, raises only its command and exit status. This one also keeps the
    lines (:attr:`output`): the job's own error is among them
    (:func:`mirrorflow.spark.job.job_failure`), and the whole is the driver's log kept
    with the run's report."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.output: list[str] = []

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        # The provider's one place that reads the output (it also finds the YARN
        # application or Kubernetes driver pod there): the lines pass through unchanged.
        def kept() -> Iterator[Any]:
            for line in itr:
                self.output.append(line)
                yield line

        super()._process_spark_submit_log(kept())
