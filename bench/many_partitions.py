"""The bench's estate of many partitions with a trickle in each (issue 25), on the same
brokers and warm Spark Connect server as the rest of the bench:

* the fixed cost: a flow of one 1-partition topic, 8 new records (after a first run);
* 1,000 partitions (250 topics x 4) with 3 new records each, after a first run that
  created their remote topics and a second like it (the flow's third run is timed, as a
  schedule runs it from then on; the one-partition flow is timed just before it); then
  the same flow with nothing new;
* 10,000 partitions (2,500 topics x 4), one record each, in one first run (which also
  creates the 2,500 remote topics), started :data:`SOURCE_SETTLE_S` after the source's
  broker created them on the same disk, with the peak memory of the server's JVM (driver and
  executor in one process) and of its largest Python worker; then the flow's next run, one
  more record each; and, for scale, how long the source broker took to create the same
  topics (until every partition had a leader): the target's broker does that work inside
  the first run;
* MirrorMaker 2 (dedicated mode, started and idle on the same 1,000 partitions' topics):
  seconds from the first of the 3,000 records produced until all are on the target.

Every mirrorflow run is proven (the run fails otherwise) and counted.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from mirrorflow.dev.local_mm2 import MirrorMaker
from mirrorflow.kafka.clients import SPARSE_OFF

PARTITIONS = 4
# Seconds between the source broker's creation of the 10,000 partitions and the first run,
# in which the target's broker opens as many. Here both brokers share one disk, whose ext4
# has no journal: there its inode allocator skips every inode freed in the last 60 s (360 s
# while its table block is unwritten, which the kernel's writeback ends within 30 s), and a
# broker creating a partition frees inodes (checkpoint files written anew and renamed over
# the old). Run at once, the target's opening scanned past the source's 10,000 freed inodes
# (docs/benchmark.md): a cost of this one machine's disk, not of any estate's target.
SOURCE_SETTLE_S = 90


def create_topics(bootstrap: str, names: list[str], partitions: int = PARTITIONS) -> None:
    admin = admin_for(bootstrap)
    for start in range(0, len(names), 500):
        futures = admin.create_topics([NewTopic(n, partitions, 1)
                                       for n in names[start:start + 500]],
                                      request_timeout=120)
        for future in futures.values():
            future.result(180)
    # Created is not yet served: a broker takes a while to open thousands of new partitions,
    # and a producer gives up on a topic its metadata lacks after 30 s.
    deadline = time.monotonic() + 300
    while True:
        topics = admin.list_topics(timeout=60).topics
        if all(n in topics and len(topics[n].partitions) == partitions
               and all(p.leader >= 0 for p in topics[n].partitions.values()) for n in names):
            return
        assert time.monotonic() < deadline, "new topics without a leader after 300 s"
        time.sleep(1)


def trickle(bootstrap: str, names: list[str], each: int,
            partitions: int = PARTITIONS) -> int:
    """``each`` small records into every partition of ``names``; how many more records
    the topics hold now (their end offsets: what a run has to mirror, whatever a retry of
    this producer did)."""
    before = records_on(bootstrap, names, partitions)
    failed: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failed.append(err.str())

    producer = Producer({"bootstrap.servers": bootstrap, **SPARSE_OFF, "linger.ms": 20,
                         "enable.idempotence": True})
    for name in names:
        for partition in range(partitions):
            for i in range(each):
                producer.produce(name, value=b"v%d" % i, key=b"k%d" % partition,
                                 partition=partition, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(300) == 0 and not failed, failed[:3]
    return records_on(bootstrap, names, partitions) - before


@functools.cache
def admin_for(bootstrap: str) -> AdminClient:
    """The bench's one admin client per cluster, for its polls and topic creation. A new
    client per poll waited 1 or 3 s more than once a run for librdkafka's reconnect timer
    (with its sparse connections) and put those seconds on MirrorMaker's clock."""
    return AdminClient({"bootstrap.servers": bootstrap, **SPARSE_OFF})


def records_on(bootstrap: str, names, partitions: int = PARTITIONS) -> int:
    """Records on ``names`` (the sum of their end offsets, in one request per 2,000)."""
    admin = admin_for(bootstrap)
    wanted = [TopicPartition(n, p) for n in names for p in range(partitions)]
    total = 0
    for start in range(0, len(wanted), 2000):
        deadline = time.monotonic() + 180
        while True:  # a partition a moment old may not be led yet: asked again
            found = admin.list_offsets({tp: OffsetSpec.latest()
                                        for tp in wanted[start:start + 2000]},
                                       request_timeout=60)
            try:
                total += sum(f.result(120).offset for f in found.values())
                break
            except KafkaException as exc:
                assert time.monotonic() < deadline, exc
                time.sleep(1)
    return total


def _proven(result, records: int) -> None:
    """Every record written and proven (a run with nothing new has no proof)."""
    proof = result.validation or {"success": True, "verified_records": 0}
    assert (result.records, proof["success"], proof["verified_records"]) == \
        (records, True, records), (result.records, proof.get("failures"))


def measure(tmp: Path, brokers: dict[str, str], server, write_config, timed_run,
            peak_memory, topics: int = 250, ten_thousand_topics: int = 2500) -> dict:
    """The figures (see the module's note) as ``results.json`` keys."""
    src, url = brokers["src"], server.url
    create_topics(src, ["single"], 1)
    one = write_config(tmp / "one.properties", brokers, "one", "single")

    def one_run() -> float:
        records = trickle(src, ["single"], 8, 1)
        result, seconds = timed_run(one, "one->dst", url)
        _proven(result, records)
        return seconds

    one_run()  # creates the remote topic
    names = [f"many{i}" for i in range(topics)]
    create_topics(src, names)
    config = write_config(tmp / "many.properties", brokers, "many", "many[0-9]+")
    records = trickle(src, names, 1)
    _proven(timed_run(config, "many->dst", url)[0], records)
    # The flow's second run; the figures are its third, as a schedule runs it from then on
    # (Spark's consumers pooled, the server's JIT warm), and the one-partition flow's run
    # just before it.
    records = trickle(src, names, 3)
    result, second_s = timed_run(config, "many->dst", url)
    _proven(result, records)
    one_s = one_run()
    records = trickle(src, names, 3)
    result, many_s = timed_run(config, "many->dst", url)
    _proven(result, records)
    many_proof_s = result.validation["duration_s"]
    idle, idle_s = timed_run(config, "many->dst", url)
    _proven(idle, 0)

    tenk = [f"tenk{i}" for i in range(ten_thousand_topics)]
    started = time.perf_counter()
    create_topics(src, tenk)
    created_s = time.perf_counter() - started
    time.sleep(SOURCE_SETTLE_S)
    records = trickle(src, tenk, 1)
    config = write_config(tmp / "tenk.properties", brokers, "tenk", "tenk[0-9]+")
    with peak_memory(server.pid()) as memory:
        result, ten_s = timed_run(config, "tenk->dst", url)
        _proven(result, records)
        records = trickle(src, tenk, 1)
        result, ten_next_s = timed_run(config, "tenk->dst", url)
    _proven(result, records)

    mm2_s = mm2_trickle(tmp, brokers, write_config, topics)
    mib = 1024 * 1024
    partitions = topics * PARTITIONS
    return {
        "many_partitions": partitions, "many_partitions_records": partitions * 3,
        "few_partitions_8_records_s": round(one_s, 2),
        "many_partitions_s": round(many_s, 2),
        "many_partitions_second_run_s": round(second_s, 2),
        "many_partitions_proof_s": round(many_proof_s, 2),
        "many_partitions_vs_8_records": round(many_s / one_s, 2),
        "per_partition_ms": round((many_s - one_s) / partitions * 1000, 1),
        "many_partitions_idle_s": round(idle_s, 2),
        "ten_thousand_partitions": ten_thousand_topics * PARTITIONS,
        "ten_thousand_partitions_s": round(ten_s, 2),
        "ten_thousand_partitions_next_run_s": round(ten_next_s, 2),
        "ten_thousand_topics_created_on_source_s": round(created_s, 2),
        "ten_thousand_partitions_peak_rss_mib": {
            "jvm_driver_and_executor": round(memory.jvm / mib),
            "largest_python_worker": round(memory.python_worker / mib)},
        "mm2_many_partitions_s": round(mm2_s, 2),
    }


def mm2_trickle(tmp: Path, brokers: dict[str, str], write_config, topics: int) -> float:
    """MM2 started and idle on ``topics`` x 4 empty partitions: seconds from the first of
    3 records per partition produced until every one is on the target."""
    src, dst = brokers["src"], brokers["dst"]
    names = [f"mm2many{i}" for i in range(topics)]
    create_topics(src, names)
    config = write_config(tmp / "mm2-many.properties", brokers, "src", "mm2many[0-9]+")
    remote = {f"src.{n}" for n in names}
    with MirrorMaker(config, tmp / "mm2-many", clusters=("dst",)) as mm2:
        wait_for_remote_topics(mm2, dst, remote, 300)
        time.sleep(10)  # its tasks assigned and polling
        started = time.perf_counter()
        records = trickle(src, names, 3)
        while records_on(dst, remote) < records:  # one ListOffsets request a look
            assert mm2.running() and time.perf_counter() - started < 300, mm2.log_file
            time.sleep(0.05)  # MM2's time is not rounded up by more than this
        seconds = time.perf_counter() - started
    print(f"  MM2 on {topics * PARTITIONS} partitions: {records} records in {seconds:.2f}s",
          file=sys.stderr, flush=True)
    return seconds


def wait_for_remote_topics(mm2: MirrorMaker, bootstrap: str, remote: set[str],
                           timeout: float) -> None:
    """Until MM2 has created every one of ``remote`` on the target (it must keep running)."""
    deadline = time.monotonic() + timeout
    while not remote <= set(admin_for(bootstrap).list_topics(timeout=30).topics):
        assert mm2.running() and time.monotonic() < deadline, mm2.log_file
        time.sleep(0.5)
