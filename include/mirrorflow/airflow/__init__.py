"""Airflow: the DAG factory, the operators and sensors its tasks use, the plugin and its
status view."""

# The module Airflow's forkserver imports for the tasks ([core] mp_forkserver_preload).
PRELOAD = "mirrorflow.airflow.preload"

# The task that commits a run's last plan (a repeating ``mirror`` committed those before).
COMMIT_TASK = "commit"
