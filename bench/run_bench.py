"""Benchmark: mirrorflow against a one-process consume-and-produce loop, same data, one run.

    make bench                      # defaults below
    python bench/run_bench.py --records 1000000 --size 512 --partitions 8

Starts two local Tansu brokers on free ports, fills a source topic, then measures on the
same data: the one-process baseline loop, and `mirrorflow run` (spark-submit, local[*]),
split into the fixed cost of a run with nothing to mirror and the full run, whose
completeness check (part of every run) is timed on its own. Prints a table and writes
bench/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.localcluster import running_clusters
from mirrorflow.run import run_cycle

RESULTS = Path(__file__).resolve().parent / "results.json"


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def fill(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1_000_000, "compression.type": "lz4"})
    value = os.urandom(size // 2).hex().encode()[:size]
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    return time.perf_counter() - started


def baseline_loop(source: str, target: str, topic: str, remote: str, records: int,
                  partitions: int) -> float:
    """What a user would write: consume from the source, produce to the target, one process."""
    create(target, remote, partitions)
    consumer = Consumer({"bootstrap.servers": source, "group.id": "bench-loop",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    producer = Producer({"bootstrap.servers": target, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4", "enable.idempotence": True})
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
    producer.flush(120)
    elapsed = time.perf_counter() - started
    assert done == records, f"baseline moved {done} of {records}"
    consumer.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    mb = args.records * args.size / 1e6
    with tempfile.TemporaryDirectory() as tmp, \
            running_clusters(["src", "dst"], Path(tmp) / "brokers") as brokers:
        src, dst = brokers["src"], brokers["dst"]
        create(src, "bench", args.partitions)
        fill_s = fill(src, "bench", args.records, args.size, args.partitions)
        loop_s = baseline_loop(src, dst, "bench", "loop.bench", args.records, args.partitions)
        config = Path(tmp) / "mm2.properties"
        config.write_text(
            f"clusters = src, dst\nsrc.bootstrap.servers = {src}\n"
            f"dst.bootstrap.servers = {dst}\nsrc->dst.enabled = true\nreplication.factor = 1\n"
            f"src->dst.topics = bench\nsrc->dst.mirrorflow.max.records.per.partition = "
            f"{args.records}\n"
            # A heartbeat would give every run something to mirror; the fixed cost is
            # measured on a run with truly nothing new.
            "emit.heartbeats.enabled = false\n")
        started = time.perf_counter()
        result = run_cycle(config, "src->dst")
        run_s = time.perf_counter() - started
        assert result.records == args.records, result.records
        assert result.validation["verified_records"] == args.records
        check_s = result.validation["duration_s"]
        started = time.perf_counter()
        run_cycle(config, "src->dst")
        noop_s = time.perf_counter() - started
    figures = {
        "cores": os.cpu_count(),
        "records": args.records,
        "record_bytes": args.size,
        "partitions": args.partitions,
        "fill_producer_s": round(fill_s, 2),
        "baseline_loop_s": round(loop_s, 2),
        "baseline_records_per_s": round(args.records / loop_s),
        "baseline_mb_per_s": round(mb / loop_s, 1),
        "mirrorflow_run_s": round(run_s, 2),
        "mirrorflow_records_per_s": round(args.records / run_s),
        "mirrorflow_mb_per_s": round(mb / run_s, 1),
        "fixed_cost_s": round(noop_s, 2),
        "validation_s": round(check_s, 2),
        "validation_s_per_million_records": round(check_s * 1e6 / args.records, 2),
        "mirror_without_validation_s": round(run_s - check_s, 2),
        "ratio_vs_baseline": round(loop_s / run_s, 2),
    }
    print(f"{'measure':<32}{'seconds':>10}{'records/s':>12}{'MB/s':>8}")
    print(f"{'one-process loop (baseline)':<32}{loop_s:>10.2f}{args.records / loop_s:>12.0f}"
          f"{mb / loop_s:>8.1f}")
    print(f"{'mirrorflow run (local[*])':<32}{run_s:>10.2f}{args.records / run_s:>12.0f}"
          f"{mb / run_s:>8.1f}")
    print(f"{'  of which completeness check':<32}{check_s:>10.2f}"
          f"{args.records / check_s:>12.0f}{mb / check_s:>8.1f}")
    print(f"{'mirrorflow run, nothing new':<32}{noop_s:>10.2f}")
    print(f"ratio mirrorflow / baseline: {figures['ratio_vs_baseline']}")
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
