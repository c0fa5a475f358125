"""The mirror's committed positions, in MirrorMaker 2's own offset-store format.

MM2 (a Kafka Connect source connector) keeps its source positions in Connect's offset
topic ``mm2-offsets.{source}.internal`` on the target cluster, written by JsonConverter
without schemas:

* key   ``["MirrorSourceConnector",{"cluster":"<source>","partition":<n>,"topic":"<t>"}]``
  (Connect's ``[connector name, source partition]``; the partition map is
  ``MirrorUtils.wrapPartition``, a HashMap whose iteration order for these three keys is
  cluster, partition, topic)
* value ``{"offset":<last mirrored upstream offset>}`` (``MirrorUtils.wrapOffset``); MM2
  resumes at offset + 1, and so does mirrorflow.

Connect's default ``offset.storage.partitions`` is 25; a store mirrorflow creates has the
same count, so that MM2 and mirrorflow can take over from each other.

mirrorflow's records carry a header (``mirrorflow``) that MM2 ignores: a position whose
newest record lacks it was set outside mirrorflow (MM2 took over, or a tool), which the
planner names as a break of the partition's chain (:mod:`mirrorflow.source.history`)
instead of calling the offsets it skipped unplanned.
"""

from __future__ import annotations

import json
import logging

from mirrorflow.config.model import ClusterConfig
from mirrorflow.kafka.internal_topics import CompactedTopic
from mirrorflow.lease import check_held

log = logging.getLogger(__name__)

CONNECTOR_NAME = "MirrorSourceConnector"
ORIGIN_HEADER = ("mirrorflow", b"1")
OFFSET_STORAGE_PARTITIONS = 25
TopicPart = tuple[str, int]


def offsets_topic(source_alias: str) -> str:
    """MirrorMakerConfig.workerConfig's default offset.storage.topic."""
    return f"mm2-offsets.{source_alias}.internal"


def encode_key(source_alias: str, topic: str, partition: int) -> bytes:
    partition_map = {"cluster": source_alias, "partition": partition, "topic": topic}
    return json.dumps([CONNECTOR_NAME, partition_map], separators=(",", ":")).encode()


def encode_value(offset: int) -> bytes:
    return json.dumps({"offset": offset}, separators=(",", ":")).encode()


def decode(key: bytes, value: bytes) -> tuple[str, TopicPart, int] | None:
    """(source alias, (topic, partition), offset) of an MM2 source offset; None otherwise."""
    try:
        name, partition_map = json.loads(key)
        offset = json.loads(value)["offset"]
        tp = (partition_map["topic"], int(partition_map["partition"]))
        entry = (partition_map["cluster"], tp, int(offset))
    except (ValueError, TypeError, KeyError):
        return None
    return entry if name == CONNECTOR_NAME else None


class OffsetStore:
    """Per source topic-partition: the last upstream offset mirrored to the target."""

    def __init__(self, target: ClusterConfig, source_alias: str, replication_factor: int = 1):
        self.source_alias = source_alias
        self.topic = CompactedTopic(target, offsets_topic(source_alias),
                                    OFFSET_STORAGE_PARTITIONS, replication_factor)

    def positions(self) -> dict[TopicPart, int]:
        """Last mirrored offset per (topic, partition) of this source; unknown ones absent."""
        return self.read()[0]

    def read(self) -> tuple[dict[TopicPart, int], set[TopicPart]]:
        """(positions, the partitions whose position was set outside mirrorflow)."""
        out: dict[TopicPart, int] = {}
        outside: set[TopicPart] = set()
        for key, record in self.topic.read_records().items():
            entry = decode(key, record.value)
            if entry is None:
                log.warning("%s: skipped a record that is not an MM2 source offset: %r",
                            self.topic.topic, key[:200])
                continue
            alias, tp, offset = entry
            if alias == self.source_alias:
                out[tp] = offset
                if ORIGIN_HEADER not in record.headers:
                    outside.add(tp)
        return out, outside

    def commit(self, positions: dict[TopicPart, int]) -> None:
        """Record ``offset`` as the last mirrored upstream offset of each partition."""
        check_held()
        self.topic.write([(encode_key(self.source_alias, t, p), encode_value(o))
                          for (t, p), o in sorted(positions.items())], headers=[ORIGIN_HEADER])

    def forget(self, parts: list[TopicPart]) -> None:
        """Tombstone positions: those partitions start again from their log start."""
        self.topic.write([(encode_key(self.source_alias, t, p), None) for t, p in parts])
