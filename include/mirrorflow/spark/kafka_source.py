"""Reading Kafka over exact ranges with mirrorflow's own range source for Spark
(``jvm/connector``, format ``mirrorflow-kafka``).

Ranges come in **groups**: each group is one Spark task, and that task reads all of its
ranges with one Kafka consumer assigned to every partition of the group, each from its
exact start to its exact end, so one fetch per broker serves them all (KIP-227 fetch
sessions) and a partition costs its share of a fetch, not a consumer and its round trips
(Spark's own Kafka source keeps a consumer per partition and asks for both ends of the
log after every poll: about 7 ms a partition). Rows have Spark's Kafka schema
(``key, value, topic, partition, offset, timestamp, timestampType, headers``), each
partition's in offset order (a group's partitions interleave).

Client settings are the cluster's Java settings from the MM2 file, secrets resolved, as
``kafka.*`` options; ``kafka.isolation.level`` is the cluster's consumer setting
(``read_committed`` unless the file says otherwise:
:meth:`~mirrorflow.config.model.ClusterConfig.isolation_level`). Spark redacts option
values whose key or value matches ``spark.redaction.regex`` and
``spark.sql.redaction.options.regex``, which :data:`mirrorflow.spark.session.SPARK_CONF`
sets to cover passwords, JAAS lines, tokens and key material, in the UI, the event log
and ``explain``. Records the log no longer has (retention) are simply absent: the writer
(which tells retention from compaction by the source's log start) and the completeness
check name the range.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.source.plan_records import least_loaded

FORMAT = "mirrorflow-kafka"
# Settings the range source sets itself (RangeConsumers): it assigns, never joins a group.
_SOURCE_OWNED = frozenset({
    "group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
    "enable.auto.commit", "interceptor.classes", "allow.auto.create.topics"})

OffsetRange = tuple[str, int, int, int]  # topic, partition, start, end (exclusive)


class RangeReadError(MirrorflowError):
    """A planned range could not be read (the range source's ``RangeReadException``: a
    partition that no longer exists, no progress within its timeout); the message names
    the topic, partition and offsets."""

# A range ends at or near the partition's end, where a fetch finds nothing more and the
# broker holds it for fetch.max.wait.ms (Java's default 500 ms): with data waiting, fetches
# return at once whatever the setting, so a bounded read never waits for more.
FETCH_MAX_WAIT_MS = "0"
# No client telemetry request (KIP-714) and no metrics reporter (Kafka 4 registers every
# metric in JMX unless ``metric.reporters`` is emptied, per topic too: over 2,500 topics,
# 1 in 15 of a mirror task's CPU samples): a task's consumer lives for one read. Bigger
# fetches into the socket's own (autotuned) buffer instead of the Java client's 64 KiB and
# 1 MiB per partition: measured, 2,000,000 records of 512 B read and digested in 2.45 s ->
# 1.95 s (Spark's source). A poll hands over what one fetch brought. The cluster's own
# settings, where the file has them, win.
READ_DEFAULTS = {"kafka.fetch.max.wait.ms": FETCH_MAX_WAIT_MS,
                 "kafka.enable.metrics.push": "false",
                 "kafka.metric.reporters": "",
                 "kafka.receive.buffer.bytes": "-1",
                 "kafka.max.partition.fetch.bytes": str(8 * 1024 * 1024),
                 "kafka.max.poll.records": "20000"}


def kafka_options(cluster: ClusterConfig, isolation: str | None = None) -> dict[str, str]:
    """``kafka.*`` options of the range source for reading ``cluster`` (with the cluster's
    consumer isolation level unless ``isolation`` is given)."""
    props = clients.java_client_config(cluster, "consumer")
    options = {**READ_DEFAULTS,
               **{f"kafka.{k}": v for k, v in props.items() if k not in _SOURCE_OWNED}}
    options["kafka.isolation.level"] = isolation or cluster.isolation_level()
    return options


def read_groups(spark, cluster: ClusterConfig, groups: Sequence[Sequence[OffsetRange]],
                isolation: str | None = None, digests: bool = False,
                schema_ids: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
                id_scan: Sequence[str] = (), coalesce: bool = False):
    """A DataFrame of every record of the ranges of ``groups``: a Spark task per group,
    each reading its ranges (one per partition) with one consumer. With ``digests``, a row
    per partition a task read records of instead, with the proof's sums of them
    (``topic, partition, records, xor, xor_no_ts, first, last``:
    :mod:`mirrorflow.quality.compare`), computed in the task, each record's schema ids
    mapped by ``schema_ids`` first (``{topic: {part: {id: id}}}``; an id it lacks stays).
    With ``id_scan`` (``key``, ``value``), a row per partition and part instead, of the
    schema ids found and the first record not in the wire format (``topic, partition,
    part, ids, refused_offset, refused_length, refused_first``:
    :mod:`mirrorflow.schema.ids_in_ranges`). With ``coalesce``, a local Spark merges the
    groups into at most one task per core (its default parallelism), each still reading a
    partition once: a task costs a consumer and its scheduling."""
    return (spark.read.format(FORMAT).options(**kafka_options(cluster, isolation))
            .option("ranges", json.dumps([[list(r) for r in group] for group in groups]))
            .option("digests", str(digests).lower())
            .option("schemaIds", json.dumps(schema_ids or {}))
            .option("schemaIdScan", ",".join(id_scan))
            .option("coalesce", str(coalesce).lower())
            .load())


def grouped(ranges: Iterable[OffsetRange], tasks: int,
            split_records: int | None = None) -> list[list[OffsetRange]]:
    """``ranges`` dealt out to at most ``tasks`` groups, a range longer than
    ``split_records`` cut into pieces first: largest first to the least loaded group that
    does not read its partition yet (a group reads a partition once; a range's pieces are
    never more than ``tasks`` where :func:`read_tasks` counted them), to one that reads
    its topic already while that stays within an even share (a consumer keeps metadata
    and metrics per topic: as :func:`~mirrorflow.source.plan_records.deal` does)."""
    pieces: list[OffsetRange] = []
    for topic, partition, start, end in ranges:
        step = split_records or max(end - start, 1)
        pieces += [(topic, partition, lo, min(lo + step, end))
                   for lo in range(start, max(end, start + 1), step)]
    groups: list[list[OffsetRange]] = [[] for _ in range(max(1, min(tasks, len(pieces))))]
    loads = [0] * len(groups)
    held: list[set[tuple[str, int]]] = [set() for _ in groups]  # each group's partitions
    topics: list[set[str]] = [set() for _ in groups]
    share = -(-sum(end - start for *_, start, end in pieces) // len(groups))
    for piece in sorted(pieces, key=lambda r: r[2] - r[3]):
        size = piece[3] - piece[2]
        free = [g for g in range(len(groups)) if piece[:2] not in held[g]]
        if not free:  # more pieces of one partition than tasks: one more group
            groups.append([])
            loads.append(0)
            held.append(set())
            topics.append(set())
            free = [len(groups) - 1]
        g = least_loaded(free, loads, topics, piece[0], size, share)
        groups[g].append(piece)
        held[g].add(piece[:2])
        topics[g].add(piece[0])
        loads[g] += size
    return [group for group in groups if group]


def read_tasks(sizes: Sequence[int], slots: int, split_records: int | None = None) -> int:
    """Tasks for reading ranges of ``sizes`` offsets: as many as the flow's write slots
    for them, or one per ``split_records`` where that is more."""
    return max(slots, -(-sum(sizes) // split_records) if split_records else 0, 1)
