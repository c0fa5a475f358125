"""Benchmark: mirrorflow against MirrorMaker 2, the one-process loop and this machine's
ceilings, on the same two Apache Kafka brokers and the same data, in one run.

    make bench                      # defaults below
    python bench/run_bench.py --records 2000000 --size 512 --partitions 8

Starts two local KRaft brokers (``src``, ``dst``) on free ports, fills a source topic,
then measures, in this order:

* ceilings: one confluent-kafka process only consuming the source to its end, and one
  only producing the same volume to the target;
* the one-process loop a user would write (consume the source, produce to the target);
* MirrorMaker 2 in dedicated mode, started and idle before its records arrive, with its
  defaults and with ``tasks.max`` = the partition count: seconds from the first record
  produced until every record is on the target, for a first topic (MM2 cold) and, each
  time it is idle again, for the next ones, each filled like the source: the third is
  the warm figure;
* mirrorflow on a Spark Connect server: its first run over the backlog (cold), a second,
  then the measured run (warm), each a flow of its own over the same backlog: seconds to
  mirror **and prove** it (the proof timed on its own), then the fixed cost of a run of
  one record per partition; and the same with spark-submit (``local[*]``, a new JVM per
  run);
* a run of 1 MiB records on the Connect server, with the peak memory of its processes;
* many partitions with a trickle in each, against MM2 too (:mod:`many_partitions`);
* the schema registry transfer's overhead on a backlog of Avro values
  (:mod:`schema_transfer`).

Prints a table and writes bench/results.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import many_partitions  # beside this file: the script's own directory is on sys.path
import psutil
import schema_transfer
from bench_figures import MIB, Measured, summarize
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from process_cpu import MachineCpu

from mirrorflow.dev import connect_server
from mirrorflow.dev.local_mm2 import MirrorMaker
from mirrorflow.dev.localcluster import free_port, running_clusters
from mirrorflow.kafka import clients
from mirrorflow.kafka.clients import SPARSE_OFF
from mirrorflow.run import RunResult, run_cycle
from mirrorflow.spark.session import is_connect

RESULTS = Path(__file__).resolve().parent / "results.json"
# Passes over the same volume per long-lived contender (MM2, the Connect server): the
# first is the cold figure, the last the warm one. The JIT keeps compiling hot paths past
# a first pass: a Connect server's second, third and fourth runs of 2,000,000 records took
# 11.0, 9.2 and 9.5 s in one sitting, 11.6, 11.2, 10.4 s in another.
PASSES = 3
PRODUCER = {"linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4",
            "message.max.bytes": 4 * MIB}


def create(bootstrap: str, topic: str, partitions: int,
           config: dict[str, str] | None = None) -> None:
    """Create the topic unless it exists."""
    admin = many_partitions.admin_for(bootstrap)
    if topic not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(30)


def fill(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Produce ``records`` of ``size`` bytes round-robin; seconds (the produce ceiling)."""
    create(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, **SPARSE_OFF, **PRODUCER})
    started = time.perf_counter()
    produce_all(producer, topic, records, size, partitions)
    return time.perf_counter() - started


def produce_all(producer: Producer, topic: str, records: int, size: int,
                partitions: int) -> None:
    """``records`` of ``size`` random bytes, keyed by their number, round-robin over the
    partitions, all acknowledged."""
    value = os.urandom(size // 2 + 1).hex().encode()[:size]
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(300)


def consume_all(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Consume the topic to its end, doing nothing with the records (the consume ceiling)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, **SPARSE_OFF, "group.id": "bench-ceiling",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    started = time.perf_counter()
    done = eof = 0
    while eof < partitions:
        for msg in consumer.consume(10_000, 0.2):
            if msg.error() is None:
                done += 1
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                eof += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    assert done == records, f"the consume ceiling read {done} of {records}"
    return elapsed


def baseline_loop(source: str, target: str, topic: str, remote: str, records: int,
                  partitions: int) -> float:
    """What a user would write: consume from the source, produce to the target, one process."""
    create(target, remote, partitions)
    consumer = Consumer({"bootstrap.servers": source, **SPARSE_OFF, "group.id": "bench-loop",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    producer = Producer({"bootstrap.servers": target, **SPARSE_OFF, **PRODUCER,
                         "enable.idempotence": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    started = time.perf_counter()
    done = eof = 0
    while eof < partitions:
        for msg in consumer.consume(10_000, 0.2):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof += 1
                continue
            while True:
                try:
                    producer.produce(remote, msg.value(), msg.key(), partition=msg.partition(),
                                     timestamp=msg.timestamp()[1], headers=msg.headers())
                    break
                except BufferError:
                    producer.poll(0.05)
            done += 1
    producer.flush(300)
    elapsed = time.perf_counter() - started
    assert done == records, f"baseline moved {done} of {records}"
    consumer.close()
    return elapsed


class PeakMemory:
    """Samples the RSS of the Spark processes under ``root`` (its JVM and Python workers)
    every 0.1 s."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.jvm = self.python_worker = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        root = psutil.Process(self.root)
        while not self._stop.wait(0.1):
            jvm = workers = 0
            biggest = 0
            for proc in [root, *root.children(recursive=True)]:
                try:  # a process may end between the listing and these reads
                    cmd, name = " ".join(proc.cmdline()), proc.name()
                    rss = proc.memory_info().rss
                except psutil.Error:
                    continue
                if "java" in name and "spark" in cmd:
                    jvm += rss
                elif "pyspark" in cmd and "python" in name:
                    workers += rss
                    biggest = max(biggest, rss)
            self.jvm, self.total = max(self.jvm, jvm), max(self.total, jvm + workers)
            self.python_worker = max(self.python_worker, biggest)


def timed_run(config: Path, flow: str, master: str) -> tuple[RunResult, float]:
    started = time.perf_counter()
    result = run_cycle(config, flow, master=master)
    elapsed = time.perf_counter() - started
    print(f"  {flow} on {master}: {result.records} records in {elapsed:.2f}s",
          file=sys.stderr, flush=True)
    return result, elapsed


def write_config(path: Path, brokers: dict[str, str], source: str, topics: str,
                 extra: str = "") -> Path:
    """One flow ``source``->dst over ``topics`` (``source`` names the src broker: each
    measurement has an alias of its own, so its remote topics and offset store are its
    own); MM2 and mirrorflow read the same kind of file."""
    path.write_text("\n".join([
        f"clusters = {source}, dst", f"{source}.bootstrap.servers = {brokers['src']}",
        f"dst.bootstrap.servers = {brokers['dst']}",
        f"{source}->dst.enabled = true", f"{source}->dst.topics = {topics}",
        "replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1", "heartbeats.topic.replication.factor = 1",
        "config.storage.replication.factor = 1", "offset.storage.replication.factor = 1",
        "status.storage.replication.factor = 1",
        # Data only: a heartbeat would give every run something to mirror.
        "emit.heartbeats.enabled = false", "emit.checkpoints.enabled = false",
        # The target's compression tuned MM2 is given (MM2_TUNED); both default to none.
        "dst.producer.compression.type = lz4",
        "sync.topic.acls.enabled = false", "refresh.topics.interval.seconds = 1",
        "mirrorflow.max.records.per.partition = 100000000", extra]) + "\n")
    return path


# MM2 as a user could run it. Every setting reads the source read_committed, so that a
# backlog produced in one open transaction becomes visible to it at once, at the commit
# (its clock starts there, on a topic it has been polling, warm and idle).
MM2_BASE = "src.consumer.isolation.level = read_committed"
# What a performance guide sets (one task per partition, large fetches and batches, the
# target written with mirrorflow's compression, lz4).
MM2_TUNED = """tasks.max = {partitions}
src.consumer.fetch.max.bytes = 67108864
src.consumer.max.partition.fetch.bytes = 8388608
src.consumer.max.poll.records = 10000
dst.producer.batch.size = 1048576
dst.producer.linger.ms = 20
dst.producer.compression.type = lz4
dst.producer.max.request.size = 8388608
dst.producer.buffer.memory = 268435456"""
# KIP-618 on the workers of both clusters, as MirrorConnectorsIntegrationExactlyOnceTest.
MM2_EOS = MM2_TUNED + """
src.exactly.once.source.support = enabled
dst.exactly.once.source.support = enabled"""
MM2_SETTINGS = {"shipped": "", "tuned": MM2_TUNED, "eos": MM2_EOS}


def open_backlog(bootstrap: str, topic: str, records: int, size: int,
                 partitions: int) -> Producer:
    """``records`` produced to ``topic`` in one transaction left open: a read_committed
    reader sees none of them until :meth:`Producer.commit_transaction`."""
    create(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, **SPARSE_OFF, **PRODUCER,
                         "transactional.id": f"bench-backlog-{topic}",
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    produce_all(producer, topic, records, size, partitions)
    return producer


class SourceOffsets:
    """MM2's committed source offsets (its offsets topic on the target, read_committed):
    with exactly-once they are written in the transaction of the records they follow, so
    a partition's offset at its last upstream offset means all its records are visible."""

    def __init__(self, bootstrap: str, source: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, **SPARSE_OFF,
                                  "group.id": "bench-offsets", "isolation.level": "read_committed",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.subscribe([f"mm2-offsets.{source}.internal"])
        self.at: dict[tuple[str, int], int] = {}

    def done(self, topic: str, last: dict[int, int]) -> bool:
        # As each record comes (consume() would wait out its timeout unless 10,000 came:
        # up to 100 ms added to MM2's time).
        for msg in clients.take(self.consumer, 0.1):
            if msg.error() is None and msg.key() and msg.value():
                key = json.loads(msg.key())
                if key[0] == "MirrorSourceConnector":
                    part = key[1]
                    self.at[(part["topic"], part["partition"])] = json.loads(msg.value())["offset"]
        return all(self.at.get((topic, p), -1) >= end for p, end in last.items())

    def close(self) -> None:
        self.consumer.close()


def mm2_run(tmp: Path, brokers: dict[str, str], topic: str, n: int, size: int,
            partitions: int, setting: str) -> dict[str, float]:
    """MM2 (one of :data:`MM2_SETTINGS`) started and idle, polling empty topics; for each
    topic in turn a backlog of ``n`` is produced in an open transaction and committed:
    seconds from the commit until the first record is on the target and until all are
    (exactly-once: until MM2's committed source offsets reach the backlog's end). The first
    topic is the cold figure, the last (:data:`PASSES`) the warm one."""
    src, dst = brokers["src"], brokers["dst"]
    topics = [f"{topic}-cold", *[f"{topic}-warmup{i}" for i in range(PASSES - 2)], topic]
    for name in topics:
        create(src, name, partitions)
    extra = "\n".join([MM2_BASE, MM2_SETTINGS[setting].format(partitions=partitions)])
    config = write_config(tmp / f"mm2-{topic}.properties", brokers, "src", ", ".join(topics),
                          extra)
    last = {p: n // partitions - 1 + (p < n % partitions) for p in range(partitions)}
    passes, firsts, cpus = [], [], []
    with MirrorMaker(config, tmp / f"mm2-{topic}", clusters=("dst",)) as mm2:
        many_partitions.wait_for_remote_topics(mm2, dst, {f"src.{t}" for t in topics}, 120)
        offsets = SourceOffsets(dst, "src") if setting == "eos" else None
        for name in topics:
            backlog = open_backlog(src, name, n, size, partitions)
            time.sleep(5)  # its tasks assigned and polling
            with MachineCpu() as cpu:
                started = time.perf_counter()
                backlog.commit_transaction(60)
                first = None
                done, moved = 0, time.monotonic()
                while True:
                    now = many_partitions.records_on(dst, [f"src.{name}"], partitions)
                    if now and first is None:
                        first = time.perf_counter() - started
                    if now > done:
                        done, moved = now, time.monotonic()
                    if (offsets.done(name, last) if offsets else done >= n):
                        break
                    assert mm2.running() and time.monotonic() - moved < 120, \
                        f"MM2 stopped moving records at {done} of {n}; see {mm2.log_file}"
                    time.sleep(0.1)
                passes.append(time.perf_counter() - started)
            firsts.append(first)
            cpus.append(cpu)
        if offsets:
            offsets.close()
    print(f"  MM2 ({setting}): {n} records in " + ", ".join(f"{p:.2f}s" for p in passes)
          + f"; first record after {firsts[-1]:.2f}s", file=sys.stderr, flush=True)
    return {"cold": passes[0], "warm": passes[-1], "first": firsts[-1], "cpu": cpus[-1]}


def mirrorflow_runs(tmp: Path, brokers: dict[str, str], alias: str, master: str, n: int,
                    size: int, partitions: int
                    ) -> tuple[float, float, float, float, float | None, MachineCpu]:
    """(seconds to mirror and prove the backlog of ``n``, of which the proof, a run of one
    record per partition, of which the proof, on a Connect server the same small run as a
    fresh ``mirrorflow run`` process: its whole life, imports to exit; and what the
    backlog's run cost the machine's CPU)."""
    config = write_config(tmp / f"{alias}.properties", brokers, alias, "bench")
    flow = f"{alias}->dst"
    with MachineCpu() as cpu:
        full, run_s = timed_run(config, flow, master)
    assert full.records == n and full.validation["verified_records"] == n, full.records
    fill(brokers["src"], "bench", partitions, size, partitions)
    small, small_s = timed_run(config, flow, master)
    assert small.records == partitions, small.records
    process_s = None
    if is_connect(master):
        fill(brokers["src"], "bench", partitions, size, partitions)
        started = time.perf_counter()
        cli = subprocess.run([sys.executable, "-m", "mirrorflow.cli", "run", str(config),
                              "--flow", flow, "--master", master, "--json"],
                             capture_output=True, text=True, check=True)
        process_s = time.perf_counter() - started
        assert json.loads(cli.stdout)["records"] == partitions, cli.stdout
        print(f"  {flow} on {master}, a fresh mirrorflow run process: {partitions} records "
              f"in {process_s:.2f}s", file=sys.stderr, flush=True)
    return (run_s, full.validation["duration_s"], small_s, small.validation["duration_s"],
            process_s, cpu)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--big-records", type=int, default=512,
                        help="records of 1 MiB for the memory case, over 2 partitions")
    parser.add_argument("--many-topics", type=int, default=250,
                        help="topics of 4 partitions for the trickle case")
    parser.add_argument("--ten-thousand-topics", type=int, default=2500,
                        help="topics of 4 partitions for the largest flow")
    parser.add_argument("--only-many", action="store_true",
                        help="measure only the many-partitions cases")
    parser.add_argument("--only-schemas", action="store_true",
                        help="measure only the schema transfer's overhead")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.only_many or args.only_schemas:
        return only(args, many_figures if args.only_many else schema_figures)
    n, parts = args.records, args.partitions
    with tempfile.TemporaryDirectory() as tmp_dir, \
            running_clusters(["src", "dst"], Path(tmp_dir) / "brokers") as brokers:
        tmp = Path(tmp_dir)
        src, dst = brokers["src"], brokers["dst"]
        fill(src, "bench", n, args.size, parts)
        with MachineCpu() as consume_cpu:
            consume_s = consume_all(src, "bench", parts, n)
        with MachineCpu() as produce_cpu:
            produce_s = fill(dst, "ceiling.bench", n, args.size, parts)
        with MachineCpu() as loop_cpu:
            loop_s = baseline_loop(src, dst, "bench", "loop.bench", n, parts)
        mm2 = {setting: mm2_run(tmp, brokers, f"mm2{setting}", n, args.size, parts, setting)
               for setting in MM2_SETTINGS}

        with a_connect_server(tmp / "connect") as server:
            # The server's first run (its JIT compiles Kafka's and Spark's hot paths as it
            # goes), then as many as MM2 had before its measured pass, then the measured
            # one: each a flow of its own over the same backlog.
            earlier = []
            for alias in ["cold", *[f"warmup{i}" for i in range(PASSES - 2)]]:
                config = write_config(tmp / f"{alias}.properties", brokers, alias, "bench")
                result, seconds = timed_run(config, f"{alias}->dst", server.url)
                assert result.records == n, result.records
                earlier.append(seconds)
            connect_cold_s = earlier[0]
            connect_s, connect_check_s, connect_small_s, small_check_s, process_s, \
                connect_cpu = mirrorflow_runs(tmp, brokers, "connect", server.url, n,
                                              args.size, parts)
            # Records of 1 MiB exceed Kafka's default max.message.bytes (1 MiB + 12 bytes);
            # the remote topic gets the source's limit by config sync.
            create(src, "big", 2, {"max.message.bytes": str(4 * MIB)})
            fill(src, "big", args.big_records, MIB, 2)
            with PeakMemory(server.pid()) as memory:
                big, big_s = timed_run(write_config(tmp / "big.properties", brokers, "big",
                                                    "big"), "big->dst", server.url)
            assert big.records == args.big_records, big.records
            many = many_figures(tmp, brokers, server, args)
        # The backlog and the Connect flow's two small runs' records (in process, and a
        # fresh process). Before the schema case, whose ten runs of the backlog's size on
        # their own topic slowed the spark-submit run after them from 16 to 33 s.
        submitted = n + 2 * parts
        submit_s, submit_check_s, submit_small_s, *_ = mirrorflow_runs(
            tmp, brokers, "submit", "local[*]", submitted, args.size, parts)
        with a_connect_server(tmp / "schemas") as server:
            schemas = schema_figures(tmp, brokers, server, args)

    figures = summarize(Measured(
        args, consume_s, produce_s, loop_s, consume_cpu, produce_cpu, loop_cpu, mm2,
        connect_cold_s, connect_s, connect_check_s, connect_small_s, small_check_s, process_s,
        connect_cpu, submitted, submit_s, submit_check_s, submit_small_s, big_s, memory,
        many, schemas))
    print_figures({**many, **schemas})
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def many_figures(tmp: Path, brokers: dict[str, str], server, args) -> dict:
    return many_partitions.measure(tmp, brokers, server, write_config, timed_run, PeakMemory,
                                   args.many_topics, args.ten_thousand_topics)


def schema_figures(tmp: Path, brokers: dict[str, str], server, args) -> dict:
    return schema_transfer.measure(tmp, brokers, server, write_config, timed_run, create,
                                   args.records, args.size, args.partitions, PRODUCER)


def print_figures(found: dict) -> None:
    for key, value in found.items():
        print(f"{key}: {value}")


@contextlib.contextmanager
def a_connect_server(state_dir: Path) -> Iterator[connect_server.ConnectServer]:
    """A Spark Connect server of its own (state in ``state_dir``), stopped on the way out."""
    server = connect_server.ConnectServer("127.0.0.1", free_port(), state_dir)
    connect_server.start(server)
    try:
        yield server
    finally:
        connect_server.stop(server)


def only(args, measure) -> int:
    """One group of cases alone (``measure``: :func:`many_figures` or
    :func:`schema_figures`), merged into an existing results.json."""
    with tempfile.TemporaryDirectory() as tmp_dir, \
            running_clusters(["src", "dst"], Path(tmp_dir) / "brokers") as brokers, \
            a_connect_server(Path(tmp_dir) / "connect") as server:
        found = measure(Path(tmp_dir), brokers, server, args)
    print_figures(found)
    figures = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    RESULTS.write_text(json.dumps({**figures, **found}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
