"""Log start and end offsets of partitions, from Kafka's ListOffsets.

The end depends on the reader's isolation level, as for any Kafka consumer: a
``read_uncommitted`` reader can fetch up to the high watermark, a ``read_committed``
reader up to the last stable offset (LSO: the first offset of the oldest open transaction,
or the high watermark when none is open). A plan over a ``read_committed`` source
therefore ends at the LSO and never waits on an open transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]
METADATA_TIMEOUT_S = 5.0
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


class WatermarkError(MirrorflowError):
    """A partition's offsets could not be read."""


# A probe asks again for partitions still settling, after 10 ms, then twice as long each
# time, up to 100 ms: the leader of a topic created a moment ago is known within a few
# milliseconds on a local broker, and every first run of a flow writes to its new state
# topics (3 pauses of a fixed 100 ms were 0.3 s of such a run).
RETRY_FIRST_S = 0.01
RETRY_MAX_S = 0.1

# Partitions per ListOffsets call. librdkafka's CPU for one call grows with the square of
# its partitions (measured in the driver's process, ends of 2,500 topics x 4: 1,000
# partitions 0.02 s, 5,000 0.19 s, 10,000 0.64 to 0.70 s; its consumer's
# ``offsets_for_times`` the same), so a probe sends its partitions in calls of this many,
# all before it awaits any (10,000 partitions: 0.16 to 0.20 s).
PARTITIONS_PER_REQUEST = 500


@dataclass(frozen=True)
class Watermarks:
    """[log start, end) of one partition: the offsets a reader can fetch now."""

    low: int
    high: int


def probe_watermarks(cluster: ClusterConfig, partitions: Iterable[TopicPart],
                     isolation: str = READ_COMMITTED, timeout: float = 30.0,
                     ) -> dict[TopicPart, Watermarks]:
    """The log start and the end (for ``isolation``) of every partition."""
    found = _probe(cluster, partitions, isolation, timeout, ("low", "high"))
    return {tp: Watermarks(low, max(found["high"][tp], low)) for tp, low in found["low"].items()}


def log_starts(cluster: ClusterConfig, partitions: Iterable[TopicPart],
               timeout: float = 30.0) -> dict[TopicPart, int]:
    """The log start of every partition (half a probe's answers: librdkafka makes a
    Python future of each, tens of microseconds apiece over thousands of partitions)."""
    return _probe(cluster, partitions, READ_COMMITTED, timeout, ("low",))["low"]


def log_ends(cluster: ClusterConfig, partitions: Iterable[TopicPart],
             isolation: str = READ_COMMITTED, timeout: float = 30.0,
             retry_max_s: float = RETRY_MAX_S) -> dict[TopicPart, int]:
    """The end (for ``isolation``) of every partition; partitions still settling are asked
    again at most ``retry_max_s`` apart."""
    return _probe(cluster, partitions, isolation, timeout, ("high",), retry_max_s)["high"]


def _probe(cluster: ClusterConfig, partitions: Iterable[TopicPart], isolation: str,
           timeout: float, names: tuple[str, ...], retry_max_s: float = RETRY_MAX_S
           ) -> dict[str, dict[TopicPart, int]]:
    """Per name of ``names`` (``low``: log start, ``high``: end), the offset of every
    partition."""
    from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    # A topic deleted and created again under the same name, or a restarted broker, leaves
    # clients with an old leader epoch (UNKNOWN_LEADER_EPOCH, FENCED_LEADER_EPOCH), and a
    # partition or topic just created is unknown to metadata cached before
    # (_UNKNOWN_PARTITION; _NOENT: "No leaders found"): settling too, asked again through
    # an admin client with fresh metadata.
    epochs = (KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
              KafkaError._UNKNOWN_PARTITION, KafkaError._NOENT)
    timed_out = (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT)
    settling = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT, *timed_out, *epochs)

    wanted = sorted(set(partitions))
    found: dict[str, dict[TopicPart, int]] = {name: {} for name in names}
    if not wanted:
        return found
    level = (IsolationLevel.READ_COMMITTED if isolation == READ_COMMITTED
             else IsolationLevel.READ_UNCOMMITTED)
    admin = _with_metadata(clients.admin_client(cluster), timeout)
    deadline = time.monotonic() + timeout
    specs = {"low": OffsetSpec.earliest(), "high": OffsetSpec.latest()}
    # Every call (both watermarks', each of PARTITIONS_PER_REQUEST partitions) is sent before
    # any answer is awaited: a probe costs one round trip to each leader, not one per call,
    # which counts on a remote cluster.
    pending: dict[str, list[TopicPart]] = {name: list(wanted) for name in names}
    pause = RETRY_FIRST_S
    while any(pending.values()):
        # Each request may take what is left of the probe's time; its answers are awaited
        # a moment longer, so that librdkafka's own timeout comes before the wait's. A
        # request that timed out may answer its partitions with no error and offset -1001
        # (OFFSET_INVALID; measured against a broker stopped with SIGSTOP): retried while
        # time is left, as a timeout error is, and never taken for an offset.
        left = max(deadline - time.monotonic(), 0.1)
        futures = {name: [admin.list_offsets(
            {TopicPartition(t, p): specs[name] for t, p in tps[i:i + PARTITIONS_PER_REQUEST]},
            isolation_level=level, request_timeout=left)
            for i in range(0, len(tps), PARTITIONS_PER_REQUEST)]
            for name, tps in pending.items() if tps}
        pending, stale = {name: [] for name in names}, False
        for name, calls in futures.items():
            for tp, future in (answer for answers in calls for answer in answers.items()):
                try:
                    offset = future.result(left + clients.ANSWER_MARGIN_S).offset
                except TimeoutError:
                    raise _no_answer(cluster, wanted, timeout) from None
                except KafkaException as exc:
                    # Leadership settling (a new topic, a restarted broker) is retried.
                    if exc.args[0].code() in settling and time.monotonic() < deadline:
                        pending[name].append((tp.topic, tp.partition))
                        stale |= exc.args[0].code() in epochs
                        continue
                    if exc.args[0].code() in timed_out:
                        raise _no_answer(cluster, wanted, timeout) from None
                    raise WatermarkError(
                        f"cluster {cluster.alias!r} ({cluster.bootstrap_servers}): cannot "
                        f"list the offsets of {tp.topic}[{tp.partition}]: "
                        f"{exc.args[0].str()}") from None
                if offset >= 0:
                    found[name][(tp.topic, tp.partition)] = offset
                elif time.monotonic() < deadline:
                    pending[name].append((tp.topic, tp.partition))
                else:
                    raise _no_answer(cluster, wanted, timeout)
        if stale:  # its metadata, not the broker, is behind
            admin = _with_metadata(clients.renewed_admin_client(cluster), timeout)
        if any(pending.values()):
            time.sleep(pause)
            pause = min(pause * 2, retry_max_s)
    return found


def _no_answer(cluster: ClusterConfig, wanted: list[TopicPart], timeout: float
               ) -> WatermarkError:
    """The error of a probe whose cluster did not answer in time, whether librdkafka's
    request timed out or the wait for its answer did (a broker that keeps its connections
    but answers nothing, as a stopped process does)."""
    (topic, partition), more = wanted[0], len(wanted) - 1
    others = f" and {more} more" if more else ""
    return WatermarkError(
        f"cluster {cluster.alias!r} ({cluster.bootstrap_servers}): no answer within "
        f"{timeout:g} s listing the offsets of {topic}[{partition}]{others}")


def _with_metadata(admin, timeout: float):
    """``admin``, once it holds the cluster's metadata (read now if it never did).

    librdkafka's ``rd_kafka_ListOffsets`` looks the partitions' leaders up on the caller's
    thread; where its metadata cache lacks them, it registers for the cache's next change
    and goes on working on the same request, which librdkafka's own thread then also
    works on when the change comes (a new client's first metadata answer, say). The two
    race, and the caller's thread crashes (SIGSEGV in
    ``rd_kafka_topic_partition_list_query_leaders_async_worker``, a lock at address 0:
    the other thread had finished the request): four ``report`` tasks of soaks, each
    the first ``list_offsets`` of a new admin client, and a core of the same stack.
    Metadata read first, synchronously, the leaders are found on the first look and
    nothing is registered. A cluster that does not answer within ``timeout`` (at most
    :data:`METADATA_TIMEOUT_S`) is left to the probe's own errors."""
    from confluent_kafka import KafkaException

    if not clients.holds_metadata(admin):
        try:
            clients.cluster_metadata(admin, min(timeout, METADATA_TIMEOUT_S))
        except KafkaException as exc:
            log.debug("cannot read the metadata before listing offsets: %s", exc)
            setattr(admin, clients.METADATA_READ, True)  # the probe's own errors say the rest
    return admin
