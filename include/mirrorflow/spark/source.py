"""``kafka_range``: a PySpark Python Data Source whose input partitions are offset ranges.

Spark's own Kafka connector (spark-sql-kafka) is a JVM package that cannot be installed
here; this source reads and writes Kafka from Python workers with confluent-kafka and
exchanges Arrow batches with Spark. The schema is the built-in Kafka source's:
``key, value, topic, partition, offset, timestamp, timestampType, headers``.

Options:

* ``ranges``: JSON list of ``{"topic", "partition", "start", "end"}`` (upstream
  ``[start, end)``); the writer also needs ``remote_topic`` and ``target_start``.
* client settings: ``mirrorflow.config`` (path of the MM2 file) with ``mirrorflow.cluster``
  (alias) take the cluster's settings from the config, so secrets never travel in Spark
  options; ``kafka.<property>`` options (Spark's convention) are added on top.
* ``maxRecordsPerPartition`` (read only): split longer ranges over several input
  partitions (a validation scan may; the mirror never does, to keep source order).
* writer: ``mirrorflow.flow`` (``SRC->TGT``, whose target is written) and
  ``mirrorflow.planId``; the job's per-range results are stored with the plan.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>")
BATCH_RECORDS = 5_000
BATCH_BYTES = 8 * 1024 * 1024
STALL_TIMEOUT_S = 60.0


def _arrow_schema():
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
        ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
        ("headers", pa.list_(header)),
    ])


def client_conf(options: dict[str, str], alias: str | None, role: str) -> dict[str, Any]:
    """librdkafka settings for ``role`` from the MM2 config (if named) plus ``kafka.*``."""
    conf: dict[str, Any] = {}
    path = options.get("mirrorflow.config")
    if path and alias:
        from mirrorflow import clients
        from mirrorflow.config import load_config

        cluster = load_config(path).cluster(alias)
        conf.update(clients.client_config(cluster, role))
        if role == "consumer":
            conf.setdefault("isolation.level", cluster.isolation_level())
    conf.update({k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")})
    if "bootstrap.servers" not in conf:
        raise ValueError("kafka_range needs mirrorflow.config and mirrorflow.cluster, or "
                         "kafka.bootstrap.servers")
    return conf


@dataclass(frozen=True)
class RangePartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int


class KafkaRangeReader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        self.options = dict(options)
        self.ranges = json.loads(self.options.get("ranges", "[]"))
        split = self.options.get("maxrecordsperpartition")
        self.split = int(split) if split else None

    def partitions(self) -> list[RangePartition]:
        parts = []
        for r in self.ranges:
            step = self.split or max(r["end"] - r["start"], 1)
            for lo in range(r["start"], r["end"], step):
                parts.append(RangePartition(r["topic"], r["partition"], lo,
                                            min(lo + step, r["end"])))
        return parts

    def read(self, part: RangePartition) -> Iterator[Any]:
        """Arrow batches of the range, one per consume call; the batch size in records
        follows the records' size so that a batch stays near BATCH_BYTES."""
        from confluent_kafka import Consumer, TopicPartition

        from mirrorflow.clients import new_client

        conf = client_conf(self.options, self.options.get("mirrorflow.cluster"), "consumer")
        where = f"{part.topic}[{part.partition}]"
        consumer = new_client(Consumer, {
            **conf, "group.id": "mirrorflow-spark", "enable.auto.commit": False,
            "enable.partition.eof": True, "fetch.wait.max.ms": 50}, f"reading {where}")
        try:
            _check_exists(consumer, part.topic, self.options.get("mirrorflow.cluster"))
            consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
            next_offset = part.start
            wanted = BATCH_RECORDS
            last_progress = time.monotonic()
            while next_offset < part.end:
                msgs = consumer.consume(num_messages=min(wanted, part.end - next_offset),
                                        timeout=0.1)
                records, next_offset = _in_range(msgs, part, next_offset, where)
                if not records:
                    if time.monotonic() - last_progress > STALL_TIMEOUT_S:
                        raise RuntimeError(f"{where}: no record at offset {next_offset} within "
                                           f"{STALL_TIMEOUT_S:.0f}s (range ends at {part.end})")
                    continue
                last_progress = time.monotonic()
                batch = record_batch(records, part.topic, part.partition)
                per_record = max(batch.nbytes // batch.num_rows, 1)
                wanted = max(1, min(BATCH_RECORDS, BATCH_BYTES // per_record))
                yield batch
        finally:
            consumer.close()


def _check_exists(consumer, topic: str, alias: str | None) -> None:
    """A topic deleted after planning fails its read at once, named, instead of stalling."""
    from confluent_kafka import KafkaError

    metadata = consumer.list_topics(topic, timeout=15).topics.get(topic)
    if metadata is None or (metadata.error is not None and metadata.error.code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)):
        raise RuntimeError(f"source topic {topic!r} no longer exists on cluster {alias!r}: it "
                           "was deleted after planning. Nothing was committed; the next run "
                           "drops it from the pending plan")


def _in_range(msgs: list, part: RangePartition, next_offset: int,
              where: str) -> tuple[list, int]:
    """The records of one consume call inside the range, and the next offset to read.
    Errors end the read; the end of the partition before the range's end means the
    topic was truncated or recreated."""
    from confluent_kafka import KafkaError

    if msgs and msgs[-1].error() is None and msgs[-1].offset() < part.end and \
            not any(m.error() is not None for m in msgs):
        return msgs, msgs[-1].offset() + 1
    for i, msg in enumerate(msgs):
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(f"{where}: {err.str()}")
            if msg.offset() < part.end:
                raise RuntimeError(
                    f"{where}: the partition ends at {msg.offset()}, before the planned range "
                    f"{part.start}..{part.end - 1} ends; the topic was truncated or recreated")
            return msgs[:i], part.end
        if msg.offset() >= part.end:
            return msgs[:i], part.end
        next_offset = msg.offset() + 1
    return msgs, next_offset


def record_batch(msgs: list, topic: str, partition: int):
    """One Arrow batch (the Kafka source schema) from consumed messages, column by column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _arrow_schema()
    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    # confluent-kafka: 0 none, 1 create time, 2 log append time; Spark: 0 create, 1 append.
    kinds = pa.array([kind for kind, _ in stamps], pa.int32())
    millis = pa.array([ts for _, ts in stamps], pa.int64())
    micros = pc.if_else(pc.equal(kinds, 0), pa.scalar(None, pa.int64()),
                        pc.multiply(millis, 1000))
    return pa.RecordBatch.from_arrays([
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([m.offset() for m in msgs], pa.int64()),
        micros.cast(schema.field("timestamp").type),
        pc.max_element_wise(pc.subtract(kinds, 1), 0),
        pa.array([m.headers() for m in msgs], schema.field("headers").type),
    ], schema=schema)


@dataclass
class RangeCommitMessage(WriterCommitMessage):
    result: dict | None


class KafkaRangeWriter(DataSourceArrowWriter):
    """Writes each input partition (one planned range) to its remote partition."""

    def __init__(self, options: dict[str, str]):
        self.options = dict(options)
        self.flow = self.options["mirrorflow.flow"]
        self.plan_id = self.options["mirrorflow.planid"]
        self.ranges = {(r["topic"], r["partition"]): r
                       for r in json.loads(self.options.get("ranges", "[]"))}

    def _target_alias(self) -> str:
        return self.flow.split("->", 1)[1]

    def write(self, iterator) -> RangeCommitMessage:
        from mirrorflow.writer import PartitionWriter

        writer = None
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                tp = (batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
                if writer is None:
                    r = self.ranges[tp]
                    target = self._target_alias()
                    writer = PartitionWriter(
                        client_conf(self.options, target, "producer"),
                        client_conf(self.options, target, "consumer"), r["topic"],
                        r["partition"], r["remote_topic"], r["start"], r["end"],
                        r["target_start"], self.flow,
                        self.options.get("mirrorflow.exactlyonce", "requested"),
                        max_message_bytes=r.get("max_message_bytes"))
                    writer.open()
                elif tp != (writer.result.topic, writer.partition):
                    raise RuntimeError(f"one write task got records of {tp} and of "
                                       f"{(writer.result.topic, writer.partition)}")
                writer.write_batch(batch)
            return RangeCommitMessage(asdict(writer.close()) if writer else None)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise

    def commit(self, messages: list[RangeCommitMessage]) -> None:
        """Runs once every task succeeded: store the per-range results with the plan."""
        from mirrorflow.config import load_config
        from mirrorflow.plan import PlanStore

        config = load_config(self.options["mirrorflow.config"])
        results = [m.result for m in messages if m is not None and m.result is not None]
        PlanStore(config, config.flow(self.flow)).save_result(
            self.plan_id, {"plan_id": self.plan_id, "ranges": results})


class KafkaRangeDataSource(DataSource):
    """Registered as ``kafka_range``."""

    @classmethod
    def name(cls) -> str:
        return "kafka_range"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> KafkaRangeReader:
        return KafkaRangeReader(self.options)

    def writer(self, schema, overwrite: bool) -> KafkaRangeWriter:
        return KafkaRangeWriter(self.options)
