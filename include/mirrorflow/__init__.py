"""mirrorflow: MirrorMaker 2 replication as Airflow-scheduled PySpark micro-batches."""

__version__ = "0.1.0"
