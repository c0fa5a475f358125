"""Spark side of mirrorflow: the Kafka range data source and the mirror batch job."""
