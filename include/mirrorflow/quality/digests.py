"""A record's digest and its placement hash, alike in Spark SQL and in numpy.

The proof (:mod:`mirrorflow.quality.compare`) aggregates per range
``bit_xor(xxhash64(digest, remote offset))``. The mirror's Spark task computes each
record's digest in the JVM as it reads the record (:func:`record_digest`), and its writer,
which learns every record's remote offset, adds the placement hash in numpy
(:class:`RangeDigest`): Spark's ``xxhash64`` of two longs is XXH64's ``hashLong`` chained
from seed 42, reproduced here bit for bit. Where a range's offsets are contiguous and one
attempt wrote all of it, the writer's aggregates are the source side's, and the proof
reads only the target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEED = np.uint64(42)  # Spark's seed for xxhash64
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


def record_digest(F, with_timestamp, timestamp=None, headers: bool = True):
    """A record's digest (Spark SQL); ``with_timestamp`` (a boolean column) says whether
    its timestamp counts, ``timestamp`` is the one that does (the record's own unless
    given: :func:`restamped` for a source record). Spark's hash skips nulls, so nullness
    is hashed too. Headers are hashed as their JSON (a null value left out, so told from
    an empty one): cheaper than hashing the nested column (see
    ``kafka_source.for_writer``). The timestamp comes last, so the digest with it is
    XXH64's ``hashLong`` of the timestamp seeded with the digest without it
    (:func:`with_timestamps`). Without ``headers`` (a source record whose headers the
    schema transfer drops), the record is hashed as if it had none."""
    no_headers = F.col("headers").isNull() if headers else F.lit(True)
    flags = [F.col("key").isNull(), F.col("value").isNull(), no_headers]
    headers = F.to_json("headers") if headers else F.lit(None).cast("string")
    stamp = F.col("timestamp") if timestamp is None else timestamp
    return F.when(with_timestamp,
                  F.xxhash64("key", "value", headers, *flags, stamp)).otherwise(
        F.xxhash64("key", "value", headers, *flags))


# A source timestamp at or before the epoch cannot be written as it is: librdkafka stamps a
# produce timestamp of 0 (CreateTime 0, 1970-01-01) with the time of the call, and -1 is a
# record without one (the old message formats), which MM2 writes with its producer's time.
# Such a record is written with its plan's time instead, the same in every attempt of the
# plan, so that the proof knows the timestamp the target holds: restamp (Arrow, writer)
# and restamped (Spark SQL, proof) are one rule.

def restamp(batch, at_ms: int):
    """``(batch, count)``: the Arrow batch with every timestamp at or before the epoch (or
    null) set to ``at_ms``, and how many were."""
    import pyarrow as pa
    import pyarrow.compute as pc

    i = batch.schema.get_field_index("timestamp")
    column = batch.column(i)
    micros = column.cast(pa.int64())
    old = pc.fill_null(pc.less_equal(micros, 0), True)
    count = pc.sum(old).as_py() or 0
    if not count:
        return batch, 0
    fixed = pc.if_else(old, pa.scalar(at_ms * 1000, pa.int64()), micros).cast(column.type)
    columns = [fixed if j == i else batch.column(j) for j in range(batch.num_columns)]
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema), count


def restamped(F, at_ms):
    """Spark's side of :func:`restamp`: the timestamp a source record has on the target.
    ``at_ms``: a column of the plan's time, not a literal: Spark writes a long literal into
    the code it generates, and a query whose code is new is compiled anew (every proof,
    each of its stages: 60-100 ms of CPU a class on an idle machine)."""
    stamp = F.col("timestamp")
    return F.when(stamp.isNull() | (stamp <= F.timestamp_millis(F.lit(0))),
                  F.timestamp_millis(at_ms)).otherwise(stamp)


def writer_columns(F, headers: bool = True) -> list:
    """The digest the mirror's read hands its writer: without the timestamp (the writer
    has the timestamp and adds it in numpy; whether the remote topic keeps timestamps is
    the proof's to decide). One hash per record in the JVM instead of two."""
    return [record_digest(F, F.lit(False), headers=headers).alias("digest_no_ts")]


def with_timestamps(digests_no_ts: np.ndarray, timestamps) -> np.ndarray:
    """Spark's :func:`record_digest` with the timestamp, from the one without it and the
    Arrow timestamp column (microseconds, as Spark hashes a timestamp; a null timestamp
    leaves the digest as it is, as Spark's hash skips nulls)."""
    seeds = np.ascontiguousarray(digests_no_ts, dtype=np.int64).view(np.uint64)
    micros = timestamps.cast("int64")
    values = micros.fill_null(0).to_numpy().astype(np.int64).view(np.uint64)
    hashed = _hash_long(values, seeds)
    if micros.null_count:
        hashed = np.where(micros.is_null().to_numpy(zero_copy_only=False), seeds, hashed)
    return hashed.view(np.int64)


def _rotl(x: np.ndarray, bits: int) -> np.ndarray:
    return (x << np.uint64(bits)) | (x >> np.uint64(64 - bits))


def _hash_long(values: np.ndarray, seed) -> np.ndarray:
    """XXH64 ``hashLong`` of each uint64 value (Spark's ``XXH64.hashLong``)."""
    with np.errstate(over="ignore"):
        h = seed + _P5 + np.uint64(8)
        h = h ^ (_rotl(values * _P2, 31) * _P1)
        h = _rotl(h, 27) * _P1 + _P4
        h = h ^ (h >> np.uint64(33))
        h = h * _P2
        h = h ^ (h >> np.uint64(29))
        h = h * _P3
        return h ^ (h >> np.uint64(32))


def placement_hashes(digests: np.ndarray, downstream: np.ndarray) -> np.ndarray:
    """Spark's ``xxhash64(digest, d)`` of each record (int64 arrays in, int64 out)."""
    first = _hash_long(np.ascontiguousarray(digests, dtype=np.int64).view(np.uint64), SEED)
    placed = _hash_long(np.ascontiguousarray(downstream, dtype=np.int64).view(np.uint64), first)
    return placed.view(np.int64)


def xor_of(hashes: np.ndarray) -> int:
    return int(np.bitwise_xor.reduce(hashes)) if len(hashes) else 0


@dataclass
class RangeDigest:
    """The proof's source-side aggregates of one range, from the records as written: the
    count, both placement-hash xors, the first and last remote offsets, and whether the
    upstream offsets were contiguous from the range's start (else nothing can be told
    about records the read may have missed, and the proof reads the source)."""

    start: int
    records: int = 0
    xor: int = 0
    xor_no_ts: int = 0
    first: int | None = None
    last: int | None = None
    next_upstream: int | None = None
    usable: bool = True

    def __post_init__(self) -> None:
        if self.next_upstream is None:
            self.next_upstream = self.start

    def add(self, upstream: np.ndarray, downstream: np.ndarray, batch) -> None:
        """Records of one committed slice (``batch`` with the digest columns)."""
        n = len(upstream)
        if not self.usable or n == 0:
            return
        if ("digest_no_ts" not in batch.schema.names
                or int(upstream[0]) != self.next_upstream
                or int(upstream[-1]) - int(upstream[0]) != n - 1):
            self.usable = False
            return
        self.records += n
        no_ts = batch.column("digest_no_ts").to_numpy()
        self.xor ^= xor_of(placement_hashes(with_timestamps(no_ts, batch.column("timestamp")),
                                            downstream))
        self.xor_no_ts ^= xor_of(placement_hashes(no_ts, downstream))
        low, high = int(downstream.min()), int(downstream.max())
        self.first = low if self.first is None else min(self.first, low)
        self.last = high if self.last is None else max(self.last, high)
        self.next_upstream = int(upstream[-1]) + 1

    def summary(self, end: int) -> dict | None:
        """The aggregates when every offset of ``[start, end)`` was written here."""
        if not self.usable or self.next_upstream != end or not self.records:
            return None
        return {k: getattr(self, k) for k in ("records", "xor", "xor_no_ts", "first", "last")}
