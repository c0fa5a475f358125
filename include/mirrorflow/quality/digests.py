"""A record's digest, in Spark SQL, as the proof computes it.

The proof (:mod:`mirrorflow.quality.compare`) aggregates per range
``bit_xor(xxhash64(digest, remote offset))``. The mirror's JVM writer computes the same
aggregates of the records it writes, with Spark's own ``XXH64``
(``dev.mirrorflow.digest``), at the remote offsets the broker gave them: where a range's
offsets are contiguous and one attempt wrote all of it, the writer's aggregates are the
source side's, and the proof reads only the target.
"""

from __future__ import annotations


def record_digest(F, with_timestamp, timestamp=None, headers: bool = True):
    """A record's digest (Spark SQL); ``with_timestamp`` (a boolean column) says whether
    its timestamp counts, ``timestamp`` is the one that does (the record's own unless
    given: :func:`restamped` for a source record). Spark's hash skips nulls, so nullness
    is hashed too. Headers are hashed as their JSON (a null value left out, so told from
    an empty one), as the JVM writer's ``HeadersJson`` writes them. The timestamp comes
    last, so the digest with it is XXH64's ``hashLong`` of the timestamp seeded with the
    digest without it (as ``dev.mirrorflow.digest.RecordDigest`` adds it). Without
    ``headers`` (a source record whose headers the schema transfer drops), the record is
    hashed as if it had none."""
    no_headers = F.col("headers").isNull() if headers else F.lit(True)
    flags = [F.col("key").isNull(), F.col("value").isNull(), no_headers]
    headers = F.to_json("headers") if headers else F.lit(None).cast("string")
    stamp = F.col("timestamp") if timestamp is None else timestamp
    return F.when(with_timestamp,
                  F.xxhash64("key", "value", headers, *flags, stamp)).otherwise(
        F.xxhash64("key", "value", headers, *flags))


# A source timestamp at or before the epoch (CreateTime 0, or none: -1, the old message
# formats, which MM2 writes with its producer's time) is written with its plan's time, the
# same in every attempt of the plan, so that the proof knows the timestamp the target holds
# (the first writer, librdkafka's, took a timestamp of 0 for "now"; the JVM writer keeps
# the rule, so a plan half-written before it finishes alike): the JVM writer's restamp and
# restamped (Spark SQL, proof) are one rule.

def restamped(F, at_ms):
    """Spark's side of the writer's restamp: the timestamp a source record has on the target.
    ``at_ms``: a column of the plan's time, not a literal: Spark writes a long literal into
    the code it generates, and a query whose code is new is compiled anew (every proof,
    each of its stages: 60-100 ms of CPU a class on an idle machine)."""
    stamp = F.col("timestamp")
    return F.when(stamp.isNull() | (stamp <= F.timestamp_millis(F.lit(0))),
                  F.timestamp_millis(at_ms)).otherwise(stamp)
