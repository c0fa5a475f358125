"""The completeness check's comparison, in Spark SQL: no record enters Python.

Both clusters are read by mirrorflow's range source in one scan. Every record becomes a 64-bit
digest (``xxhash64`` of key, value, headers, timestamp and their nullness; the timestamp
is left out where the remote topic stamps its own, ``LogAppendTime``, and a source
timestamp at or before the epoch counts as the plan's time the writer gave it).

* Each **source** record of a range gets the remote offset the mirror's spans say it went
  to: its upstream offset plus the distance of the sync run it falls in (a broadcast join
  on a bucket of offsets, so each record meets one or two runs). A range whose offsets
  were contiguous and written whole by one attempt is not read again: its writer
  aggregated the digests the mirror's read computed with the remote offsets it got
  (:mod:`mirrorflow.quality.digests`), and the source log at those offsets is immutable.
* Each **target** record of the remote partition's unverified region gets its owner: the
  flow's own spans (this plan's records), another flow's spans (fan-in), or none: a
  foreign record. Where no other flow writes and no compaction thins the remote topic,
  every record is first taken as the flow's own (equal aggregates then prove none lies
  outside the spans), and the tasks reading the target sum its records themselves (the
  range source's ``digests``: no row per record, no shuffle); partitions whose
  aggregates differ are looked at again exactly, record by record.

A **compacted** remote topic may lose a record to the target's log cleaner as soon as a
newer record of its key is written. It is compared like any other first: the cleaner
rarely reaches a range within its run (never the active segment), and then equal
aggregates prove every record, from one read of the target. Where they differ, it is
compared again exactly, and on both sides only the newest record of each key in the range
counts (what compaction keeps, and what a consumer ends up with).

A **compacted source** topic loses records the same way, on the source, between the
mirror and a proof that reads the range again (a range with gaps, such as transaction
markers, or a retried plan): even the newest record of a key in the range goes once a
newer one follows the range. Where aggregates differ, such a range is compared on the
newest record of each key too, and a key the range's source no longer holds at all counts
as proven where the source holds a record of it after the range (read on to its end,
keys only), or its record is a tombstone: the cleaner removes a record only for a newer
one of its key, and a tombstone after ``delete.retention.ms``. A record the
source still holds is never excused, so a record the mirror lost is still named.

Per range, count and ``bit_xor(xxhash64(digest, remote offset))`` over the source
records and over the flow's own target records are equal exactly when every source
record sits at the remote offset claimed for it, with equal content, and nothing else
sits in the flow's spans (up to a 64-bit hash collision). So equal aggregates prove a
range, and, where the source was read, its offset syncs too (a range aggregated by its
writer places records at the remote offsets they got, from which its syncs were derived).
Only a range whose aggregates differ is joined
record by record, on the remote offset, to name what is missing, duplicated, altered or
misplaced and where the first difference is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.quality.digests import record_digest, restamped
from mirrorflow.schema.mapping import ProofView
from mirrorflow.schema.wire import rewrite_sql
from mirrorflow.source.plan_records import write_slots
from mirrorflow.spark.kafka_source import grouped, read_groups, read_tasks

BUCKET = 1 << 16  # offsets per join bucket
KEY = ["remote_topic", "partition"]


@dataclass(frozen=True)
class RangeCheck:
    """One planned range: where its records came from and where its spans put them."""

    topic: str
    partition: int
    remote_topic: str
    start: int
    end: int
    syncs: tuple[tuple[int, int], ...]  # (upstream, downstream) where the distance changes
    written: dict | None = None  # the writer's aggregates (its result's source_digest)


@dataclass(frozen=True)
class RegionCheck:
    """The unverified region ``[start, end)`` of one remote partition and who owns what."""

    remote_topic: str
    partition: int
    start: int
    end: int
    own: tuple[tuple[int, int], ...] = ()  # [first, last] remote offsets of this flow
    others: tuple[tuple[int, int], ...] = ()  # of other flows writing the partition


@dataclass
class Counts:
    """Aggregates of one side of one remote partition."""

    records: int = 0
    digest: int | None = None
    first: int | None = None
    last: int | None = None
    compared: int | None = None  # records counted (compacted topics: newest per key)

    def __post_init__(self) -> None:
        if self.compared is None:
            self.compared = self.records


@dataclass
class Compared:
    """The comparison of one remote partition: its range (if planned) and its region."""

    source: Counts = field(default_factory=Counts)
    target: Counts = field(default_factory=Counts)
    foreign_records: int = 0
    first_foreign_offset: int | None = None
    missing: int = 0
    duplicates: int = 0
    altered: int = 0
    misplaced: int = 0
    first_bad_source_offset: int | None = None
    first_bad_target_offset: int | None = None
    newest_per_key: bool = False  # compared as compacted: the newest record of each key
    source_compacted: bool = False  # ... because the source's cleaner compacts it

    @property
    def equal(self) -> bool:
        return (self.source.compared, self.source.digest) == (self.target.compared,
                                                              self.target.digest)


def _runs(check: RangeCheck) -> list[tuple[int, int, int | None]]:
    """(first upstream, end upstream, distance) runs over the range; offsets before the
    first sync have no claimed place (distance None)."""
    syncs = sorted(check.syncs)
    out: list[tuple[int, int, int | None]] = []
    if not syncs or syncs[0][0] > check.start:
        out.append((check.start, syncs[0][0] if syncs else check.end, None))
    for i, (up, down) in enumerate(syncs):
        end = syncs[i + 1][0] if i + 1 < len(syncs) else check.end
        out.append((up, max(end, up + 1), down - up))
    return out


def _bucketed(rows: Iterable[tuple], lo_index: int, hi_index: int) -> list[tuple]:
    """Each row once per offset bucket its [lo, hi) interval touches (for an equi-join)."""
    out = []
    for row in rows:
        lo, hi = row[lo_index], row[hi_index]
        for bucket in range(lo // BUCKET, (max(hi, lo + 1) - 1) // BUCKET + 1):
            out.append((*row, bucket))
    return out


def _in(column, values: Iterable[str], F):
    """``column IN values``, false for no values."""
    values = sorted(set(values))
    return column.isin(values) if values else F.lit(False)


def compare(spark, config: MirrorConfig, flow: FlowConfig, ranges: list[RangeCheck],
            regions: list[RegionCheck], no_timestamps: set[str],
            split_records: int | None = None, compacted: set[str] = frozenset(),
            exact: bool = False, restamp_ms: int = 0, *,
            schemas: ProofView | None = None,
            source_compacted: set[str] = frozenset()) -> dict[tuple[str, int], Compared]:
    """Per remote partition: the range's aggregates on both sides, the region's foreign
    records and, where the aggregates differ, the record-by-record findings.
    ``no_timestamps`` are the remote topics whose timestamps are not compared;
    ``compacted`` those the target's log cleaner compacts: compared record by record
    first, and where that differs, on the newest record of each key. ``exact`` (for a
    second look at unequal partitions): read every range's source, look up the owner
    of every target record, and count compacted topics' newest records only.
    ``restamp_ms``: the plan's time, which the writer gave source records stamped at or
    before the epoch (:func:`digests.restamped`). ``schemas``: a schema transfer's id
    mappings, as the comparison applies them. ``source_compacted``: the remote topics whose
    source topic the source's cleaner compacts (asked of the source, where a first pass
    finds partitions unequal)."""
    from pyspark.sql import functions as F

    out: dict[tuple[str, int], Compared] = {(r.remote_topic, r.partition): Compared()
                                             for r in regions}
    sides = []
    remote_of = {r.topic: r.remote_topic for r in ranges}
    # Only an exact pass counts the newest record of each key of a compacted topic.
    thinned = compacted if exact else frozenset()
    # Ranges whose writer gave the source side's aggregates are not read again (not where
    # only the newest record of a key counts).
    unusable = thinned | (schemas.ambiguous if schemas else set())
    written = {(r.remote_topic, r.partition): r.written for r in ranges
               if r.written and r.remote_topic not in unusable}
    for key, w in written.items():
        digest = w["xor_no_ts"] if key[0] in no_timestamps else w["xor"]
        out.setdefault(key, Compared()).source = Counts(w["records"], digest, w["first"],
                                                        w["last"])
    unread = [r for r in ranges if (r.remote_topic, r.partition) not in written]
    if unread:
        sides.append(_source_side(spark, F, config, flow, unread, remote_of, no_timestamps,
                                  split_records, restamp_ms, schemas))
    readable = [r for r in regions if r.end > r.start]
    # Where no other flow writes, every target record is first taken as this flow's:
    # equal aggregates then prove that each one sits at a remote offset claimed for a
    # source record, so none lies outside the spans, without looking up each record's
    # owner. Unequal partitions are compared again, exactly. Then the reading tasks sum
    # the target's records themselves (ids mapped back first): no row per record.
    assumed = not exact and all(not r.others for r in readable)
    summed = bool(readable) and assumed
    if summed:
        for key, counts in _target_sums(spark, config, flow, readable, no_timestamps,
                                        split_records, schemas).items():
            out.setdefault(key, Compared()).target = counts
    elif readable:
        sides.append(_target_side(spark, F, config, flow, readable, no_timestamps,
                                  split_records, assumed, schemas))
    if not sides and not summed:
        return out
    tails = [r for r in ranges if r.remote_topic in thinned & source_compacted]
    if sides and tails and (tail := _source_tail(spark, F, config, flow, tails, remote_of,
                                                 split_records)):
        sides.append(tail)
    records = kept = None
    if sides:
        union = sides[0]
        for side in sides[1:]:
            union = union.unionByName(side)
        records = _newest_per_key(F, union, thinned, source_compacted)
        kept = F.col("kept")
        rows = (records.where(~F.col("side").isin("o", "x"))
                .groupBy("side", *KEY)
                .agg(F.count("*").alias("all"), F.count(F.when(kept, 1)).alias("n"),
                     F.bit_xor(F.when(kept, F.xxhash64("digest", "d"))).alias("x"),
                     F.min("d").alias("first"), F.max("d").alias("last"))
                .collect())
        for row in rows:
            item = out.setdefault((row["remote_topic"], row["partition"]), Compared())
            if row["side"] == "f":
                item.foreign_records, item.first_foreign_offset = row["all"], row["first"]
            else:
                setattr(item, "source" if row["side"] == "s" else "target",
                        Counts(row["all"], row["x"], row["first"], row["last"], row["n"]))
    for item in out.values():
        # Records older than a newer one of their key may be gone from a compacted
        # target; they count as there when the newest ones are.
        item.target.records = (item.target.compared + item.source.records
                               - item.source.compared)
    for key, item in out.items():
        item.newest_per_key = key[0] in thinned
        item.source_compacted = item.newest_per_key and key[0] in source_compacted
    unequal = [key for key, item in out.items() if not item.equal]
    if unequal and not exact:
        differ = set(unequal)
        source_compacted = {remote_of[t] for t in compacted_topics(
            config.cluster(flow.source),
            {r.topic for r in ranges if (r.remote_topic, r.partition) in differ})}
        compacted = set(compacted) | source_compacted
    again = [key for key in unequal
             if key in written or assumed or (not exact and key[0] in compacted)]
    if again:  # to name what differs, read those ranges' source and owners after all
        out.update(compare(
            spark, config, flow,
            [replace(r, written=None) for r in ranges if (r.remote_topic, r.partition) in again],
            [r for r in regions if (r.remote_topic, r.partition) in again], no_timestamps,
            split_records, compacted, exact=True, restamp_ms=restamp_ms,
            schemas=schemas, source_compacted=source_compacted))
        unequal = [key for key in unequal if key not in again]
    if unequal:  # an exact pass: read by Spark SQL (records)
        for key, found in _diagnose(spark, F, records.where(kept), unequal).items():
            for name, value in found.items():
                setattr(out[key], name, value)
    return out


def compacted_topics(cluster, topics: Iterable[str]) -> set[str]:
    """Of ``topics`` on ``cluster``, those its log cleaner compacts (one request)."""
    from mirrorflow.source.topic_sync import describe_configs

    return {t for t, entries in describe_configs(cluster, sorted(set(topics))).items()
            if compacts(entries)}


def compacts(entries: Mapping) -> bool:
    """Whether a topic's described config entries make the log cleaner compact it."""
    return "compact" in (getattr(entries.get("cleanup.policy"), "value", None) or "")


def _newest_per_key(F, records, compacted: set[str], source_compacted: set[str]):
    """Mark (``kept``) what the comparison counts: every record, except on compacted
    remote topics, where of the flow's own records only the newest of each key per side
    counts (foreign records always do). Where the source's cleaner compacts the topic
    (``source_compacted``), a target record of a key the range's source no longer holds
    is superseded, not counted, when the source's tail (side ``x``) holds a newer record of
    its key or it is a tombstone (which the cleaner drops after ``delete.retention.ms``)."""
    if not compacted:
        return records.drop("k", "tombstone").withColumn("kept", F.lit(True))
    from pyspark.sql import Window

    side = F.col("side")
    mine = _in(F.col("remote_topic"), compacted, F) & side.isin("s", "t", "x")
    place = F.when(side == "s", F.col("u")).otherwise(F.col("d"))
    newest = F.max(place).over(Window.partitionBy("side", *KEY, "k"))
    of_key = Window.partitionBy(*KEY, "k")
    gone = (F.max((side == "s").cast("int")).over(of_key) == 0) & _in(
        F.col("remote_topic"), source_compacted, F)
    superseded = gone & ((F.max((side == "x").cast("int")).over(of_key) == 1)
                         | F.col("tombstone"))
    return (records.where(~mine).withColumn("kept", F.lit(True))
            .unionByName(records.where(mine).withColumn(
                "kept", (place == newest) & ~((side == "t") & superseded)))
            .drop("k", "tombstone"))


def _with_ids(F, frame, maps: dict[str, dict[tuple[str, int], int]], topic_of=None):
    """``frame`` with the schema ids of its keys and values rewritten by ``maps`` (per
    part, keyed (remote topic, id); ``topic_of``: a record's topic -> its remote topic)."""
    source_of = {remote: topic for topic, remote in (topic_of or {}).items()}
    for part, table in maps.items():
        if table:
            if topic_of:  # source records: key the table by source topic
                table = {(source_of[t], i): v for (t, i), v in table.items() if t in source_of}
            frame = frame.withColumn(part, rewrite_sql(F, part, "topic", table))
    return frame


def _source_side(spark, F, config, flow, ranges, remote_of, no_timestamps, split,
                 restamp_ms: int, schemas: ProofView | None):
    """(side 's', remote_topic, partition, d = the claimed remote offset, u, digest)."""
    frame = proof_read(spark, config.cluster(flow.source),
                       [(r.topic, r.partition, r.start, r.end) for r in ranges], split,
                       flow=flow)
    if schemas:
        frame = _with_ids(F, frame, schemas.same, remote_of)
    remote = _remote_topic(F, remote_of)
    # Each run's row carries the plan's time (at_ms) for the restamp: a column, so that
    # every proof's generated code is the same (see digests.restamped).
    runs = [(r.topic, r.partition, lo, hi, delta, restamp_ms)
            for r in ranges for lo, hi, delta in _runs(r)]
    return _lookup(spark, F, frame, runs, "long", "at_ms long").select(
        F.lit("s").alias("side"), remote.alias("remote_topic"), "partition",
        (F.col("offset") + F.col("found")).alias("d"), F.col("offset").alias("u"),
        record_digest(F, ~_in(remote, no_timestamps, F), restamped(F, F.col("at_ms")),
                      headers=not schemas or schemas.headers).alias("digest"),
        F.col("key").alias("k"), F.col("value").isNull().alias("tombstone"))


def _remote_topic(F, remote_of: Mapping[str, str]):
    """The remote topic of a source record's ``topic`` (``remote_of``: topic -> remote)."""
    return F.create_map(*[F.lit(x) for pair in remote_of.items() for x in pair])[
        F.col("topic")]


def _source_tail(spark, F, config, flow, ranges, remote_of, split):
    """(side 'x', remote_topic, partition, k): the keys the source holds after each range,
    up to its end now (what excuses a key the range's source no longer holds)."""
    from mirrorflow.kafka.watermarks import log_ends

    source = config.cluster(flow.source)
    ends = log_ends(source, [(r.topic, r.partition) for r in ranges], source.isolation_level())
    tails = [(r.topic, r.partition, r.end, ends[(r.topic, r.partition)])
             for r in ranges if ends[(r.topic, r.partition)] > r.end]
    if not tails:
        return None
    frame = proof_read(spark, source, tails, split, flow=flow)
    return frame.select(
        F.lit("x").alias("side"), _remote_topic(F, remote_of).alias("remote_topic"),
        "partition",
        F.lit(None).cast("long").alias("d"), F.col("offset").alias("u"),
        F.lit(None).cast("long").alias("digest"), F.col("key").alias("k"),
        F.lit(False).alias("tombstone"))


def _target_sums(spark, config, flow, regions, no_timestamps, split,
                 schemas: ProofView | None) -> dict[tuple[str, int], Counts]:
    """The target side of an assumed comparison (every record the flow's own; a schema
    transfer's ids mapped back to the source's), summed per partition by the tasks that
    read it (the range source's ``digests``: the same digests and sums as
    :func:`_target_side` and :func:`compare`'s SQL give, without a row per record or a
    shuffle). A partition read in pieces by several tasks has a row from each."""
    back: dict[str, dict[str, dict[str, int]]] = {}
    for part, table in (schemas.back if schemas else {}).items():
        for (topic, target_id), source_id in table.items():
            back.setdefault(topic, {}).setdefault(part, {})[str(target_id)] = source_id
    sums: dict[tuple[str, int], list[int]] = {}
    for row in proof_read(spark, config.cluster(flow.target),
                          [(r.remote_topic, r.partition, r.start, r.end) for r in regions],
                          split, "read_committed", flow=flow, digests=True,
                          schema_ids=back).collect():
        key = (row["topic"], row["partition"])
        x = row["xor_no_ts"] if row["topic"] in no_timestamps else row["xor"]
        n, digest, first, last = sums.get(key, (0, 0, row["first"], row["last"]))
        sums[key] = [n + row["records"], digest ^ x, min(first, row["first"]),
                     max(last, row["last"])]
    return {key: Counts(n, digest, first, last) for key, (n, digest, first, last) in sums.items()}


def _target_side(spark, F, config, flow, regions, no_timestamps, split, assumed: bool,
                 schemas: ProofView | None):
    """(side 't' own / 'o' another flow's / 'f' foreign, remote_topic, partition, d, u
    null, digest); ``assumed``: every record 't' (see :func:`compare`)."""
    # What a read_committed consumer sees: a zombie's aborted writes are not there.
    frame = proof_read(spark, config.cluster(flow.target),
                       [(r.remote_topic, r.partition, r.start, r.end) for r in regions], split,
                       "read_committed", flow=flow)
    if schemas:  # each record as its source was: its source schema ids
        frame = _with_ids(F, frame, schemas.back)
    records = frame.select(
        "topic", "partition", "offset",
        record_digest(F, ~_in(F.col("topic"), no_timestamps, F)).alias("digest"),
        F.col("key").alias("k"), F.col("value").isNull().alias("tombstone"))
    if assumed:
        records = records.withColumn("found", F.lit("t"))
    else:
        records = _lookup(spark, F, records, [
            (r.remote_topic, r.partition, first, last + 1, owner)
            for r in regions for owner, spans in (("t", r.own), ("o", r.others))
            for first, last in spans if last >= r.start and first < r.end], "string")
    return records.select(
        F.coalesce("found", F.lit("f")).alias("side"), F.col("topic").alias("remote_topic"),
        "partition", F.col("offset").alias("d"), F.lit(None).cast("long").alias("u"),
        "digest", "k", "tombstone")


def proof_read(spark, cluster, ranges: list[tuple[str, int, int, int]], split: int | None,
               isolation: str | None = None, *, flow: FlowConfig, digests: bool = False,
               schema_ids: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None):
    """The records of ``ranges`` in groups as many as the flow writes such ranges in
    (:func:`~mirrorflow.source.plan_records.write_slots`), or one per ``split`` records
    where that is more (the comparison aggregates; order is moot), merged by a local Spark
    into at most one task (one consumer) per core. A Spark task costs scheduling
    and a consumer on top of its read: measured, 1,000 ranges of 3 records on 2 cores
    checked in 9.3 s as 1,000 tasks, 4.0 s as 64, 2.9 s as 8; 2,000,000 records of 8
    partitions in 1.3 to 1.6 s as 8 tasks, 0.9 to 1.1 s as 2."""
    sizes = [end - start for *_, start, end in ranges]
    tasks = read_tasks(sizes, write_slots(flow, sizes), split)
    return read_groups(spark, cluster, grouped(ranges, tasks, split), isolation, digests,
                       schema_ids, coalesce=True)


def _lookup(spark, F, frame, intervals: list[tuple], kind: str, more: str = ""):
    """``frame`` (``topic``, ``partition``, ``offset``, ...) with ``found``: the value of
    the interval of ``(topic, partition, lo, hi, value, *more)`` ``intervals`` whose
    ``[lo, hi)`` holds the record's offset, null where none does (``more``: the schema of
    the intervals' further values, which come along): a broadcast equi-join on offset
    buckets, so that each record meets one or two intervals."""
    table = spark.createDataFrame(
        _bucketed(intervals, 2, 3), f"i_topic string, i_partition int, lo long, hi long, "
                                    f"found {kind}, {more + ', ' if more else ''}i_bucket long")
    bucketed = frame.withColumn("bucket", F.floor(F.col("offset") / BUCKET))
    return bucketed.join(
        F.broadcast(table),
        (F.col("topic") == F.col("i_topic")) & (F.col("partition") == F.col("i_partition"))
        & (F.col("bucket") == F.col("i_bucket")) & (F.col("offset") >= F.col("lo"))
        & (F.col("offset") < F.col("hi")), "left")


def _diagnose(spark, F, records, keys: list[tuple[str, int]]) -> dict[tuple[str, int], dict]:
    """For partitions whose aggregates differ: the multiset (missing, duplicated, altered
    records), the records not where the spans claim, and the first difference."""
    wanted = F.broadcast(spark.createDataFrame(keys, "remote_topic string, partition int"))
    mine = records.join(wanted, KEY).where(F.col("side").isin("s", "t"))
    source = mine.where(F.col("side") == "s").select(
        F.col("remote_topic").alias("s_topic"), F.col("partition").alias("s_partition"),
        F.col("d").alias("s_d"), F.col("u").alias("s_u"), F.col("digest").alias("s_digest"))
    target = mine.where(F.col("side") == "t").select(
        F.col("remote_topic").alias("t_topic"), F.col("partition").alias("t_partition"),
        F.col("d").alias("t_d"), F.col("digest").alias("t_digest"))
    pairs = source.join(target, (F.col("s_topic") == F.col("t_topic"))
                        & (F.col("s_partition") == F.col("t_partition"))
                        & (F.col("s_d") == F.col("t_d")), "full_outer").select(
        F.coalesce("s_topic", "t_topic").alias("remote_topic"),
        F.coalesce("s_partition", "t_partition").alias("partition"),
        "s_u", "s_d", "t_d", "s_digest", "t_digest")
    bad = ~F.col("s_digest").eqNullSafe(F.col("t_digest"))
    order = pairs.groupBy(*KEY).agg(
        F.sum(bad.cast("long")).alias("misplaced"),
        F.min(F.when(bad, F.struct(F.coalesce("s_d", "t_d").alias("at"), "s_u", "t_d"))
              ).alias("first_bad"))
    counts = (source.groupBy(F.col("s_topic").alias("remote_topic"),
                             F.col("s_partition").alias("partition"),
                             F.col("s_digest").alias("digest")).agg(F.count("*").alias("s_n"))
              .join(target.groupBy(F.col("t_topic").alias("remote_topic"),
                                   F.col("t_partition").alias("partition"),
                                   F.col("t_digest").alias("digest")).agg(
                  F.count("*").alias("t_n")), [*KEY, "digest"], "full_outer")
              .fillna(0, ["s_n", "t_n"]))
    multiset = counts.groupBy(*KEY).agg(
        F.sum(F.greatest(F.col("s_n") - F.col("t_n"), F.lit(0))).alias("missing"),
        F.sum(F.when(F.col("s_n") > 0, F.greatest(F.col("t_n") - F.col("s_n"), F.lit(0)))
              .otherwise(0)).alias("duplicates"),
        F.sum(F.when(F.col("s_n") == 0, F.col("t_n")).otherwise(0)).alias("altered"))
    out = {}
    for row in order.join(multiset, KEY, "left").collect():
        first = row["first_bad"]
        out[(row["remote_topic"], row["partition"])] = {
            "misplaced": int(row["misplaced"] or 0), "missing": int(row["missing"] or 0),
            "duplicates": int(row["duplicates"] or 0), "altered": int(row["altered"] or 0),
            "first_bad_source_offset": first["s_u"] if first else None,
            "first_bad_target_offset": first["t_d"] if first else None}
    return out
