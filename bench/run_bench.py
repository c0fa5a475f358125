"""Benchmark: mirrorflow against the one-process loop and this machine's ceilings, same
data, one run.

    make bench                      # defaults below
    python bench/run_bench.py --records 2000000 --size 512 --partitions 8

Starts local Tansu brokers on free ports, fills a source topic, then measures on the same
data, in this order:

* ceilings: one confluent-kafka process only consuming the source to its end, and one
  only producing the same volume to the target;
* the baseline a user would write: one process consuming the source and producing to the
  target (MirrorMaker 1's loop);
* ``mirrorflow run`` on Spark ``local[*]``: the full data (its completeness check, part of
  every run, timed on its own), then the fixed cost of a run with nothing new and of a
  run with one record per partition (one spark-submit);
* the same run on a Spark standalone cluster of two one-core workers (``spark://``);
* a run of 1 MiB records, with the peak memory of the Spark processes.

Prints a table and writes bench/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.localcluster import running_clusters
from mirrorflow.run import RunResult, run_cycle
from mirrorflow.spark.standalone import standalone_cluster

RESULTS = Path(__file__).resolve().parent / "results.json"
MIB = 1024 * 1024
PRODUCER = {"linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4",
            "message.max.bytes": 4 * MIB}


def create(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the topic unless it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def fill(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Produce ``records`` of ``size`` bytes round-robin; seconds (the produce ceiling)."""
    create(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    value = os.urandom(size // 2 + 1).hex().encode()[:size]
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(300)
    return time.perf_counter() - started


def consume_all(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Consume the topic to its end, doing nothing with the records (the consume ceiling)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ceiling",
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
    consumer = Consumer({"bootstrap.servers": source, "group.id": "bench-loop",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    producer = Producer({"bootstrap.servers": target, **PRODUCER, "enable.idempotence": True})
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
    """Samples the RSS of this process's Spark descendants (JVMs, Python workers) every
    0.1 s; the brokers, also descendants, are left out."""

    def __init__(self) -> None:
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
        me = psutil.Process()
        while not self._stop.wait(0.1):
            jvm = workers = 0
            biggest = 0
            for proc in me.children(recursive=True):
                try:
                    cmd = " ".join(proc.cmdline())
                    rss = proc.memory_info().rss
                except psutil.Error:
                    continue
                if "java" in proc.name() and "spark" in cmd:
                    jvm += rss
                elif "pyspark" in cmd and "python" in proc.name():
                    workers += rss
                    biggest = max(biggest, rss)
            self.jvm, self.total = max(self.jvm, jvm), max(self.total, jvm + workers)
            self.python_worker = max(self.python_worker, biggest)


def timed_run(config: Path, flow: str, master: str | None = None) -> tuple[RunResult, float]:
    started = time.perf_counter()
    result = run_cycle(config, flow, master=master)
    elapsed = time.perf_counter() - started
    print(f"  {flow} on {master or 'local[*]'}: {result.records} records in {elapsed:.2f}s",
          file=sys.stderr, flush=True)
    return result, elapsed


def write_config(path: Path, brokers: dict[str, str], records: int) -> None:
    lines = ["clusters = " + ", ".join(brokers), "replication.factor = 1",
             # A heartbeat would give every run something to mirror; the fixed cost is
             # measured on a run with truly nothing new.
             "emit.heartbeats.enabled = false",
             f"mirrorflow.max.records.per.partition = {records}"]
    lines += [f"{alias}.bootstrap.servers = {bootstrap}" for alias, bootstrap in brokers.items()]
    for target, topic in (("dst", "bench"), ("std", "bench"), ("big", "big")):
        lines += [f"src->{target}.enabled = true", f"src->{target}.topics = {topic}"]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--big-records", type=int, default=512,
                        help="records of 1 MiB for the memory case, over 2 partitions")
    parser.add_argument("--no-standalone", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    n, mb = args.records, args.records * args.size / 1e6
    with tempfile.TemporaryDirectory() as tmp, \
            running_clusters(["src", "dst", "std", "big"], Path(tmp) / "brokers") as brokers:
        src, dst = brokers["src"], brokers["dst"]
        fill(src, "bench", n, args.size, args.partitions)
        consume_s = consume_all(src, "bench", args.partitions, n)
        produce_s = fill(dst, "ceiling.bench", n, args.size, args.partitions)
        loop_s = baseline_loop(src, dst, "bench", "loop.bench", n, args.partitions)
        config = Path(tmp) / "mm2.properties"
        write_config(config, brokers, n)

        full, run_s = timed_run(config, "src->dst")
        assert full.records == n and full.validation["verified_records"] == n, full.records
        check_s = full.validation["duration_s"]
        _, noop_s = timed_run(config, "src->dst")
        fill(src, "bench", args.partitions, args.size, args.partitions)  # one per partition
        small, small_s = timed_run(config, "src->dst")
        assert small.records == args.partitions, small.records

        standalone_s = standalone_check_s = None
        if not args.no_standalone:
            with standalone_cluster(Path(tmp) / "spark", workers=2, cores=1) as master:
                clustered, standalone_s = timed_run(config, "src->std", master)
            assert clustered.records == n + args.partitions, clustered.records
            standalone_check_s = clustered.validation["duration_s"]

        fill(src, "big", args.big_records, MIB, 2)
        with PeakMemory() as memory:
            big, big_s = timed_run(config, "src->big")
        assert big.records == args.big_records, big.records

    rows: list[tuple[str, float, int | None]] = [  # (measure, seconds, records)
        ("consume only (ceiling)", consume_s, n), ("produce only (ceiling)", produce_s, n),
            ("one-process loop (baseline)", loop_s, n),
            ("mirrorflow run, local[*]", run_s, n),
            ("  of which completeness check", check_s, n),
            ("  mirror without the check", run_s - check_s, n),
            ("mirrorflow run, nothing new", noop_s, None),
            (f"mirrorflow run, {args.partitions} records", small_s, None)]
    if standalone_s is not None:
        rows += [("mirrorflow run, standalone 2x1 core", standalone_s, n),
                 ("  of which completeness check", standalone_check_s, n)]
    rows.append((f"mirrorflow run, {args.big_records} x 1 MiB", big_s, None))
    ceiling_s = max(consume_s, produce_s)
    figures = {
        "cores": os.cpu_count(),
        "records": n, "record_bytes": args.size, "partitions": args.partitions,
        "consume_ceiling_s": round(consume_s, 2), "produce_ceiling_s": round(produce_s, 2),
        "baseline_loop_s": round(loop_s, 2),
        "baseline_records_per_s": round(n / loop_s),
        "baseline_mb_per_s": round(mb / loop_s, 1),
        "mirrorflow_run_s": round(run_s, 2),
        "mirrorflow_records_per_s": round(n / run_s),
        "mirrorflow_mb_per_s": round(mb / run_s, 1),
        "validation_s": round(check_s, 2),
        "validation_s_per_million_records": round(check_s * 1e6 / n, 2),
        "mirror_without_validation_s": round(run_s - check_s, 2),
        "fixed_cost_s": round(noop_s, 2),
        "fixed_cost_with_spark_job_s": round(small_s, 2),
        "ratio_vs_baseline": round(loop_s / run_s, 2),
        "ratio_vs_baseline_without_check": round(loop_s / (run_s - check_s), 2),
        "ratio_vs_ceiling": round(ceiling_s / run_s, 2),
        "ratio_vs_ceiling_without_check": round(ceiling_s / (run_s - check_s), 2),
        "standalone_workers": None if standalone_s is None else "2 x 1 core",
        "standalone_run_s": None if standalone_s is None else round(standalone_s, 2),
        "standalone_validation_s": (None if standalone_check_s is None
                                    else round(standalone_check_s, 2)),
        "big_records": args.big_records, "big_record_bytes": MIB,
        "big_partition_mib": round(args.big_records / 2),
        "big_run_s": round(big_s, 2),
        "big_peak_rss_mib": {"jvm": round(memory.jvm / MIB), "largest_python_worker":
                             round(memory.python_worker / MIB),
                             "spark_total": round(memory.total / MIB)},
    }
    print(f"{'measure':<38}{'seconds':>9}{'records/s':>11}{'MB/s':>8}")
    for name, seconds, count in rows:
        rate = (f"{count / seconds:>11.0f}{count * args.size / 1e6 / seconds:>8.1f}"
                if count else "")
        print(f"{name:<38}{seconds:>9.2f}{rate}")
    print(f"peak RSS, 1 MiB records ({figures['big_partition_mib']} MiB per partition): "
          + ", ".join(f"{k} {v} MiB" for k, v in figures["big_peak_rss_mib"].items()))
    for key in ("ratio_vs_baseline", "ratio_vs_baseline_without_check", "ratio_vs_ceiling",
                "ratio_vs_ceiling_without_check"):
        print(f"{key}: {figures[key]}")
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
