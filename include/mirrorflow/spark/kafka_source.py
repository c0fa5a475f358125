"""Reading Kafka with Spark's own Kafka source (``spark-sql-kafka-0-10``) over exact ranges.

The JVM connector reads: ``assign`` names the partitions, ``startingOffsets`` and
``endingOffsets`` (JSON) bound each one to its planned range, so no record outside the
plan is read. ``includeHeaders`` gives Spark's Kafka schema
(``key, value, topic, partition, offset, timestamp, timestampType, headers``); each range
is one Spark input partition, read in offset order.

Client settings are the cluster's Java settings from the MM2 file, secrets resolved, as
``kafka.*`` options; ``kafka.isolation.level`` is the cluster's consumer setting
(``read_uncommitted`` unless the file says otherwise, as MM2's source consumer). Spark
redacts option values whose key or value matches ``spark.redaction.regex`` and
``spark.sql.redaction.options.regex``, which :data:`mirrorflow.spark.session.SPARK_CONF`
sets to cover passwords, JAAS lines, tokens and key material, in the UI, the event log
and ``explain``. ``failOnDataLoss`` is off: records lost to retention are detected by
the writer (which tells retention from compaction by the source's log start) and by the
completeness check, which name the range.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from mirrorflow.config.model import ClusterConfig
from mirrorflow.kafka import clients

# Settings Spark's Kafka source sets itself or refuses (KafkaSourceProvider).
_SPARK_OWNED = frozenset({
    "group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
    "enable.auto.commit", "interceptor.classes", "key.serializer", "value.serializer"})

OffsetRange = tuple[str, int, int, int]  # topic, partition, start, end (exclusive)
# A range ends at or near the partition's end, where a fetch finds nothing more and the
# broker holds it for fetch.max.wait.ms (Java's default 500 ms). Spark's reader follows
# every fetch with two ListOffsets requests on the same connection, which queue behind the
# consumer's next (pipelined) fetch while the broker holds it: with data waiting, fetches
# return at once whatever the setting, so a bounded read never waits for more.
FETCH_MAX_WAIT_MS = "0"
# Reading costs a consumer per partition (a new one per query: Spark's pool is keyed by
# the query's group id): without the client telemetry request (KIP-714) and the JMX
# registration of every metric, 1,000 partitions of 3 records read in 3.3 s instead of 5.0.
# Bigger fetches into the socket's own (autotuned) buffer instead of the Java client's
# 64 KiB and 1 MiB per partition: measured, 2,000,000 records of 512 B read and digested
# in 2.45 s -> 1.95 s. The cluster's own settings, where the file has them, win.
READ_DEFAULTS = {"kafka.fetch.max.wait.ms": FETCH_MAX_WAIT_MS,
                 "kafka.enable.metrics.push": "false",
                 "kafka.auto.include.jmx.reporter": "false",
                 "kafka.receive.buffer.bytes": "-1",
                 "kafka.max.partition.fetch.bytes": str(8 * 1024 * 1024)}


def kafka_options(cluster: ClusterConfig, isolation: str | None = None) -> dict[str, str]:
    """``kafka.*`` options of Spark's Kafka source for reading ``cluster`` (with the
    cluster's consumer isolation level unless ``isolation`` is given)."""
    props = clients.java_client_config(cluster, "consumer")
    options = {**READ_DEFAULTS,
               **{f"kafka.{k}": v for k, v in props.items() if k not in _SPARK_OWNED}}
    options["kafka.isolation.level"] = isolation or cluster.isolation_level()
    return options


def read_ranges(spark, cluster: ClusterConfig, ranges: Iterable[OffsetRange],
                split_records: int | None = None, isolation: str | None = None):
    """A DataFrame of every record of ``ranges`` (one range per partition at most).
    ``split_records`` lets Spark read a long range in several input partitions (the
    check may; the mirror never does, to write each range in order in one task)."""
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for topic, partition, start, end in ranges:
        assign.setdefault(topic, []).append(partition)
        starts.setdefault(topic, {})[str(partition)] = start
        ends.setdefault(topic, {})[str(partition)] = end
    reader = (spark.read.format("kafka").options(**kafka_options(cluster, isolation))
              .option("assign", json.dumps(assign))
              .option("startingOffsets", json.dumps(starts))
              .option("endingOffsets", json.dumps(ends))
              .option("includeHeaders", "true")
              .option("failOnDataLoss", "false"))
    if split_records:
        reader = reader.option("maxRecordsPerPartition", str(split_records))
    return reader.load()


def for_writer(frame, *extra):
    """The columns the writer takes, with ``headers`` as one JSON string per record
    (``to_json``: binary values in base64, a null value left out, no headers null).
    Spark's Arrow conversion of the nested ``array<struct>`` column costs per record even
    when every record has no headers: measured, 2,000,000 records read into Python in
    18.2 s with it, 4.8 s as JSON, 4.2 s without headers; with 3 headers per record
    JSON is faster too (1.71 s against 2.34 s for 400,000). ``extra`` columns are
    computed from the record as read (the proof's digests)."""
    from pyspark.sql import functions as F

    return frame.select("key", "value", "topic", "partition", "offset", "timestamp",
                        F.to_json("headers").alias("headers"), *extra)

