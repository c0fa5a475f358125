"""What a flow's Airflow tasks import, imported once per scheduler instead of once per task.

With LocalExecutor each task is a process forked from an executor worker, and it imports
what it needs anew: the DAG file's modules (with what its ``from airflow.sdk import DAG,
task`` resolves lazily, the standard provider's Python operator and ``packaging``'s
requirement grammar: half of the DAG parse every task does), confluent-kafka and its admin
client, the templates' Jinja extensions, and in the ``mirror`` task Spark Connect's client
and its channel and Great Expectations (about 2 s of CPU of its own), whose Data Docs
templates each task would compile again (mirrorflow.quality.docs_views). Airflow 3.3
can start the executor's workers from a forkserver that imports a list of modules first
(``[scheduler] mp_start_method = forkserver``, ``[core] mp_forkserver_preload``); naming
this module there makes every task process inherit these imports, copy-on-write. Importing
it opens no connection and starts no thread, which a process that forks must not have.

Its one cost: a task runs the mirrorflow code the scheduler's forkserver imported, so new
code needs a scheduler restart (as a new image or deployment does anyway).
"""

from __future__ import annotations

import gc
import os

import airflow.dag_processing.dagbag
import airflow.version  # noqa: F401
import confluent_kafka.admin  # noqa: F401
import grpc._channel  # noqa: F401
import jinja2.ext  # noqa: F401
import pyspark.sql.connect.session  # noqa: F401
from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook  # noqa: F401
from airflow.sdk import DAG, task  # noqa: F401
from airflow.sdk.execution_time.task_runner import get_listener_manager

import mirrorflow.airflow.dags
import mirrorflow.airflow.operators
import mirrorflow.airflow.sensors
import mirrorflow.airflow.timetables
import mirrorflow.airflow.watchdog
import mirrorflow.checkpoint.checkpoints
import mirrorflow.heartbeat.heartbeats
import mirrorflow.lease
import mirrorflow.quality.reports
import mirrorflow.quality.validate
import mirrorflow.run
import mirrorflow.spark.job
import mirrorflow.spark.session  # noqa: F401
from mirrorflow.quality.docs_views import compile_templates  # imports GX (gx_import)

# The Data Docs' templates, compiled once here rather than in every mirror task.
compile_templates()
# What Airflow's task runner loads before a task runs (the DAG bag's module, imported
# above, and the plugins with their listeners: 2 s of a 4 s small task in a soak
# without them), which workers forked from the scheduler inherited from it.
get_listener_manager()
# Out of the collector's sight: no task process scans, or copies, what it inherits.
gc.freeze()

# The process that made these imports: a task process that finds another pid here
# inherited them (see mirrorflow.airflow.operators).
LOADED_BY = os.getpid()

