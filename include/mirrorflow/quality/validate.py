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
  (:func:`digests.restamped`), is compared as that time, and the report counts them;
* checkpoints on the target: none may claim an upstream offset the flow has not mirrored
  (a consumer group that moved back is not a fault: MM2 emits its rewound checkpoint);
* the plan against the source partitions' chains (:func:`chain_findings`): each range
  starts where the flow's chain of its partition ends, in the same topic incarnation
  (topic id), or where a named break of the plan says; otherwise offsets were never
  planned (or planned twice), and the proof fails naming them.

A Great Expectations suite checks the verdicts (:mod:`mirrorflow.quality.verdicts`;
ephemeral context, pandas data source for the one-row-per-partition table, expected
values as parameters) and renders Data Docs; users add their own suites (JSON files in
the expectations directory) over the mirrored records, on Spark
(:mod:`mirrorflow.quality.suites`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.config.policy import PolicyError
from mirrorflow.kafka.watermarks import log_ends, log_starts
from mirrorflow.quality import reports, schema_check
from mirrorflow.quality.compare import (
    Compared,
    RangeCheck,
    RegionCheck,
    compacts,
    compare,
    proof_read,
)
from mirrorflow.quality.suites import build_docs, expectations_dir, run_suites, user_suites
from mirrorflow.quality.sync_check import range_findings
from mirrorflow.quality.verdicts import (
    CheckpointVerdict,
    PartitionVerdict,
    TopicPart,
    Validation,
)
from mirrorflow.schema import mapping
from mirrorflow.source import history, ledger
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan_records import Plan, Range
from mirrorflow.source.plan_store import PlanStore

log = logging.getLogger(__name__)

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


def _may_write(config: MirrorConfig, flow: FlowConfig, alias: str,
               remote_topics: set[str]) -> bool:
    """Whether the flow from ``alias`` into ``flow``'s target may have written any of
    ``remote_topics``. A flow of this config whose policy names remote topics as MM2's
    default does (``{alias}{separator}{topic}``) writes only topics with that prefix, so
    its state need not be read: it holds entries for every partition that flow mirrors
    (a one-partition flow's proof spent 0.2 s a run reading those of a 10,000-partition
    flow on the same target). Any other policy (IdentityReplicationPolicy: fan-in), or an
    alias this config has no flow from, may have."""
    other = config.flows.get((alias, flow.target))
    if other is None:
        return True
    try:
        prefix = other.policy().remote_topic_prefix(alias)
    except PolicyError:
        return True
    return prefix is None or any(topic.startswith(prefix) for topic in remote_topics)


def _others_spans(config: MirrorConfig, flow: FlowConfig,
                  partitions: set[TopicPart]) -> dict[TopicPart, list[tuple[int, int]]]:
    """Remote offsets other flows' records occupy in these remote partitions (fan-in):
    their kept history and the spans of their pending plans, of the flows that may have
    written them (:func:`_may_write`). All these topics are read at once: each read
    mostly waits on the broker."""
    target = config.cluster(flow.target)
    topics = {topic for topic, _ in partitions}
    aliases = [alias for alias in history.other_flows(target, flow.source)
               if _may_write(config, flow, alias, topics)]
    if not aliases:
        return {}
    with ThreadPoolExecutor(min(2 * len(aliases), 8), "fan-in spans") as pool:
        owned = pool.map(lambda a: history.HistoryStore(target, a).read_all(
            history.OWNED).remote, aliases)
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
    kept = history.HistoryStore(target, flow.source).read_all(history.OWNED, history.CHAIN)
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
    lows = log_starts(source, reread)
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
    ends = log_ends(target, list(starts))
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
            {t for t, e in described.items() if compacts(e)})


def compaction_notes(found: dict[TopicPart, Compared], compacted: set[str],
                     verdicts: Iterable[PartitionVerdict]) -> list[str]:
    """Per remote topic compared on the newest record of each key, where it is compacted;
    per partition, the records a compacted source removed that newer ones prove."""
    at_source: dict[str, bool] = {}
    for (topic, _), item in found.items():
        if item.newest_per_key:
            at_source[topic] = at_source.get(topic, False) or item.source_compacted
    notes = []
    for topic, source in sorted(at_source.items()):
        where = [w for w, yes in (("the source", source), ("the target", topic in compacted))
                 if yes]
        notes.append(f"{topic}: compacted on {' and '.join(where)}; the newest record of "
                     f"each key is compared")
    return notes + [f"{v.remote_topic}[{v.partition}]: {v.superseded} records the source's "
                    f"cleaner removed after the mirror read them are proven by newer records "
                    f"of their keys" for v in verdicts if v.superseded]


def restamp_notes(plan: Plan, result: dict) -> list[str]:
    """Per range whose writer gave records the plan's time (:func:`digests.restamped`)."""
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
    if found.source_compacted and found.equal and verdict.source_records < verdict.planned:
        # Records the source's cleaner removed for newer ones of their keys: accounted for.
        verdict.superseded = verdict.planned - verdict.source_records
        verdict.source_records += verdict.superseded
        verdict.target_records += verdict.superseded
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


RESULTS_PART = "gx-results"  # the suites' results of the run's last proof, for its Data Docs


def keep_results(flow_name: str, run_id: str, plan_id: str, results: list[dict]) -> None:
    """Keep the suites' results (JSON) beside the run's report, for whichever process
    renders the Data Docs (the DAG's ``validate`` task: :func:`docs_of`)."""
    reports.write_part(flow_name, run_id, RESULTS_PART, {"plan_id": plan_id, "results": results})


def docs_of(validation: Validation) -> None:
    """Hold the rendering of ``validation``'s Data Docs (a verdict read back from the plan
    store) from the suites' results kept with its run; where they are not there (a driver
    on a cluster, whose reports directory is not shared), it has none, said in the log."""
    kept = reports.read_part(validation.flow, validation.run_id, RESULTS_PART)
    if kept is None or kept.get("plan_id") != validation.plan_id:
        log.warning("plan %s: no suite results in %s; its Data Docs are not rendered",
                    validation.plan_id, reports.run_dir(validation.flow, validation.run_id))
        validation.data_docs = None
        return
    _defer_docs(validation, kept["results"])


def _defer_docs(validation: Validation, results: list[dict]) -> None:
    """Hold the rendering of the Data Docs of the suites' ``results`` into the run's
    reports (:meth:`Validation.defer_docs`)."""
    validation.defer_docs(functools.partial(
        build_docs, results, reports.docs_build_dir(validation.flow, validation.run_id),
        validation.flow, validation.run_id))


# --------------------------------------------------------------------------- the whole check


def validate_plan(spark, config: MirrorConfig, flow: FlowConfig, plan: Plan, result: dict,
                  run_id: str) -> Validation:
    """Compare the plan's ranges and the flow's unverified regions on both clusters, run
    the suites, keep their results for the Data Docs (:func:`keep_results`; their
    rendering held: :meth:`Validation.defer_docs`) and write the run's summary (the
    report step adds the commit's figures when the run goes on)."""
    started = time.monotonic()
    fraction = flow.get("mirrorflow.validate.fraction")
    verified = sample(plan, fraction)
    checks = scope(config, flow, plan, result, verified)
    validation = Validation(flow.name, run_id, plan.plan_id, True, fraction)
    # Only a run with something to read describes the remote topics (the suites read the
    # ranges' regions, which are among checks.regions).
    transfer, stored, view = flow.schema_transfer, {}, None
    if transfer is not None:
        stored = mapping.stored(PlanStore(config, flow).topic.read())
        view = mapping.ProofView.of(stored, transfer.include_headers)
    if checks.regions:
        no_timestamps, compacted = remote_topic_traits(
            config, flow, {r.remote_topic for r in checks.regions})
        found = compare(spark, config, flow, checks.ranges, checks.regions, no_timestamps,
                        flow.get("mirrorflow.records.per.spark.partition"), compacted,
                        restamp_ms=plan.created_ms, schemas=view)
        for rp, verdict in checks.verdicts.items():
            verdict.timestamps_compared = rp[0] not in no_timestamps
            if rp in found:
                _fill(verdict, found[rp])
        validation.notes += [f"{t}: timestamps not compared (message.timestamp.type = "
                             f"LogAppendTime on the target)" for t in sorted(no_timestamps)]
        validation.notes += compaction_notes(found, compacted, checks.verdicts.values())
    validation.notes += restamp_notes(plan, result)
    source_ends = log_ends(config.cluster(flow.source),
                           [(r.topic, r.partition) for r in plan.ranges])
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
        records = proof_read(spark, config.cluster(flow.target), [
            (r.remote_topic, r.partition, checks.verdicts[(r.remote_topic, r.partition)]
             .region_start, checks.verdicts[(r.remote_topic, r.partition)].region_end)
            for r in checks.ranges], None, "read_committed", flow=flow)
    elif suites:
        suites = []
    validation.expectations, results = run_suites(
        verdict_list, validation.checkpoints, validation.verified_records, records,
        suites, run_id)
    keep_results(flow.name, run_id, plan.plan_id, results)
    _defer_docs(validation, results)
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
