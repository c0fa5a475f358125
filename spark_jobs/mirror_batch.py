"""Spark job: mirror one stored plan of a flow, by hand. The DAG and `mirrorflow run`
submit the same entry from the package (``mirrorflow/spark/job.py``), installed or not.

    spark-submit spark_jobs/mirror_batch.py --config mm2.properties --flow a->b --plan-id ID
"""

import sys

from mirrorflow.spark.job import main

if __name__ == "__main__":
    sys.exit(main())
