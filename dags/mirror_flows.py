"""One Airflow DAG per enabled replication flow of the MM2 config ($MIRRORFLOW_CONFIG)."""

from mirrorflow.airflow.dags import build_flow_dags

globals().update(build_flow_dags())
