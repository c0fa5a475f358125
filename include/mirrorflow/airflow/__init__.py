"""Airflow: the DAG factory, the operators and sensors its tasks use, the plugin and its
status view."""
