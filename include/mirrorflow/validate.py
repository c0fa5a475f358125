"""Completeness proof of one run: the target holds exactly the run's source records.

Runs inside a Spark job, after the mirror wrote a plan's ranges and before the positions are
committed, over exactly the plan's ranges. A mismatch therefore leaves the plan pending and
the positions where they were: the next attempt resumes the same plan (writing only what is
missing at its end) and checks again, and no checkpoint or group offset sync ever points a
consumer at a target that failed the check.

How a range is compared (the target records carry no upstream offset, so they are aligned
by position): both sides are read with ``kafka_range`` in one scan, every record is reduced
to a 64-bit digest of key, value, headers and timestamp (nullness included), and numbered
in offset order (its position in its input partition plus the records of the range's
earlier partitions: no sort). Per range:

* counts: source records (the log, so retention gaps recorded by the plan and compaction
  holes are not counted) against the records the mirror read and the target records from
  the range's ``target_start`` to the target's end now;
* order: an order-sensitive digest (XOR of digests mixed with their position) per side.
  Equal counts and digests mean the same records in the same order (up to a 64-bit hash
  collision): the range is proven by one aggregate per side. Only a range whose sides
  differ is aligned record by record (a join on position) to find
* the first position where the two sides differ, as source and target offsets, and the
  multiset: records missing on the target, duplicated on it, and foreign to the source
  (produced directly into the remote topic, or altered);
* offset syncs: the pairs this run emits map the range's first and last records exactly.

Checkpoints already on the target must not be ahead of their group's committed offset on
the source. The results are checked by a Great Expectations suite (ephemeral context,
pandas data source for the one-row-per-range table, expected values as parameters)
rendered as Data Docs; users add their own suites (JSON files in the expectations
directory) over the mirrored records, on Spark.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mirrorflow import reports
from mirrorflow.config import FlowConfig, MirrorConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.plan import Plan, Range
from mirrorflow.watermarks import probe_watermarks

log = logging.getLogger(__name__)

RANGE_KEYS = ["topic", "partition"]
ZERO_COUNTS = ("missing", "duplicates", "foreign", "misplaced")
DEFAULT_EXPECTATIONS_DIR = Path(__file__).resolve().parents[1] / "expectations"


class ValidationError(MirrorflowError):
    """The target does not hold exactly the run's records; the message names where."""


@dataclass
class RangeVerdict:
    """One planned range, compared."""

    topic: str
    partition: int
    remote_topic: str
    source_start: int
    source_end: int
    target_start: int
    planned: int
    verified: bool = False
    source_records: int = 0
    target_records: int = 0
    source_digest: str = ""
    target_digest: str = ""
    missing: int = 0
    duplicates: int = 0
    foreign: int = 0
    misplaced: int = 0
    first_bad_source_offset: int | None = None
    first_bad_target_offset: int | None = None
    offset_syncs_cover: bool = True
    lag: int | None = None

    @property
    def digest_match(self) -> bool:
        return self.source_digest == self.target_digest

    def problems(self) -> list[str]:
        """Plain-language findings, naming topic, partition and the first bad offset."""
        if not self.verified:
            return []
        where = f"{self.topic}[{self.partition}] -> {self.remote_topic}[{self.partition}]"
        found = []
        if self.source_records != self.planned:
            found.append(f"{where}: the source holds {self.source_records} records in offsets "
                         f"{self.source_start}..{self.source_end - 1}, the mirror read "
                         f"{self.planned}")
        if self.target_records != self.source_records:
            found.append(f"{where}: {self.target_records} records on the target from offset "
                         f"{self.target_start}, {self.source_records} on the source")
        for name, meaning in (("missing", "source records missing on the target"),
                              ("duplicates", "records duplicated on the target"),
                              ("foreign", "target records that are not source records "
                                          "(altered, or produced directly)")):
            if getattr(self, name):
                found.append(f"{where}: {getattr(self, name)} {meaning}")
        if self.first_bad_source_offset is not None or self.first_bad_target_offset is not None:
            found.append(f"{where}: first mismatch at source offset "
                         f"{self.first_bad_source_offset}, target offset "
                         f"{self.first_bad_target_offset}")
        if not self.offset_syncs_cover:
            found.append(f"{where}: the offset syncs do not map the range's first and last "
                         "records exactly")
        return found


@dataclass
class CheckpointVerdict:
    """A checkpoint on the target against its group's committed offset on the source."""

    group: str
    topic: str
    partition: int
    checkpoint_upstream_offset: int
    group_offset: int

    def problem(self) -> str | None:
        if self.checkpoint_upstream_offset <= self.group_offset:
            return None
        return (f"checkpoint of group {self.group!r} for {self.topic}[{self.partition}] is at "
                f"upstream offset {self.checkpoint_upstream_offset}, ahead of the group's "
                f"committed offset {self.group_offset} on the source")


@dataclass
class Validation:
    """The verdict of one run, stored with its plan and written to the reports."""

    flow: str
    run_id: str
    plan_id: str
    success: bool
    fraction: float
    verified_records: int = 0
    planned_records: int = 0
    ranges: list[RangeVerdict] = field(default_factory=list)
    checkpoints: list[CheckpointVerdict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    expectations: dict[str, bool] = field(default_factory=dict)
    data_docs: str | None = None
    duration_s: float = 0.0

    @property
    def verified_fraction(self) -> float:
        return 1.0 if not self.planned_records else self.verified_records / self.planned_records

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["verified_fraction"] = round(self.verified_fraction, 6)
        for verdict, row in zip(self.ranges, doc["ranges"], strict=True):
            row["digest_match"] = verdict.digest_match
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> Validation:
        doc = dict(doc)
        doc.pop("verified_fraction", None)
        ranges = [RangeVerdict(**{k: v for k, v in r.items() if k != "digest_match"})
                  for r in doc.pop("ranges", [])]
        cps = [CheckpointVerdict(**c) for c in doc.pop("checkpoints", [])]
        return cls(**doc, ranges=ranges, checkpoints=cps)

    def error(self) -> ValidationError:
        lines = "\n".join(f"  - {f}" for f in self.failures)
        return ValidationError(
            f"flow {self.flow}: run {self.run_id} failed its completeness check; positions "
            f"were not committed, plan {self.plan_id} stays pending:\n{lines}")


# --------------------------------------------------------------------------- choosing ranges


def sample(plan: Plan, fraction: float) -> list[Range]:
    """The ranges to verify: all of them at 1.0, else a share chosen by a hash of the plan
    and the partition (stable across attempts of the same plan), at least one."""
    if fraction >= 1.0 or not plan.ranges:
        return list(plan.ranges)
    wanted = max(1, math.ceil(fraction * len(plan.ranges)))

    def rank(r: Range) -> str:
        return hashlib.sha256(f"{plan.plan_id}/{r.topic}/{r.partition}".encode()).hexdigest()

    return sorted(sorted(plan.ranges, key=rank)[:wanted], key=lambda r: (r.topic, r.partition))


# --------------------------------------------------------------------------- Spark comparison


def _records(spark, config_path: str, alias: str, ranges: list[dict], split: int, side: str):
    """(side, topic, partition, offset, digest, split, index) of every record in ``ranges``
    on ``alias``: ``split`` is the Spark input partition that read it and ``index`` its
    position there (the reader yields each split in offset order)."""
    from pyspark.sql import functions as F

    from mirrorflow.spark.source import KafkaRangeDataSource

    spark.dataSource.register(KafkaRangeDataSource)
    frame = (spark.read.format("kafka_range")
             .option("mirrorflow.config", config_path)
             .option("mirrorflow.cluster", alias)
             .option("ranges", json.dumps(ranges))
             .option("maxRecordsPerPartition", str(split))
             .load())
    headers = F.transform("headers", lambda h: F.struct(h["key"], h["value"],
                                                         h["value"].isNull()))
    # Spark's hash skips nulls; hashing the null flags too keeps (null, x) apart from (x, null).
    digest = F.xxhash64("key", "value", headers, "timestamp", F.col("key").isNull(),
                        F.col("value").isNull(), F.col("headers").isNull())
    task = F.spark_partition_id()
    # monotonically_increasing_id is (task << 33) + the row's position in its task.
    index = F.monotonically_increasing_id() - F.shiftleft(task.cast("long"), 33)
    return frame.select(F.lit(side).alias("side"), "topic", "partition", "offset",
                        digest.alias("digest"), task.alias("split"), index.alias("index"))


def _numbered(spark, records, F):
    """``records`` with ``ordinal`` (1, 2, ... in offset order per side and range) instead of
    split and index: a split's records follow those of the range's earlier splits. One
    small aggregate over the splits replaces a sort of every record."""
    splits = (records.groupBy("side", *RANGE_KEYS, "split")
              .agg(F.count("*").alias("n"), F.min("offset").alias("first")).collect())
    bases, seen = [], {}
    for row in sorted(splits, key=lambda r: (r["side"], r["topic"], r["partition"],
                                             r["first"])):
        key = (row["side"], row["topic"], row["partition"])
        bases.append((row["side"], row["split"], seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + row["n"]
    # Split numbers are per side (each side's scan numbers its own input partitions).
    base = spark.createDataFrame(bases or [("s", 0, 0)], "side string, split int, base long")
    return records.join(F.broadcast(base), ["side", "split"]).select(
        "side", *RANGE_KEYS, "offset", "digest",
        (F.col("base") + F.col("index") + 1).alias("ordinal"))


def compare(spark, config_path: str, flow: FlowConfig, ranges: list[Range],
            target_ends: dict[tuple[str, int], int]) -> dict[tuple[str, int], dict]:
    """Per (source topic, partition): counts, digests, multiset and first mismatch."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    split = flow.get("mirrorflow.records.per.spark.partition")
    source = _records(spark, config_path, flow.source,
                      [{"topic": r.topic, "partition": r.partition, "start": r.start,
                        "end": r.end} for r in ranges], split, "s")
    target_ranges = [{"topic": r.remote_topic, "partition": r.partition,
                      "start": r.target_start,
                      "end": max(target_ends[(r.remote_topic, r.partition)], r.target_start)}
                     for r in ranges]
    names = spark.createDataFrame([(r.remote_topic, r.topic) for r in ranges],
                                  "remote_topic string, source_topic string").distinct()
    target = (_records(spark, config_path, flow.target,
                       [t for t in target_ranges if t["end"] > t["start"]], split, "t")
              .join(F.broadcast(names), F.col("topic") == F.col("remote_topic"))
              .drop("topic", "remote_topic").withColumnRenamed("source_topic", "topic"))
    # One scan of both clusters (every core busy until both are read), kept for the passes.
    records = source.unionByName(target).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        numbered = _numbered(spark, records, F)
        rows = _summaries(numbered, F)
        unequal = [key for key, row in rows.items() if not _equal(row)]
        if unequal:
            for key, found in _diagnose(spark, numbered, unequal, F).items():
                rows[key].update(found)
        return rows
    finally:
        records.unpersist()


def _ordered_digest(F):
    """XOR of every record's digest mixed with its ordinal: equal for equal sequences."""
    return F.bit_xor(F.xxhash64("digest", "ordinal"))


def _summaries(numbered, F) -> dict[tuple[str, int], dict]:
    """Counts, first and last offsets and the order-sensitive digest of both sides."""
    per_side = numbered.groupBy("side", *RANGE_KEYS).agg(
        F.count("*").alias("records"), F.min("offset").alias("first"),
        F.max("offset").alias("last"), _ordered_digest(F).alias("digest")).collect()
    rows: dict[tuple[str, int], dict] = {}
    for row in per_side:
        side = "source" if row["side"] == "s" else "target"
        summary = rows.setdefault((row["topic"], row["partition"]), _empty_row())
        summary.update({f"{side}_records": row["records"], f"{side}_first": row["first"],
                        f"{side}_last": row["last"], f"{side}_digest": row["digest"]})
    return rows


def _empty_row() -> dict:
    return {"source_records": 0, "target_records": 0, "source_digest": None,
            "target_digest": None, **dict.fromkeys(ZERO_COUNTS, 0), "first_bad": None,
            **{f"{side}_{end}": None for side in ("source", "target")
               for end in ("first", "last")}}


def _equal(row: dict) -> bool:
    """Same count and same ordered digest: the same records in the same order (up to a
    64-bit hash collision), so nothing is missing, duplicated, foreign or misplaced."""
    return (row["source_records"] == row["target_records"]
            and row["source_digest"] == row["target_digest"])


def _diagnose(spark, numbered, keys: list[tuple[str, int]], F) -> dict[tuple[str, int], dict]:
    """For ranges whose sides differ: the multiset (missing, duplicated, foreign records),
    misplaced records and the first mismatch, aligning both sides by ordinal."""
    wanted = F.broadcast(spark.createDataFrame(keys, "topic string, partition int"))
    records = numbered.join(wanted, RANGE_KEYS)

    def side(name: str):
        return records.where(F.col("side") == name).drop("side")

    def renamed(frame, prefix: str):
        return frame.select(*RANGE_KEYS, "ordinal", F.col("offset").alias(f"{prefix}_offset"),
                            F.col("digest").alias(f"{prefix}_digest"))

    source, target = side("s"), side("t")
    pairs = renamed(source, "s").join(renamed(target, "t"), [*RANGE_KEYS, "ordinal"],
                                      "full_outer")
    bad = ~F.col("s_digest").eqNullSafe(F.col("t_digest"))
    order = pairs.groupBy(*RANGE_KEYS).agg(
        F.sum(bad.cast("long")).alias("misplaced"),
        F.min(F.when(bad, F.struct("ordinal", "s_offset", "t_offset"))).alias("first_bad"))
    counts = (source.groupBy(*RANGE_KEYS, "digest").agg(F.count("*").alias("s_n"))
              .join(target.groupBy(*RANGE_KEYS, "digest").agg(F.count("*").alias("t_n")),
                    [*RANGE_KEYS, "digest"], "full_outer")
              .fillna(0, ["s_n", "t_n"]))
    multiset = counts.groupBy(*RANGE_KEYS).agg(
        F.sum(F.greatest(F.col("s_n") - F.col("t_n"), F.lit(0))).alias("missing"),
        F.sum(F.when(F.col("s_n") > 0, F.greatest(F.col("t_n") - F.col("s_n"), F.lit(0)))
              .otherwise(0)).alias("duplicates"),
        F.sum(F.when(F.col("s_n") == 0, F.col("t_n")).otherwise(0)).alias("foreign"))
    rows = order.join(multiset, RANGE_KEYS, "left").collect()
    return {(row["topic"], row["partition"]): row.asDict(recursive=True) for row in rows}


def _syncs_cover(syncs: list, row: dict) -> bool:
    """The run's offset syncs pair the range's first and last records with theirs."""
    if row.get("source_records", 0) == 0:
        return True
    if not syncs:
        return False
    return ([syncs[0][0], syncs[-1][0]] == [row["source_first"], row["source_last"]]
            and [syncs[0][1], syncs[-1][1]] == [row["target_first"], row["target_last"]])


def verdicts(ranges: list[Range], verified: list[Range], rows: dict, result: dict,
             source_ends: dict[tuple[str, int], int]) -> list[RangeVerdict]:
    by_tp = {(r["topic"], r["partition"]): r for r in result.get("ranges", [])}
    checked = {(r.topic, r.partition) for r in verified}
    out = []
    for r in ranges:
        tp = (r.topic, r.partition)
        written = by_tp.get(tp, {})
        verdict = RangeVerdict(r.topic, r.partition, r.remote_topic, r.start, r.end,
                               r.target_start, written.get("records_read", 0),
                               verified=tp in checked, lag=source_ends.get(tp, r.end) - r.end)
        row = rows.get(tp)
        if verdict.verified and row is not None:
            first_bad = row.get("first_bad") or {}
            verdict.source_records, verdict.target_records = (row["source_records"],
                                                              row["target_records"])
            verdict.source_digest = f"{(row['source_digest'] or 0) & (2**64 - 1):016x}"
            verdict.target_digest = f"{(row['target_digest'] or 0) & (2**64 - 1):016x}"
            for name in ZERO_COUNTS:
                setattr(verdict, name, int(row.get(name) or 0))
            verdict.first_bad_source_offset = first_bad.get("s_offset")
            verdict.first_bad_target_offset = first_bad.get("t_offset")
            verdict.offset_syncs_cover = _syncs_cover(written.get("syncs", []), row)
        elif verdict.verified:
            verdict.source_digest = verdict.target_digest = f"{0:016x}"
        out.append(verdict)
    return out


# --------------------------------------------------------------------------- checkpoints


def checkpoint_verdicts(config: MirrorConfig, flow: FlowConfig) -> list[CheckpointVerdict]:
    """The newest checkpoint of every group and partition against the source group."""
    if not flow.get("emit.checkpoints.enabled"):
        return []
    from mirrorflow.checkpoints import committed_offsets
    from mirrorflow.remote import latest_checkpoints

    policy = flow.policy()
    source = config.cluster(flow.source)
    latest = latest_checkpoints(config.cluster(flow.target), flow.source, policy)
    groups: dict[str, dict] = {}
    out = []
    for (group, remote_topic, partition), checkpoint in sorted(latest.items()):
        topic = policy.upstream_topic(remote_topic) or remote_topic
        if group not in groups:
            groups[group] = committed_offsets(source, group)
        offset = groups[group].get((topic, partition), (None, ""))[0]
        if offset is not None:
            out.append(CheckpointVerdict(group, topic, partition,
                                         checkpoint.upstream_offset, offset))
    return out


# --------------------------------------------------------------------------- the suite


def expectations_dir(flow: FlowConfig) -> Path:
    configured = flow.get("mirrorflow.validate.expectations.dir")
    return Path(configured) if configured else DEFAULT_EXPECTATIONS_DIR


def user_suites(directory: Path) -> list[dict]:
    """GX suite documents (``{"name", "expectations": [{"type", "kwargs"}]}``), by file."""
    suites = []
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc.get("expectations"), list):
                raise ValueError("no 'expectations' list")
        except (ValueError, AttributeError) as exc:
            raise ValidationError(f"expectation suite {path}: {exc}") from None
        suites.append({"name": doc.get("name") or path.stem, **doc, "file": str(path)})
    return suites


def _completeness_suite(gx):
    e = gx.expectations
    planned = {"$PARAMETER": "planned_records"}
    suite = gx.ExpectationSuite(name="mirrorflow.completeness")
    for expectation in [
        e.ExpectTableRowCountToEqual(value={"$PARAMETER": "verified_ranges"},
                                     description="Every verified range was compared."),
        e.ExpectColumnSumToBeBetween(column="source_records", min_value=planned,
                                     max_value=planned,
                                     description="The source holds the records the mirror "
                                                 "read."),
        e.ExpectColumnPairValuesToBeEqual(column_A="target_records", column_B="source_records",
                                          description="Record count on the target equals "
                                                      "the source's, range by range."),
        e.ExpectColumnPairValuesToBeEqual(column_A="target_digest", column_B="source_digest",
                                          description="Order-sensitive digests of key, value, "
                                                      "headers and timestamp are equal."),
        *[e.ExpectColumnValuesToBeInSet(column=name, value_set=[0], description=meaning)
          for name, meaning in zip(ZERO_COUNTS, (
              "No source record is missing on the target.",
              "No record is duplicated on the target.",
              "No target record is foreign to the source (altered, or produced directly).",
              "Every record is at its source position."), strict=True)],
        e.ExpectColumnValuesToBeInSet(column="offset_syncs_cover", value_set=[True],
                                      description="Offset syncs map each range's first and "
                                                  "last record exactly."),
    ]:
        suite.add_expectation(expectation)
    return suite


def _checkpoint_suite(gx):
    suite = gx.ExpectationSuite(name="mirrorflow.checkpoints")
    suite.add_expectation(gx.expectations.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="group_offset", column_B="checkpoint_upstream_offset", or_equal=True,
        description="No checkpoint is ahead of its group's position on the source."))
    return suite


def _suite_from_doc(gx, doc: dict):
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    suite = gx.ExpectationSuite(name=doc["name"])
    for item in doc["expectations"]:
        try:
            config = ExpectationConfiguration(type=item["type"], kwargs=item.get("kwargs", {}),
                                              meta=item.get("meta"))
            suite.add_expectation_configuration(config)
        except Exception as exc:
            raise ValidationError(f"expectation suite {doc['file']}: {item!r}: {exc}") from None
    return suite


def import_gx():
    """Great Expectations, imported with its usage analytics off unless the user set them."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    return gx


def run_suites(verdict_list: list[RangeVerdict], cps: list[CheckpointVerdict],
               planned_records: int, records_frame, suites: list[dict],
               docs_dir: Path | None, run_name: str) -> dict[str, bool]:
    """Run the GX suites; build Data Docs into ``docs_dir``. Suite name -> success."""
    gx = import_gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    if docs_dir is not None:
        context.add_data_docs_site(site_name="run", site_config={
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}})
    # The built-in suites look at one row per range or checkpoint: pandas, no Spark jobs
    # (GX computes every metric with a job of its own). User suites see the mirrored
    # records, on Spark.
    import pandas as pd

    small = context.data_sources.add_pandas(name="mirrorflow")
    ranges_frame = pd.DataFrame(
        [(v.topic, v.partition, v.remote_topic, v.source_records, v.target_records,
          v.source_digest, v.target_digest, v.missing, v.duplicates, v.foreign, v.misplaced,
          v.offset_syncs_cover) for v in verdict_list if v.verified],
        columns=["topic", "partition", "remote_topic", "source_records", "target_records",
                 "source_digest", "target_digest", "missing", "duplicates", "foreign",
                 "misplaced", "offset_syncs_cover"])
    cps_frame = pd.DataFrame(
        [(c.group, c.topic, c.partition, c.checkpoint_upstream_offset, c.group_offset)
         for c in cps],
        columns=["group", "topic", "partition", "checkpoint_upstream_offset", "group_offset"])
    runs = [(small, "ranges", ranges_frame, _completeness_suite(gx)),
            (small, "checkpoints", cps_frame, _checkpoint_suite(gx))]
    if suites:
        large = context.data_sources.add_spark(name="mirrorflow-records")
        runs += [(large, "records", records_frame, _suite_from_doc(gx, doc)) for doc in suites]
    parameters = {"planned_records": planned_records,
                  "verified_ranges": sum(1 for v in verdict_list if v.verified)}
    outcome = {}
    for source, asset_name, frame, suite in runs:
        asset = (source.get_asset(asset_name) if asset_name in source.get_asset_names()
                 else source.add_dataframe_asset(name=asset_name))
        batch = asset.add_batch_definition_whole_dataframe(f"{suite.name}/{asset_name}")
        suite = context.suites.add(suite)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(data=batch, suite=suite, name=suite.name))
        result = definition.run(batch_parameters={"dataframe": frame},
                                expectation_parameters=parameters,
                                run_id=gx.RunIdentifier(run_name=run_name))
        outcome[suite.name] = bool(result.success)
    if docs_dir is not None:
        context.build_data_docs(site_names=["run"])
        reports.share_static(docs_dir)
    return outcome


# --------------------------------------------------------------------------- the whole check


def validate_plan(spark, config_path: str, config: MirrorConfig, flow: FlowConfig, plan: Plan,
                  result: dict, run_id: str) -> Validation:
    """Compare the plan's ranges on both clusters, run the suites, write the Data Docs and
    the run's summary (the report step adds the commit's figures when the run goes on)."""
    started = time.monotonic()
    fraction = flow.get("mirrorflow.validate.fraction")
    if not plan.ranges:
        return Validation(flow.name, run_id, plan.plan_id, True, fraction)
    verified = sample(plan, fraction)
    target_ends = {tp: w.high for tp, w in probe_watermarks(
        config.cluster(flow.target), [(r.remote_topic, r.partition) for r in verified]).items()}
    source_ends = {tp: w.high for tp, w in probe_watermarks(
        config.cluster(flow.source), [(r.topic, r.partition) for r in plan.ranges]).items()}
    rows = compare(spark, config_path, flow, verified, target_ends) if verified else {}
    verdict_list = verdicts(list(plan.ranges), verified, rows, result, source_ends)
    validation = Validation(
        flow.name, run_id, plan.plan_id, True, fraction,
        verified_records=sum(v.planned for v in verdict_list if v.verified),
        planned_records=sum(v.planned for v in verdict_list), ranges=verdict_list,
        checkpoints=checkpoint_verdicts(config, flow))
    suites = user_suites(expectations_dir(flow))
    records = None
    if suites and verified:
        records = (spark.read.format("kafka_range").option("mirrorflow.config", config_path)
                   .option("mirrorflow.cluster", flow.target)
                   .option("ranges", json.dumps([
                       {"topic": r.remote_topic, "partition": r.partition,
                        "start": r.target_start, "end": target_ends[(r.remote_topic,
                                                                      r.partition)]}
                       for r in verified]))
                   .load())
    elif suites:
        suites = []
    docs_dir = reports.run_dir(flow.name, run_id)
    validation.expectations = run_suites(
        verdict_list, validation.checkpoints, validation.verified_records, records,
        suites, docs_dir, run_id)
    validation.data_docs = str(docs_dir / "index.html")
    validation.failures = [p for v in verdict_list for p in v.problems()]
    validation.failures += [p for c in validation.checkpoints if (p := c.problem())]
    validation.failures += [f"expectation suite {name!r} failed (see the Data Docs)"
                            for name, ok in validation.expectations.items()
                            if not ok and not name.startswith("mirrorflow.")]
    validation.success = all(validation.expectations.values()) and not validation.failures
    if not validation.success and not validation.failures:
        validation.failures = ["an expectation failed (see the Data Docs)"]
    validation.duration_s = round(time.monotonic() - started, 3)
    reports.write(flow.name, run_id, {"flow": flow.name, "run_id": run_id,
                                      "plan_id": plan.plan_id, "stage": "validated",
                                      "validation": validation.to_dict()})
    return validation
