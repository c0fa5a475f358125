"""The benchmark's figures (``bench/run_bench.py``): from what one run measured, the
table it prints and the keys of bench/results.json, ratios against MM2, the one-process
loop and the machine's ceilings included (docs/benchmark.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from process_cpu import MachineCpu

MIB = 1024 * 1024


@dataclass
class Measured:
    """What one ``make bench`` measured: seconds, CPU and memory by contender, with the
    run's parameters (``args``: records, size, partitions, big records)."""

    args: Any
    consume_s: float
    produce_s: float
    loop_s: float
    consume_cpu: MachineCpu
    produce_cpu: MachineCpu
    loop_cpu: MachineCpu
    mm2: dict[str, dict]  # by setting: cold, warm, first-record seconds and cpu
    connect_cold_s: float
    connect_s: float
    connect_check_s: float
    connect_small_s: float
    small_check_s: float
    process_s: float | None
    connect_cpu: MachineCpu
    submitted: int
    submit_s: float
    submit_check_s: float
    submit_small_s: float
    big_s: float
    memory: Any  # run_bench.PeakMemory of the 1 MiB run
    many: dict
    schemas: dict


def summarize(m: Measured) -> dict:
    """Print the table of ``m`` and return the figures bench/results.json holds."""
    args, mm2, many, schemas = m.args, m.mm2, m.many, m.schemas
    n, parts = args.records, args.partitions
    mb = n * args.size / 1e6
    # The best at-least-once setting against mirrorflow; exactly-once against exactly-once.
    best = min(("shipped", "tuned"), key=lambda setting: mm2[setting]["warm"])
    mm2_s = mm2[best]["warm"]
    mm2_cold_s = min(mm2["shipped"]["cold"], mm2["tuned"]["cold"])
    rows: list[tuple[str, float, int | None]] = [  # (measure, seconds, records)
        ("consume only (ceiling)", m.consume_s, n), ("produce only (ceiling)", m.produce_s, n),
        ("one-process loop (baseline)", m.loop_s, n),
        *[(f"MM2 {setting}, {label}", mm2[setting][when], n if when != "first" else None)
          for setting in mm2 for when, label in (
              ("cold", "first topic"), ("warm", "warm"), ("first", "warm, to its first record"))],
        ("mirrorflow, Spark Connect, first run", m.connect_cold_s, n),
        ("mirrorflow, Spark Connect (warm)", m.connect_s, n),
        ("  of which completeness check", m.connect_check_s, n),
        (f"mirrorflow, Spark Connect, {parts} records", m.connect_small_s, None),
        (f"mirrorflow, Spark Connect, {parts} records, a fresh process", m.process_s, None),
        ("mirrorflow, spark-submit local[*]", m.submit_s, m.submitted),
        ("  of which completeness check", m.submit_check_s, m.submitted),
        (f"mirrorflow, spark-submit, {parts} records", m.submit_small_s, None),
        (f"mirrorflow, Connect, {args.big_records} x 1 MiB", m.big_s, None)]
    past_fixed = n / max(m.connect_s - m.connect_small_s, 1e-9)
    # What each warm pass over the backlog cost the whole machine (brokers included), and
    # how busy it kept the cores: a contender near 1.0 is CPU-bound, so its time can only
    # fall with its CPU-seconds, and the CPU-seconds bound the ratios (docs/benchmark.md).
    cpu = {"consume_ceiling": m.consume_cpu, "produce_ceiling": m.produce_cpu,
           "baseline_loop": m.loop_cpu,
           **{f"mm2_{setting}": mm2[setting]["cpu"] for setting in mm2},
           "mirrorflow_connect": m.connect_cpu}
    # The same without either run's proof: the mirror's own pace, against the loop's.
    mirror_past_fixed = n / max((m.connect_s - m.connect_check_s)
                                - (m.connect_small_s - m.small_check_s), 1e-9)
    figures = {
        "cores": os.cpu_count(),
        "records": n, "record_bytes": args.size, "partitions": parts,
        "consume_ceiling_s": round(m.consume_s, 2), "produce_ceiling_s": round(m.produce_s, 2),
        "baseline_loop_s": round(m.loop_s, 2),
        "baseline_records_per_s": round(n / m.loop_s),
        "baseline_mb_per_s": round(mb / m.loop_s, 1),
        **{f"mm2_{setting}_{key}": round(mm2[setting][when], 2) for setting in mm2
           for key, when in (("s", "warm"), ("cold_s", "cold"), ("first_record_s", "first"))},
        # the older keys: as shipped, and tuned (tasks.max = partitions and more)
        "mm2_default_s": round(mm2["shipped"]["warm"], 2),
        "mm2_tasks_s": round(mm2["tuned"]["warm"], 2),
        "mm2_default_cold_s": round(mm2["shipped"]["cold"], 2),
        "mm2_tasks_cold_s": round(mm2["tuned"]["cold"], 2),
        "mm2_s": round(mm2_s, 2), "mm2_records_per_s": round(n / mm2_s),
        "mm2_cold_s": round(mm2_cold_s, 2),
        "mirrorflow_connect_s": round(m.connect_s, 2),
        "mirrorflow_connect_cold_s": round(m.connect_cold_s, 2),
        "mirrorflow_submit_s": round(m.submit_s, 2),
        "mirrorflow_run_s": round(m.connect_s, 2),
        "mirrorflow_records_per_s": round(n / m.connect_s),
        "mirrorflow_mb_per_s": round(mb / m.connect_s, 1),
        "mirrorflow_records_per_s_past_fixed_cost": round(past_fixed),
        "mirrorflow_mirror_records_per_s_past_fixed_cost": round(mirror_past_fixed),
        "validation_s": round(m.connect_check_s, 2),
        "validation_share": round(m.connect_check_s / m.connect_s, 3),
        "validation_s_per_million_records": round(m.connect_check_s * 1e6 / n, 2),
        "submit_validation_s": round(m.submit_check_s, 2),
        "mirror_without_validation_s": round(m.connect_s - m.connect_check_s, 2),
        "fixed_cost_connect_s": round(m.connect_small_s, 2),
        "fixed_cost_cli_process_s": round(m.process_s, 2),
        "fixed_cost_submit_s": round(m.submit_small_s, 2),
        "fixed_cost_with_spark_job_s": round(m.submit_small_s, 2),
        "ratio_vs_mm2": round(mm2_s / m.connect_s, 2),
        "ratio_vs_mm2_cold": round(mm2_cold_s / m.connect_cold_s, 2),
        "ratio_vs_mm2_eos": round(mm2["eos"]["warm"] / m.connect_s, 2),
        "ratio_vs_mm2_eos_cold": round(mm2["eos"]["cold"] / m.connect_cold_s, 2),
        # The mirror alone (the warm run without its proof) against the better MM2.
        "mirror_vs_mm2": round(mm2_s / (m.connect_s - m.connect_check_s), 2),
        "ratio_vs_baseline": round(m.loop_s / m.connect_s, 2),
        "ratio_vs_ceiling": round(max(m.consume_s, m.produce_s) / m.connect_s, 2),
        "cpu_s": {name: round(c.seconds, 1) for name, c in cpu.items()},
        "cpu_busy_share": {name: round(c.share, 2) for name, c in cpu.items()},
        "ratio_vs_mm2_cpu": round(mm2[best]["cpu"].seconds / m.connect_cpu.seconds, 2),
        "ratio_vs_mm2_eos_cpu": round(mm2["eos"]["cpu"].seconds / m.connect_cpu.seconds, 2),
        "big_records": args.big_records, "big_record_bytes": MIB,
        "big_partition_mib": round(args.big_records / 2),
        "big_run_s": round(m.big_s, 2),
        "big_peak_rss_mib": {"jvm": round(m.memory.jvm / MIB), "largest_python_worker":
                             round(m.memory.python_worker / MIB),
                             "spark_total": round(m.memory.total / MIB)},
        **many,
        **schemas,
    }
    print(f"{'measure':<42}{'seconds':>9}{'records/s':>11}{'MB/s':>8}")
    for name, seconds, count in rows:
        rate = (f"{count / seconds:>11.0f}{count * args.size / 1e6 / seconds:>8.1f}"
                if count else "")
        print(f"{name:<42}{seconds:>9.2f}{rate}")
    print(f"peak RSS, 1 MiB records ({figures['big_partition_mib']} MiB per partition): "
          + ", ".join(f"{k} {v} MiB" for k, v in figures["big_peak_rss_mib"].items()))
    for key in ("ratio_vs_mm2", "ratio_vs_mm2_cold", "ratio_vs_mm2_eos",
                "ratio_vs_mm2_eos_cold", "mirror_vs_mm2", "ratio_vs_baseline", "ratio_vs_ceiling",
                "cpu_s", "cpu_busy_share", "ratio_vs_mm2_cpu", "ratio_vs_mm2_eos_cpu",
                "validation_share", "fixed_cost_connect_s", "fixed_cost_cli_process_s",
                "fixed_cost_submit_s",
                "baseline_records_per_s", "mirrorflow_records_per_s_past_fixed_cost",
                "mirrorflow_mirror_records_per_s_past_fixed_cost"):
        print(f"{key}: {figures[key]}")
    return figures
