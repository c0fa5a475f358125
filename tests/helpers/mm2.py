"""What the tests that hold mirrorflow against MirrorMaker 2 share: MM2's pace settings,
waiting on MM2, reading its formatters' lines, where a source record's copy is, and the
configs set on a remote topic."""

from __future__ import annotations

import re
import time

from helpers.kafka import read_partition, topics
from mirrorflow.source.topic_sync import config_source, describe_configs

# MM2's own properties that make it act within a test's seconds (each an MM2 or Connect
# worker property; mirrorflow accepts them); the `mirrorflow.*` line is for mirrorflow
# and must not upset MM2.
MM2_PACE = """\
config.storage.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
offset.flush.interval.ms = 1000
refresh.topics.interval.seconds = 1
refresh.groups.interval.seconds = 1
emit.checkpoints.interval.seconds = 1
emit.heartbeats.interval.seconds = 1
a.consumer.isolation.level = read_committed
mirrorflow.transaction.records = 5000
"""


def wait_for(what: str, check, timeout: float = 180.0, state=None) -> None:
    """Until ``check()``; past ``timeout`` a failure naming ``what`` and what ``state()``
    finds then."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, \
            f"MM2 did not get there: {what}" + (f"; found {state()}" if state else "")
        time.sleep(0.5)


def mirrored(source: str, target: str, topic: str, partitions: int) -> bool:
    """Whether ``target``'s ``a.<topic>`` holds as many records as the source, partition
    by partition."""
    return all(len(read_partition(target, f"a.{topic}", p)) ==
               len(read_partition(source, topic, p))
               for p in range(partitions)) if f"a.{topic}" in topics(target) else False


def parse(line: str) -> dict[str, str]:
    """``Name{k=v, k=v}`` as MM2's formatters print a record."""
    body = re.fullmatch(r"\w+\{(.*)\}", line.strip())
    assert body, line
    return dict(part.split("=", 1) for part in body.group(1).split(", "))


def true_position(bootstrap: str, topic: str, partition: int, upstream: list, at: int) -> int:
    """The remote offset of the source record at index ``at`` (its copy), or the end."""
    mirrored_records = read_partition(bootstrap, topic, partition, with_offsets=True)
    assert [r[1:] for r in mirrored_records] == upstream
    return mirrored_records[at][0] if at < len(mirrored_records) else \
        mirrored_records[-1][0] + 1


def own_configs(config, alias: str, topic: str) -> dict[str, str]:
    """The configs set on ``topic`` itself on cluster ``alias`` (not its defaults)."""
    entries = describe_configs(config.cluster(alias), [topic])[topic]
    return {name: e.value for name, e in entries.items()
            if config_source(e) == "DYNAMIC_TOPIC_CONFIG"}
