"""The partition writer on Apache Kafka: resume from the position committed with the data,
fence zombies, span records, another producer in the remote partition, retention."""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from helpers.kafka import create_topic, delete_records, produce, read_partition, varied_records
from mirrorflow.config.loader import parse_config
from mirrorflow.errors import DataLossError, MirrorflowError
from mirrorflow.kafka.watermarks import probe_watermarks
from mirrorflow.source import ledger
from mirrorflow.source.write_task import WriteError, WriteTask
from mirrorflow.source.writer import SlotWriter

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
               chunk: int = 100_000, extra: str = "", **task) -> SlotWriter:
    return opened([WriteTask("a->b", plan_id, "orders", 0, "a.orders", start, end,
                             chunk_records=chunk, **task)], bootstraps, extra)


def opened(tasks: list[WriteTask], bootstraps: dict[str, str], extra: str = "") -> SlotWriter:
    """The tasks' writer, opened on a target with the spans topic (the mirror's driver
    creates it before the write)."""
    target, source = clusters(bootstraps, extra)
    ledger.spans_store(target, "a").ensure()
    writer = SlotWriter(tasks, target, source)
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
    result = writer.close()[0]
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
    # The position committed with chunk two:
    assert retry.ranges[("orders", 0)].result.resumed_from == 600
    retry.write_batch(batch_of(records, list(range(1000))))
    result = retry.close()[0]
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
    assert again.ranges[("orders", 0)].result.resumed_from == 0
    again.write_batch(batch_of(records, list(range(20))))
    assert again.close()[0].records_written == 20


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
    result = writer.close()[0]
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
    result = writer.close()[0]
    assert result.gaps == [(10, 30)] and result.records_written == 70


def test_a_compaction_gap_at_the_start_is_not_data_loss(two_clusters) -> None:
    create_topic(two_clusters["a"], "orders", 1)
    create_topic(two_clusters["b"], "a.orders", 1)
    produce(two_clusters["a"], "orders", varied_records(100), 1)  # log start stays 0
    writer = new_writer(two_clusters, 10, 100)
    writer.write_batch(batch_of(varied_records(70, 30), list(range(30, 100))))
    result = writer.close()[0]
    assert result.gaps == [] and result.records_written == 70


def slot_writer(bootstraps: dict[str, str], ranges: list[tuple[str, int, int]],
                plan_id: str = "plan-1", chunk: int = 100_000) -> SlotWriter:
    """One slot's writer over ``(topic, partition, end)`` ranges from offset 0."""
    return opened([WriteTask("a->b", plan_id, t, p, f"a.{t}", 0, end, chunk_records=chunk,
                             slot=3) for t, p, end in ranges], bootstraps)


def test_one_transaction_spans_every_range_of_a_slot(two_clusters) -> None:
    """Three ranges of two topics in one slot: one batch holding all of them (as Spark's
    Arrow batches cross its input partitions), one transaction, one commit with the spans
    and resume positions of all three; a batch of a range dealt elsewhere is refused."""
    b = two_clusters["b"]
    create_topic(b, "a.orders", 2)
    create_topic(b, "a.clicks", 1)
    records = varied_records(9)
    writer = slot_writer(two_clusters, [("orders", 0, 3), ("orders", 1, 3), ("clicks", 0, 3)])
    batch = pa.concat_batches([batch_of(records[0:3], [0, 1, 2]),
                               batch_of(records[3:6], [0, 1, 2], partition=1),
                               batch_of(records[6:9], [0, 1, 2], topic="clicks")])
    writer.write_batch(batch)
    results = writer.close()
    assert [(r.topic, r.partition, r.records_written, r.first_downstream, r.last_downstream)
            for r in results] == [("orders", 0, 3, 0, 2), ("orders", 1, 3, 0, 2),
                                  ("clicks", 0, 3, 0, 2)]
    assert read_partition(b, "a.orders", 0) == records[0:3]
    assert read_partition(b, "a.orders", 1) == records[3:6]
    assert read_partition(b, "a.clicks", 0) == records[6:9]
    # One transaction: a single commit marker after each partition's records.
    assert {tp: w.high for tp, w in probe_watermarks(
        clusters(two_clusters)[0], [("a.orders", 0), ("a.orders", 1), ("a.clicks", 0)]
    ).items()} == {("a.orders", 0): 4, ("a.orders", 1): 4, ("a.clicks", 0): 4}
    assert ledger.read_resume(clusters(two_clusters)[0], "a", [
        ("a.orders", 0), ("a.orders", 1), ("a.clicks", 0)]) == {
        tp: ledger.Resume("plan-1", 3) for tp in [("a.orders", 0), ("a.orders", 1),
                                                   ("a.clicks", 0)]}
    other = slot_writer(two_clusters, [("orders", 0, 3)], plan_id="plan-2")
    with pytest.raises(MirrorflowError, match=r"write slot 3 got records of clicks\[0\], "
                                              r"which the plan dealt elsewhere"):
        other.write_batch(batch_of(records[6:9], [0, 1, 2], topic="clicks"))
    other.abort()


def test_a_retry_with_fewer_ranges_in_the_slot_fences_the_zombie(two_clusters) -> None:
    """An attempt's slot writer committed one range and hangs inside the transaction of
    the next; the retry's slot holds only the unfinished range (the driver skips what is
    done), yet its producer fences the zombie: each record lands once."""
    b = two_clusters["b"]
    create_topic(b, "a.orders", 2)
    records = varied_records(200)
    zombie = slot_writer(two_clusters, [("orders", 0, 100), ("orders", 1, 100)], chunk=100)
    zombie.write_batch(batch_of(records[:100], list(range(100))))  # committed: 100 records
    zombie.write_batch(batch_of(records[100:150], list(range(50)), partition=1))  # open
    zombie._producer.flush(10)
    retry = slot_writer(two_clusters, [("orders", 1, 100)], chunk=100)
    assert retry.ranges[("orders", 1)].result.resumed_from == 0
    with pytest.raises(WriteError, match=r"writing orders\[1\] -> a\.orders\[1\]: the "
                                         r"transaction of upstream offsets 0\.\.99 failed: "
                                         r".*fenced by newer producer instance"):
        zombie.write_batch(batch_of(records[150:], list(range(50, 100)), partition=1))
        zombie.close()
    retry.write_batch(batch_of(records[100:], list(range(100)), partition=1))
    assert [r.records_written for r in retry.close()] == [100]
    assert read_partition(b, "a.orders", 0) == records[:100]
    assert read_partition(b, "a.orders", 1) == records[100:]


def test_a_transaction_timed_out_by_a_paused_broker_is_written_again(
        two_clusters, kafka, caplog: pytest.LogCaptureFixture) -> None:
    """The target stops answering (SIGSTOP) while a transaction's records are in flight;
    they time out, which makes the transaction abortable. The writer aborts it and writes
    it again once the broker answers, and every record is on the target once."""
    import logging
    import os
    import signal
    import threading

    b = two_clusters["b"]
    create_topic(b, "a.orders", 1)
    records = varied_records(500)
    writer = new_writer(two_clusters, 0, 500, extra="b.producer.delivery.timeout.ms = 3000\n"
                                                    "b.producer.request.timeout.ms = 2000\n")
    pid = kafka["b"].pid()
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(6, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        with caplog.at_level(logging.WARNING):
            writer.write_batch(batch_of(records, list(range(500))))
            result = writer.close()[0]
    finally:
        resume.join()
        os.kill(pid, signal.SIGCONT)
        writer.release()
    assert ("orders[0] -> a.orders[0]: transaction attempt 1 of 3 aborted "
            "(orders[0] -> a.orders[0] offset 0: Local: Message timed out)") in caplog.text
    assert result.records_written == 500
    assert [r[1:] for r in read_partition(b, "a.orders", 0, with_offsets=True)] == records


def test_a_missing_spans_topic_fails_the_write_by_name(two_clusters) -> None:
    """The driver creates the spans topic before the write; were it gone (deleted by hand
    in between), the write fails naming it, and the transaction commits nothing."""
    b = two_clusters["b"]
    create_topic(b, "a.orders", 1)
    # librdkafka waits this long for a topic it does not know (30 s by default) before it
    # fails a record of it.
    target, source = clusters(two_clusters, "b.producer.topic.metadata.propagation.max.ms"
                                            " = 2000\n")
    writer = SlotWriter([WriteTask("a->b", "plan-1", "orders", 0, "a.orders", 0, 10)],
                        target, source)
    writer.open()
    writer.write_batch(batch_of(varied_records(10), list(range(10))))
    with pytest.raises(WriteError, match=r"^writing orders\[0\] -> a\.orders\[0\]: cannot write "
                                         r"its span records to mirrorflow-spans\.a\.internal "
                                         r"on cluster 'b': .*Unknown topic or partition; "
                                         r"nothing of the transaction was committed$"):
        writer.close()
    writer.abort()
    writer.release()
    assert read_partition(b, "a.orders", 0) == []
