"""The partition writer on Apache Kafka: resume from the position committed with the data,
fence zombies, span records, another producer in the remote partition, retention."""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from helpers.kafka import create_topic, delete_records, produce, read_partition, varied_records
from mirrorflow.config.model import parse_config
from mirrorflow.errors import DataLossError
from mirrorflow.source import ledger
from mirrorflow.source.writer import PartitionWriter, WriteError, WriteTask

pytestmark = pytest.mark.broker

SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("headers", pa.string()),
])


def headers_json(headers: list | None) -> str | None:
    """Headers as Spark's ``to_json`` writes them (kafka_source.for_writer)."""
    if headers is None:
        return None
    return json.dumps([{"key": k, **({} if v is None else {"value": base64.b64encode(v).decode()})}
                       for k, v in headers], separators=(",", ":"))


def batch_of(records: list, offsets: list[int], topic: str = "orders",
             partition: int = 0) -> pa.RecordBatch:
    """Records as Spark's Kafka source hands them to the writer."""
    n = len(records)
    return pa.RecordBatch.from_arrays([
        pa.array([r[0] for r in records], pa.binary()),
        pa.array([r[1] for r in records], pa.binary()),
        pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array([r[3] * 1000 for r in records], SCHEMA.field("timestamp").type),
        pa.array([headers_json(r[2]) for r in records], pa.string()),
    ], schema=SCHEMA)


def clusters(bootstraps: dict[str, str], extra: str = ""):
    config = parse_config(f"clusters = a, b\na.bootstrap.servers = {bootstraps['a']}\n"
                          f"b.bootstrap.servers = {bootstraps['b']}\n{extra}")
    return config.cluster("b"), config.cluster("a")


def new_writer(bootstraps: dict[str, str], start: int, end: int, plan_id: str = "plan-1",
               chunk: int = 100_000, extra: str = "", **task) -> PartitionWriter:
    target, source = clusters(bootstraps, extra)
    writer = PartitionWriter(WriteTask("a->b", plan_id, "orders", 0, "a.orders", start, end,
                                       chunk_records=chunk, **task), target, source)
    writer.open()
    return writer


def test_writes_records_identically_with_spans_and_position(two_clusters) -> None:
    b = two_clusters["b"]
    create_topic(b, "a.orders", 1)
    records = varied_records(500)
    writer = new_writer(two_clusters, 0, 1000, chunk=300)
    # Upstream offsets with gaps (a compacted source): 0, 2, 4, ..., 498, then 500..749.
    writer.write_batch(batch_of(records[:250], list(range(0, 500, 2))))
    writer.write_batch(batch_of(records[250:], list(range(500, 750))))
    result = writer.close()
    assert result.transactional and result.records_written == 500
    assert read_partition(b, "a.orders", 0) == records
    spans = ledger.read_spans(clusters(two_clusters)[0], "a", "plan-1")[("orders", 0)]
    # Two transactions (300 + 200 records), separated on the target by a commit marker.
    assert [(s.upstream_first, s.upstream_last, s.downstream_first, s.downstream_last,
             s.records) for s in spans] == [(0, 549, 0, 299, 300), (550, 749, 301, 500, 200)]
    # A sync wherever the distance changes: every upstream gap, the marker after 299.
    assert spans[0].syncs[:3] == ((0, 0), (2, 1), (4, 2))
    assert spans[0].syncs[-1] == (500, 250)
    assert spans[1].syncs == ((550, 301),)
    assert ledger.merged_syncs(spans)[-2:] == [(550, 301), (749, 500)]
    resume = ledger.read_resume(clusters(two_clusters)[0], "a", [("a.orders", 0)])
    assert resume == {("a.orders", 0): ledger.Resume("plan-1", 750)}


def test_resume_after_crash_writes_each_record_once(two_clusters) -> None:
    b = two_clusters["b"]
    create_topic(b, "a.orders", 1)
    records = varied_records(1000)
    crashed = new_writer(two_clusters, 0, 1000, chunk=300)
    crashed.write_batch(batch_of(records[:700], list(range(700))))  # 2 chunks + 100 open
    crashed._producer.flush(10)  # the open chunk reached the broker, uncommitted
    # The task dies here. A retry of the same range fences it and resumes.
    retry = new_writer(two_clusters, 0, 1000, chunk=300)
    assert retry.result.resumed_from == 600  # the position committed with chunk two
    retry.write_batch(batch_of(records, list(range(1000))))
    result = retry.close()
    # read_committed hides the aborted 100; the retry wrote them again, and the rest.
    assert result.records_written == 400
    assert read_partition(b, "a.orders", 0) == records
    spans = ledger.read_spans(clusters(two_clusters)[0], "a", "plan-1")[("orders", 0)]
    assert sum(s.records for s in spans) == 1000


def test_a_new_plan_starts_at_its_range_not_at_an_old_position(two_clusters) -> None:
    create_topic(two_clusters["b"], "a.orders", 1)
    records = varied_records(20)
    first = new_writer(two_clusters, 0, 10)
    first.write_batch(batch_of(records[:10], list(range(10))))
    first.close()
    # After a reset to earliest the next plan covers 0..19 again: it writes all of them.
    again = new_writer(two_clusters, 0, 20, plan_id="plan-2")
    assert again.result.resumed_from == 0
    again.write_batch(batch_of(records, list(range(20))))
    assert again.close().records_written == 20


@pytest.mark.parametrize("count", [100, 50_000], ids=["at-commit", "while-producing"])
def test_zombie_writer_is_fenced(two_clusters, count: int) -> None:
    """The fencing surfaces at the commit of a short transaction, and at a produce call
    of a long one (librdkafka then says only "Local: Fatal error"): both name it."""
    b = two_clusters["b"]
    create_topic(b, "a.orders", 1)
    records = varied_records(count)
    zombie = new_writer(two_clusters, 0, count, chunk=count)
    live = new_writer(two_clusters, 0, count, chunk=count)  # bumps the epoch
    with pytest.raises(WriteError, match=r"orders\[0\] -> a\.orders\[0\]: the transaction of "
                                         r"upstream offsets 0\.\.\d+ failed: .*fenced by a "
                                         r"newer instance"):
        zombie.write_batch(batch_of(records, list(range(count))))
        zombie.close()
    live.write_batch(batch_of(records, list(range(count))))
    live.close()
    assert read_partition(b, "a.orders", 0) == records


def test_record_too_large_names_topic_partition_offset(two_clusters) -> None:
    create_topic(two_clusters["b"], "a.orders", 1)
    writer = new_writer(two_clusters, 40, 50, extra="b.producer.message.max.bytes = 10000\n")
    with pytest.raises(WriteError, match=r"orders\[0\] offset 41 to a\.orders: .*too large"):
        writer.write_batch(batch_of([(b"k", b"v", None, 1), (b"k", b"x" * 20_000, None, 2)],
                                    [40, 41]))


def test_another_producer_in_the_remote_partition_is_left_out_of_the_spans(
        two_clusters) -> None:
    """A second flow (fan-in) or anything else writing the same remote partition
    interleaves with the writer's slices: the transaction is written again with a callback
    per record, and the spans hold exactly the writer's own records."""
    b = two_clusters["b"]
    create_topic(b, "a.orders", 1)
    records = varied_records(2000)
    other = Producer({"bootstrap.servers": b, "linger.ms": 0})
    writer = new_writer(two_clusters, 0, 2000)
    original = writer._producer.produce

    real = writer._producer

    class Interleaved:
        """The writer's producer; after a slice's first record lands, another producer
        writes one record into the same remote partition."""

        def produce(self, *args, **kwargs):
            original(*args, **kwargs)
            on_delivery = args[4] if len(args) > 4 else kwargs.get("on_delivery")
            if on_delivery is not None and not writer.careful:
                real.flush(10)
                other.produce("a.orders", b"other", partition=0)
                other.flush(10)

        def __getattr__(self, name):
            return getattr(real, name)

    writer._producer = Interleaved()
    writer.write_batch(batch_of(records, list(range(2000))))
    result = writer.close()
    assert writer.careful and result.records_written == 2000
    landed = read_partition(b, "a.orders", 0, with_offsets=True)
    mine = [r for r in landed if r[2] != b"other"]
    assert [r[1:] for r in mine] == records
    spans = ledger.read_spans(clusters(two_clusters)[0], "a", "plan-1")[("orders", 0)]
    covered = {d for s in spans for d in range(s.downstream_first, s.downstream_last + 1)}
    assert covered == {r[0] for r in mine}
    assert not covered & {r[0] for r in landed if r[2] == b"other"}


def retention_before_30(two_clusters) -> str:
    """100 source records, of which retention (DeleteRecords) removed offsets 0..29;
    returns the target's bootstrap."""
    a, b = two_clusters["a"], two_clusters["b"]
    create_topic(a, "orders", 1)
    create_topic(b, "a.orders", 1)
    produce(a, "orders", varied_records(100), 1)
    delete_records(a, "orders", 0, 30)
    return b


def test_records_lost_to_retention_fail_the_write_naming_them(two_clusters) -> None:
    b = retention_before_30(two_clusters)
    writer = new_writer(two_clusters, 10, 100)
    with pytest.raises(DataLossError, match=r"source orders\[0\]: offsets 10\.\.29 of the "
                                            r"planned range 10\.\.99 were removed by retention"):
        writer.write_batch(batch_of(varied_records(70, 30), list(range(30, 100))))
    assert read_partition(b, "a.orders", 0) == []  # nothing after the gap was written


def test_retention_gap_is_recorded_when_data_loss_is_accepted(two_clusters) -> None:
    retention_before_30(two_clusters)
    writer = new_writer(two_clusters, 10, 100, fail_on_data_loss=False)
    writer.write_batch(batch_of(varied_records(70, 30), list(range(30, 100))))
    result = writer.close()
    assert result.gaps == [(10, 30)] and result.records_written == 70


def test_a_compaction_gap_at_the_start_is_not_data_loss(two_clusters) -> None:
    create_topic(two_clusters["a"], "orders", 1)
    create_topic(two_clusters["b"], "a.orders", 1)
    produce(two_clusters["a"], "orders", varied_records(100), 1)  # log start stays 0
    writer = new_writer(two_clusters, 10, 100)
    writer.write_batch(batch_of(varied_records(70, 30), list(range(30, 100))))
    result = writer.close()
    assert result.gaps == [] and result.records_written == 70
