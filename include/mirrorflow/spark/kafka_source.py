"""Reading Kafka with Spark's own Kafka source (``spark-sql-kafka-0-10``) over exact ranges.

The JVM connector reads: ``assign`` names the partitions, ``startingOffsets`` and
``endingOffsets`` (JSON) bound each one to its planned range, so no record outside the
plan is read. ``includeHeaders`` gives Spark's Kafka schema
(``key, value, topic, partition, offset, timestamp, timestampType, headers``); each range
is one Spark input partition, read in offset order.

Client settings are the cluster's Java settings from the MM2 file, secrets resolved, as
``kafka.*`` options; ``kafka.isolation.level`` is the cluster's consumer setting
(``read_committed`` unless the file says otherwise:
:meth:`~mirrorflow.config.model.ClusterConfig.isolation_level`). ``kafka.group.id`` keys
Spark's pool of consumers (:func:`reader_group`). Spark
redacts option values whose key or value matches ``spark.redaction.regex`` and
``spark.sql.redaction.options.regex``, which :data:`mirrorflow.spark.session.SPARK_CONF`
sets to cover passwords, JAAS lines, tokens and key material, in the UI, the event log
and ``explain``. ``failOnDataLoss`` is off: records lost to retention are detected by
the writer (which tells retention from compaction by the source's log start) and by the
completeness check, which name the range.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping

from mirrorflow.config.model import ClusterConfig
from mirrorflow.kafka import clients
from mirrorflow.spark.session import REDACTION

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
# Reading costs a consumer per partition where Spark's pool has none (reader_group):
# without the client telemetry request (KIP-714) and the JMX registration of every
# metric, 1,000 partitions of 3 records read in 3.3 s instead of 5.0.
# Bigger fetches into the socket's own (autotuned) buffer instead of the Java client's
# 64 KiB and 1 MiB per partition: measured, 2,000,000 records of 512 B read and digested
# in 2.45 s -> 1.95 s.
# Spark's reader asks the broker for the partition's two ends (two ListOffsets round trips)
# after every poll, and a poll hands over at most max.poll.records (Java's default 500):
# one poll per fetch instead (docs/benchmark.md); what a poll hands over comes from one
# fetch, which max.partition.fetch.bytes bounds. The cluster's own settings, where the
# file has them, win.
READ_DEFAULTS = {"kafka.fetch.max.wait.ms": FETCH_MAX_WAIT_MS,
                 "kafka.enable.metrics.push": "false",
                 "kafka.auto.include.jmx.reporter": "false",
                 "kafka.receive.buffer.bytes": "-1",
                 "kafka.max.partition.fetch.bytes": str(8 * 1024 * 1024),
                 "kafka.max.poll.records": "20000"}


def kafka_options(cluster: ClusterConfig, isolation: str | None = None) -> dict[str, str]:
    """``kafka.*`` options of Spark's Kafka source for reading ``cluster`` (with the
    cluster's consumer isolation level unless ``isolation`` is given)."""
    props = clients.java_client_config(cluster, "consumer")
    options = {**READ_DEFAULTS,
               **{f"kafka.{k}": v for k, v in props.items() if k not in _SPARK_OWNED}}
    options["kafka.isolation.level"] = isolation or cluster.isolation_level()
    return options


def reader_group(options: Mapping[str, str], topic_ids: Mapping[str, str]) -> str:
    """The group id a read gives Spark's Kafka source (``kafka.group.id``), which only
    keys Spark's pools (a read with ``assign`` joins no group and commits nothing).

    Spark keeps each executor's consumers, and the records a fetch brought past a range's
    end, keyed by (group id, partition); by default every query has a new group id, so
    every read of a partition opens and closes a consumer (two connections, metadata,
    ListOffsets) and the pool's table of keys grows with every query. This id is equal for
    two reads exactly when their client settings are equal (the pool refuses a key with
    other settings) and every topic of ``topic_ids`` (the flow's topics on that cluster,
    with their KIP-516 ids) is the same incarnation: a topic deleted and created again
    changes it, so records fetched from the old incarnation are never served as the new
    one's. Secret settings (what Spark's redaction covers) count through a 16-bit scrypt
    tag only: a changed password gives a new id, while the id, which Spark logs, says
    next to nothing about the password."""
    plain = {k: v for k, v in options.items() if not re.search(REDACTION, k)}
    secret = {k: v for k, v in options.items() if k not in plain}
    digest = hashlib.sha256(json.dumps([sorted(plain.items()), sorted(topic_ids.items())])
                            .encode()).hexdigest()[:20]
    return f"mirrorflow-reader-{digest}" + (f"-{_secret_tag(json.dumps(sorted(secret.items())))}"
                                           if secret else "")


@functools.lru_cache(maxsize=64)
def _secret_tag(secrets: str) -> str:
    return hashlib.scrypt(secrets.encode(), salt=b"mirrorflow-reader", n=2 ** 14, r=8, p=1,
                          dklen=2).hex()


def read_ranges(spark, cluster: ClusterConfig, ranges: Iterable[OffsetRange],
                split_records: int | None = None, isolation: str | None = None, *,
                topic_ids: Mapping[str, str]):
    """A DataFrame of every record of ``ranges`` (one range per partition at most).
    ``split_records`` lets Spark read a long range in several input partitions (the
    check may; the mirror never does, to write each range in order in one task).
    ``topic_ids``: the flow's topics on ``cluster`` and their ids (:func:`reader_group`)."""
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for topic, partition, start, end in ranges:
        assign.setdefault(topic, []).append(partition)
        starts.setdefault(topic, {})[str(partition)] = start
        ends.setdefault(topic, {})[str(partition)] = end
    options = kafka_options(cluster, isolation)
    options["kafka.group.id"] = reader_group(options, topic_ids)
    reader = (spark.read.format("kafka").options(**options)
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

