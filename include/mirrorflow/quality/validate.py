"""Completeness proof of one run: the target holds exactly the run's source records, at
the remote offsets the offset syncs claim, and nothing a mirror flow did not write.

Runs in the Spark job, after the mirror wrote a plan's ranges and before the positions are
committed, so a mismatch leaves the plan pending and the positions where they were: the
next attempt resumes the same plan and checks again, and no checkpoint or group offset
sync ever points a consumer at a target that failed the check.

What is compared (:mod:`mirrorflow.quality.compare` does it in Spark):

* every planned range (or a stable sample, ``mirrorflow.validate.fraction``): each source
  record against the target record at the remote offset the plan's spans claim for it;
  so missing, duplicated, altered and misplaced records are found, and the offset syncs
  are proven exact; the emitted syncs are checked against the spans the writers committed
  (:mod:`mirrorflow.quality.sync_check`), each span contiguous on the target;
* every remote partition the flow writes, from where the last passing check ended
  (``verified_end`` in :mod:`mirrorflow.source.history`) to its end now: each record must belong
  to this flow's spans or to another mirror flow's (fan-in); any other record is foreign
  and named by partition and offset, whether it arrived during the run or between runs.
  Where the offset store's position is not the one the last check committed (MM2 or a
  reset moved the flow), the region starts where this plan's records begin;
* timestamps only where the remote topic keeps the producer's (``CreateTime``); a
  ``LogAppendTime`` topic's are left out, and the report says so; a source timestamp at
  or before the epoch (CreateTime 0, or none: -1), which the writer gives the plan's time
  (:func:`digests.restamp`), is compared as that time, and the report counts them;
* checkpoints on the target: none may claim an upstream offset the flow has not mirrored
  (a consumer group that moved back is not a fault: MM2 emits its rewound checkpoint);
* the plan against the source partitions' chains (:func:`chain_findings`): each range
  starts where the flow's chain of its partition ends, in the same topic incarnation
  (topic id), or where a named break of the plan says; otherwise offsets were never
  planned (or planned twice), and the proof fails naming them.

A Great Expectations suite checks the verdicts (ephemeral context, pandas data source
for the one-row-per-partition table, expected values as parameters) and renders Data
Docs; users add their own suites (JSON files in the expectations directory) over the
mirrored records, on Spark.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.kafka.watermarks import probe_watermarks
from mirrorflow.plain import plain
from mirrorflow.quality import reports, schema_check
from mirrorflow.quality.compare import Compared, RangeCheck, RegionCheck, compare
from mirrorflow.quality.gx_import import import_gx
from mirrorflow.quality.sync_check import range_findings
from mirrorflow.schema import mapping
from mirrorflow.source import history, ledger
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan import Plan, PlanStore, Range

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]
FINDINGS = {
    "missing": "No source record is missing on the target.",
    "duplicates": "No record is duplicated on the target.",
    "altered": "No record in the flow's spans differs from its source record.",
    "misplaced": "Every record is at the remote offset its offset sync claims.",
    "foreign": "No record in the remote partition was written by anything but a mirror "
               "flow.",
}
DEFAULT_EXPECTATIONS_DIR = Path(__file__).resolve().parents[2] / "expectations"


class ValidationError(MirrorflowError):
    """The target does not hold exactly the run's records; the message names where."""


@dataclass
class PartitionVerdict:
    """One remote partition of the flow: its planned range compared (when the plan has
    one and the sample takes it), and its unverified region searched for foreign
    records."""

    topic: str
    partition: int
    remote_topic: str
    source_start: int | None = None
    source_end: int | None = None
    region_start: int | None = None
    region_end: int | None = None
    planned: int = 0
    verified: bool = False
    timestamps_compared: bool = True
    source_records: int = 0
    target_records: int = 0
    source_digest: str = ""
    target_digest: str = ""
    missing: int = 0
    duplicates: int = 0
    altered: int = 0
    misplaced: int = 0
    foreign: int = 0
    first_foreign_offset: int | None = None
    first_bad_source_offset: int | None = None
    first_bad_target_offset: int | None = None
    lag: int | None = None
    # Offsets [a, b) of the range the source lost (retention, DeleteRecords) after they
    # were written and before the proof read them again, and how many copies they have.
    lost: tuple[int, int] | None = None
    unproven: int = 0

    @property
    def checked(self) -> bool:
        return self.verified or self.region_start is not None

    @property
    def digest_match(self) -> bool:
        return self.source_digest == self.target_digest

    def problems(self) -> list[str]:
        """Plain-language findings, naming topic, partition and the first bad offset."""
        where = f"{self.topic}[{self.partition}] -> {self.remote_topic}[{self.partition}]"
        found = []
        if self.foreign:
            found.append(f"{self.remote_topic}[{self.partition}]: {self.foreign} records "
                         f"between offsets {self.region_start} and {self.region_end - 1} "
                         f"were not written by a mirror flow (the first at offset "
                         f"{self.first_foreign_offset})")
        if not self.verified:
            return found
        if self.source_records != self.planned:
            found.append(f"{where}: the source holds {self.source_records} records in offsets "
                         f"{self.source_start}..{self.source_end - 1}, the mirror wrote "
                         f"{self.planned}")
        if self.target_records != self.source_records:
            found.append(f"{where}: {self.target_records} records on the target in the "
                         f"flow's spans, {self.source_records} on the source")
        for name, meaning in (("missing", "source records missing on the target"),
                              ("duplicates", "records duplicated on the target"),
                              ("altered", "records on the target that are not source "
                                          "records (altered)")):
            if getattr(self, name):
                found.append(f"{where}: {getattr(self, name)} {meaning}")
        if self.first_bad_source_offset is not None or self.first_bad_target_offset is not None:
            found.append(f"{where}: first mismatch at source offset "
                         f"{self.first_bad_source_offset}, target offset "
                         f"{self.first_bad_target_offset}")
        return found


@dataclass
class CheckpointVerdict:
    """A checkpoint on the target against how far the flow has mirrored its partition.

    A group may be ahead of the mirror (live traffic): its checkpoint then points
    consumers at the end of what was mirrored, which is safe. A checkpoint that points past
    that end would make a failed-over consumer skip records not yet on the target."""

    group: str
    topic: str
    partition: int
    checkpoint_upstream_offset: int
    mirrored_end: int  # upstream: the next offset to mirror
    checkpoint_downstream_offset: int | None = None
    mirrored_downstream_end: int | None = None  # the remote offset after the mirrored ones

    def problem(self) -> str | None:
        if (self.checkpoint_downstream_offset is None
                or self.checkpoint_downstream_offset <= self.mirrored_downstream_end):
            return None
        return (f"checkpoint of group {self.group!r} for {self.topic}[{self.partition}] "
                f"points consumers at remote offset {self.checkpoint_downstream_offset}, past "
                f"the flow's mirrored records (remote offsets up to "
                f"{self.mirrored_downstream_end - 1}, upstream up to {self.mirrored_end - 1})")


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
    ranges: list[PartitionVerdict] = field(default_factory=list)
    checkpoints: list[CheckpointVerdict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    expectations: dict[str, bool] = field(default_factory=dict)
    # A schema transfer's mappings the run's records use (quality.schema_check).
    schemas: list[dict] = field(default_factory=list)
    data_docs: str | None = None
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        self._docs: threading.Thread | None = None  # building the Data Docs (not stored)

    def start_docs(self, context, docs_dir: Path) -> None:
        """Render the Data Docs of the suites ``context`` ran into ``docs_dir``, in the
        background (:func:`build_docs`), then into the run's reports."""
        self.data_docs = str(reports.run_dir(self.flow, self.run_id) / "index.html")
        self._docs = threading.Thread(target=build_docs,
                                      args=(context, docs_dir, self.flow, self.run_id),
                                      name=f"data docs {self.run_id}")
        self._docs.start()

    def wait_for_docs(self) -> None:
        """Return once the run's Data Docs are written: :func:`validate_plan` renders them
        in the background, off the verdict's path, so the commit need not wait for HTML;
        whoever ends the run (or its process) waits here."""
        if self._docs is not None:
            self._docs.join()

    @property
    def verified_fraction(self) -> float:
        return 1.0 if not self.planned_records else self.verified_records / self.planned_records

    def verified_ends(self) -> dict[TopicPart, int]:
        """Remote partition -> the end of the region this check proved."""
        return {(v.remote_topic, v.partition): v.region_end for v in self.ranges
                if v.region_end is not None}

    def to_dict(self) -> dict:
        doc = plain(self)
        doc["verified_fraction"] = round(self.verified_fraction, 6)
        for verdict, row in zip(self.ranges, doc["ranges"], strict=True):
            row["digest_match"] = verdict.digest_match
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> Validation:
        doc = dict(doc)
        doc.pop("verified_fraction", None)
        ranges = [PartitionVerdict(**{k: v for k, v in r.items() if k != "digest_match"})
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


# --------------------------------------------------------------------------- what to check


@dataclass
class _Scope:
    """What one check reads: ranges, regions, and each partition's verdict to fill."""

    ranges: list[RangeCheck] = field(default_factory=list)
    regions: list[RegionCheck] = field(default_factory=list)
    verdicts: dict[TopicPart, PartitionVerdict] = field(default_factory=dict)
    chains: dict[TopicPart, history.Chain] = field(default_factory=dict)


def chain_findings(plan: Plan, chains: dict[TopicPart, history.Chain]) -> list[str]:
    """One line per range that does not start where its partition's chain ends (same
    topic id) nor where one of the plan's named breaks says the chain goes on. A plan
    made before plans recorded topic ids is not judged."""
    findings = []
    joined = {(b.topic, b.partition, b.end) for b in plan.all_breaks}
    for r in plan.ranges:
        topic_id = plan.topic_ids.get(r.topic)
        if not topic_id:
            continue
        tp = (r.topic, r.partition)
        if (r.topic, r.partition, r.start) in joined:
            continue
        chain = chains.get(tp)
        where = f"{r.topic}[{r.partition}] (topic id {topic_id})"
        if chain is None or (chain.topic_id and chain.topic_id != topic_id):
            findings.append(f"{where}: the plan starts at offset {r.start}, but the flow "
                            "keeps no chain of this topic incarnation and no break names why")
        elif r.start > chain.next:
            findings.append(f"offsets {chain.next}-{r.start - 1} of {where} were never "
                            f"planned: the flow accounted for the partition up to offset "
                            f"{chain.next - 1}, and this plan starts at {r.start}")
        elif r.start < chain.next:
            findings.append(f"offsets {r.start}-{chain.next - 1} of {where} are planned a "
                            f"second time: the flow accounted for them already")
    return findings


def _others_spans(config: MirrorConfig, flow: FlowConfig,
                  partitions: set[TopicPart]) -> dict[TopicPart, list[tuple[int, int]]]:
    """Remote offsets other flows' records occupy in these remote partitions (fan-in):
    their kept history and the spans of their pending plans. All these topics are read
    at once: each read mostly waits on the broker."""
    target = config.cluster(flow.target)
    aliases = history.other_flows(target, flow.source)
    if not aliases:
        return {}
    with ThreadPoolExecutor(min(2 * len(aliases), 8), "fan-in spans") as pool:
        owned = pool.map(lambda a: history.HistoryStore(target, a).read()[0], aliases)
        pending = pool.map(lambda a: ledger.read_spans(target, a), aliases)
        found = [(item.owned, rp) for kept in owned for rp, item in kept.items()]
        found += [([(s.downstream_first, s.downstream_last)], (s.remote_topic, s.partition))
                  for spans in pending for plan_spans in spans.values() for s in plan_spans]
    out: dict[TopicPart, list[tuple[int, int]]] = {}
    for offsets, rp in found:
        if rp in partitions:
            out.setdefault(rp, []).extend(offsets)
    return out


def scope(config: MirrorConfig, flow: FlowConfig, plan: Plan, result: dict,
          verified: list[Range]) -> _Scope:
    """The ranges to compare and every remote partition's unverified region."""
    target = config.cluster(flow.target)
    policy = flow.policy()
    positions = OffsetStore(target, flow.source, flow.get("replication.factor")).positions()
    kept = history.HistoryStore(target, flow.source).read_all()
    owned = kept.remote
    written = {(r["topic"], r["partition"]): r for r in result.get("ranges", [])}
    sampled = {(r.topic, r.partition) for r in verified}
    out = _Scope(chains=kept.chains)
    starts: dict[TopicPart, int] = {}
    own: dict[TopicPart, list[tuple[int, int]]] = {}
    ignore: dict[TopicPart, list[tuple[int, int]]] = {}
    source = config.cluster(flow.source)
    reread = [(r.topic, r.partition) for r in plan.ranges
              if not written.get((r.topic, r.partition), {}).get("source_digest")]
    lows = {tp: w.low for tp, w in probe_watermarks(source, reread,
                                                    source.isolation_level()).items()}
    for r in plan.ranges:
        rp = (r.remote_topic, r.partition)
        done = written.get((r.topic, r.partition), {})
        spans = [tuple(s) for s in done.get("owned", [])]
        lost, unproven, spans, lost_copies = _lost_at_source(
            r, lows.get((r.topic, r.partition), r.start), done, spans)
        known = owned.get(rp)
        fresh = known is None or known.verified_end is None or \
            known.position != positions.get((r.topic, r.partition))
        starts[rp] = r.target_start if fresh else min(known.verified_end, r.target_start)
        start = lost[1] if lost else r.start
        out.verdicts[rp] = PartitionVerdict(r.topic, r.partition, r.remote_topic, start,
                                            r.end, planned=done.get("records", 0) - unproven,
                                            lost=lost, unproven=unproven)
        ignore[rp] = lost_copies
        if (r.topic, r.partition) in sampled:
            own[rp] = spans
            out.ranges.append(RangeCheck(r.topic, r.partition, r.remote_topic, start, r.end,
                                         tuple(tuple(s) for s in done.get("syncs", [])),
                                         done.get("source_digest")))
            out.verdicts[rp].verified = True
        else:
            ignore[rp] += spans
    for rp, known in owned.items():
        if rp in out.verdicts or known.verified_end is None:
            continue
        topic = policy.upstream_topic(rp[0]) or rp[0]
        if known.position != positions.get((topic, rp[1])):
            continue  # moved by something else: nothing of it is this flow's to prove
        starts[rp] = known.verified_end
        out.verdicts[rp] = PartitionVerdict(topic, rp[1], rp[0])
    if not starts:
        return out
    ends = {tp: w.high for tp, w in probe_watermarks(target, list(starts)).items()}
    others = _others_spans(config, flow, set(starts))
    for rp, start in starts.items():
        verdict = out.verdicts[rp]
        verdict.region_start, verdict.region_end = start, max(ends[rp], start)
        # The flow's own records above the proven end: a plan a reset dropped after it
        # wrote (ledger.keep_written) left them there.
        earlier = [s for s in (owned[rp].owned if rp in owned else []) if s[1] >= start]
        out.regions.append(RegionCheck(rp[0], rp[1], start, verdict.region_end,
                                       tuple(own.get(rp, [])),
                                       tuple(ignore.get(rp, []) + others.get(rp, [])
                                             + earlier)))
    return out


def _lost_at_source(r: Range, low: int, done: dict, spans: list[tuple[int, int]]):
    """For a range whose source is read again: offsets ``[r.start, low)`` retention removed
    since they were written. (lost offsets or None, their copies' count, the flow's spans
    from the first kept record on, the spans of the lost records' copies). The copies end
    before the remote offset the syncs claim for ``low`` (records keep their order)."""
    end = min(low, r.end)
    syncs = sorted(tuple(s) for s in done.get("syncs", []))
    below = [s for s in syncs if s[0] <= end]
    if end <= r.start or not below:
        return None, 0, spans, []
    cut = end + below[-1][1] - below[-1][0]
    kept = [(max(a, cut), b) for a, b in spans if b >= cut]
    copies = [(a, min(b, cut - 1)) for a, b in spans if a < cut]
    return (r.start, end), sum(b - a + 1 for a, b in copies), kept, copies


def remote_topic_ids(config: MirrorConfig, flow: FlowConfig, plan: Plan) -> dict[str, str]:
    """The ids of the remote topics of every topic the plan's flow covers, in one describe
    request: the target reads' :func:`~mirrorflow.spark.kafka_source.reader_group`."""
    policy = flow.policy()
    return clients.topic_ids(config.cluster(flow.target), [
        policy.format_remote_topic(flow.source, t) for t in plan.topic_ids])


def remote_topic_traits(config: MirrorConfig, flow: FlowConfig,
                        topics: set[str]) -> tuple[set[str], set[str]]:
    """The remote topics that stamp records with the broker's time (their timestamps are
    not the source's, so they are not compared), and those the log cleaner compacts."""
    from mirrorflow.source.topic_sync import describe_configs

    described = describe_configs(config.cluster(flow.target), sorted(topics))

    def value(entries, name: str) -> str:
        return getattr(entries.get(name), "value", None) or ""

    return ({t for t, e in described.items()
             if value(e, "message.timestamp.type") == "LogAppendTime"},
            {t for t, e in described.items() if "compact" in value(e, "cleanup.policy")})


def restamp_notes(plan: Plan, result: dict) -> list[str]:
    """Per range whose writer gave records the plan's time (:func:`digests.restamp`)."""
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(plan.created_ms / 1000))
    return [f"{r['remote_topic']}[{r['partition']}]: {r['restamped']} records stamped at or "
            f"before the epoch (CreateTime 0, or none) were written with the plan's time "
            f"({at}.{plan.created_ms % 1000:03d}Z), which the proof compares"
            for r in result["ranges"] if r.get("restamped")]


def _fill(verdict: PartitionVerdict, found: Compared) -> None:
    verdict.foreign, verdict.first_foreign_offset = (found.foreign_records,
                                                     found.first_foreign_offset)
    if not verdict.verified:
        return
    verdict.source_records, verdict.target_records = (found.source.records,
                                                      found.target.records)
    verdict.source_digest = f"{(found.source.digest or 0) & (2**64 - 1):016x}"
    verdict.target_digest = f"{(found.target.digest or 0) & (2**64 - 1):016x}"
    for name in ("missing", "duplicates", "altered", "misplaced", "first_bad_source_offset",
                 "first_bad_target_offset"):
        setattr(verdict, name, getattr(found, name))


# --------------------------------------------------------------------------- checkpoints


def checkpoint_verdicts(config: MirrorConfig, flow: FlowConfig) -> list[CheckpointVerdict]:
    """The newest checkpoint of every group and partition against how far the flow has
    mirrored that partition (its committed position). Checkpoints superseded by a reset or
    a recreated topic are not judged: they describe offsets that no longer hold, and the
    run emits fresh ones after its commit."""
    if not flow.get("emit.checkpoints.enabled"):
        return []
    from mirrorflow.checkpoint.checkpoints import current_checkpoints
    from mirrorflow.source import offset_syncs

    policy = flow.policy()
    target = config.cluster(flow.target)
    positions = OffsetStore(target, flow.source, flow.get("replication.factor")).positions()
    checkpoints = current_checkpoints(config, flow)
    syncs = offset_syncs.history(config, flow) if checkpoints else {}
    out = []
    for (group, remote_topic, partition), checkpoint in sorted(checkpoints.items()):
        topic = policy.upstream_topic(remote_topic) or remote_topic
        position = positions.get((topic, partition))
        if position is None:
            continue
        # Without syncs (nothing mirrored by mirrorflow yet) offsets are taken as equal.
        history = syncs.get((topic, partition))
        downstream_end = (history.translate(position + 1) if history else None)
        out.append(CheckpointVerdict(
            group, topic, partition, checkpoint.upstream_offset, position + 1,
            checkpoint.downstream_offset,
            position + 1 if downstream_end is None else downstream_end))
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
        e.ExpectTableRowCountToEqual(value={"$PARAMETER": "checked_partitions"},
                                     description="Every checked remote partition was read."),
        e.ExpectColumnSumToBeBetween(column="source_records", min_value=planned,
                                     max_value=planned,
                                     description="The planned ranges' source records: counted "
                                                 "by the writer from what Spark's Kafka source "
                                                 "read (a range one attempt wrote whole), "
                                                 "else read from the source again."),
        e.ExpectColumnPairValuesToBeEqual(column_A="target_records", column_B="source_records",
                                          description="The flow's records on the target "
                                                      "(read read_committed) are as many as "
                                                      "the source's, range by range."),
        e.ExpectColumnPairValuesToBeEqual(column_A="target_digest", column_B="source_digest",
                                          description="Per range, the XOR of xxhash64 of "
                                                      "key, value, headers and timestamp "
                                                      "with the remote offset is equal on "
                                                      "both sides: every source record sits "
                                                      "where its span's offset syncs put it "
                                                      "(timestamps left out on LogAppendTime "
                                                      "topics; 0 and -1 as the plan's time)."),
        *[e.ExpectColumnValuesToBeInSet(column=name, value_set=[0], description=meaning)
          for name, meaning in FINDINGS.items()],
    ]:
        suite.add_expectation(expectation)
    return suite


def _checkpoint_suite(gx):
    suite = gx.ExpectationSuite(name="mirrorflow.checkpoints")
    suite.add_expectation(gx.expectations.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="mirrored_downstream_end", column_B="checkpoint_downstream_offset",
        or_equal=True, description="No checkpoint points consumers past the flow's "
                                   "mirrored records."))
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


def run_suites(verdict_list: list[PartitionVerdict], cps: list[CheckpointVerdict],
               planned_records: int, records_frame, suites: list[dict],
               docs_dir: Path, run_name: str):
    """Run the GX suites, with a Data Docs site in ``docs_dir``. Suite name -> success,
    and the GX context that renders the docs (:func:`build_docs`)."""
    gx = import_gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
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
    columns = ["topic", "partition", "remote_topic", "source_records", "target_records",
               "source_digest", "target_digest", *FINDINGS]
    ranges_frame = pd.DataFrame([[getattr(v, c) for c in columns] for v in verdict_list
                                 if v.checked], columns=columns)
    cp_columns = ["group", "topic", "partition", "checkpoint_upstream_offset", "mirrored_end",
                  "checkpoint_downstream_offset", "mirrored_downstream_end"]
    cps_frame = pd.DataFrame([[getattr(c, name) for name in cp_columns] for c in cps
                              if c.checkpoint_downstream_offset is not None],
                             columns=cp_columns)
    runs = [(small, "ranges", ranges_frame, _completeness_suite(gx)),
            (small, "checkpoints", cps_frame, _checkpoint_suite(gx))]
    if suites:
        large = context.data_sources.add_spark(name="mirrorflow-records")
        runs += [(large, "records", records_frame, _suite_from_doc(gx, doc)) for doc in suites]
    parameters = {"planned_records": planned_records,
                  "checked_partitions": sum(1 for v in verdict_list if v.checked)}
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
    return outcome, context


def build_docs(context, docs_dir: Path, flow_name: str, run_id: str) -> None:
    """Render the Data Docs of the suites ``context`` ran into ``docs_dir`` and publish
    them to the run's reports. A failure is logged: the verdict stands without its HTML."""
    try:
        context.build_data_docs(site_names=["run"])
        reports.publish_docs(flow_name, run_id, docs_dir)
    except Exception as exc:
        log.warning("the Data Docs of run %s were not written to %s: %s", run_id,
                    reports.run_dir(flow_name, run_id), exc)


# --------------------------------------------------------------------------- the whole check


def validate_plan(spark, config: MirrorConfig, flow: FlowConfig, plan: Plan, result: dict,
                  run_id: str) -> Validation:
    """Compare the plan's ranges and the flow's unverified regions on both clusters, run
    the suites, start writing the Data Docs (:meth:`Validation.wait_for_docs`) and write
    the run's summary (the report step adds the commit's figures when the run goes on)."""
    started = time.monotonic()
    fraction = flow.get("mirrorflow.validate.fraction")
    verified = sample(plan, fraction)
    checks = scope(config, flow, plan, result, verified)
    validation = Validation(flow.name, run_id, plan.plan_id, True, fraction)
    # Only a run with something to read describes the remote topics (the suites read the
    # ranges' regions, which are among checks.regions).
    topic_ids = {flow.source: plan.topic_ids,
                 flow.target: remote_topic_ids(config, flow, plan) if checks.regions else {}}
    transfer, stored, view = flow.schema_transfer, {}, None
    if transfer is not None:
        stored = mapping.stored(PlanStore(config, flow).topic.read())
        view = mapping.ProofView.of(stored, transfer.include_headers)
    if checks.regions:
        no_timestamps, compacted = remote_topic_traits(
            config, flow, {r.remote_topic for r in checks.regions})
        found = compare(spark, config, flow, checks.ranges, checks.regions, no_timestamps,
                        flow.get("mirrorflow.records.per.spark.partition"), compacted,
                        restamp_ms=plan.created_ms, topic_ids=topic_ids, schemas=view)
        for rp, verdict in checks.verdicts.items():
            verdict.timestamps_compared = rp[0] not in no_timestamps
            if rp in found:
                _fill(verdict, found[rp])
        validation.notes += [f"{t}: timestamps not compared (message.timestamp.type = "
                             f"LogAppendTime on the target)" for t in sorted(no_timestamps)]
        validation.notes += [f"{t}: compacted on the target; the newest record of each key "
                             f"is compared" for t in sorted(compacted)]
    validation.notes += restamp_notes(plan, result)
    source_ends = {tp: w.high for tp, w in probe_watermarks(
        config.cluster(flow.source), [(r.topic, r.partition) for r in plan.ranges]).items()}
    verdict_list = sorted(checks.verdicts.values(), key=lambda v: (v.topic, v.partition))
    for verdict in verdict_list:
        if verdict.source_end is not None:
            verdict.lag = source_ends.get((verdict.topic, verdict.partition),
                                          verdict.source_end) - verdict.source_end
    validation.ranges = verdict_list
    validation.verified_records = sum(v.planned for v in verdict_list if v.verified)
    validation.planned_records = sum(v.planned for v in verdict_list)
    validation.checkpoints = checkpoint_verdicts(config, flow)
    suites = user_suites(expectations_dir(flow))
    records = None
    if suites and checks.ranges:
        from mirrorflow.spark.kafka_source import read_ranges

        records = read_ranges(spark, config.cluster(flow.target), [
            (r.remote_topic, r.partition, checks.verdicts[(r.remote_topic, r.partition)]
             .region_start, checks.verdicts[(r.remote_topic, r.partition)].region_end)
            for r in checks.ranges], isolation="read_committed", topic_ids=topic_ids[flow.target])
    elif suites:
        suites = []
    docs_dir = reports.docs_build_dir(flow.name, run_id)
    validation.expectations, context = run_suites(
        verdict_list, validation.checkpoints, validation.verified_records, records,
        suites, docs_dir, run_id)
    validation.start_docs(context, docs_dir)
    validation.failures = [p for v in verdict_list for p in v.problems()]
    validation.failures += [p for c in validation.checkpoints if (p := c.problem())]
    validation.failures += chain_findings(plan, checks.chains)
    if transfer is not None:
        validation.schemas, found_wrong = schema_check.check(config, flow, result, stored)
        validation.failures += found_wrong
    validation.failures += [f for r in result.get("ranges", []) for f in range_findings(r)]
    for v in verdict_list:
        if v.lost is None:
            continue
        what = (f"{v.topic}[{v.partition}]: offsets {v.lost[0]}..{v.lost[1] - 1} were removed "
                f"from the source (retention or DeleteRecords) after they were mirrored and "
                f"before the proof could compare them; their {v.unproven} copies on "
                f"{v.remote_topic}[{v.partition}] are unproven")
        if flow.get("failOnDataLoss"):
            validation.failures.append(
                f"{what}. Set {flow.name}.failOnDataLoss = false to accept them unproven "
                "(the rest of the range is proven), or reset the flow")
        else:
            validation.notes.append(f"{what} (accepted: failOnDataLoss = false)")
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
