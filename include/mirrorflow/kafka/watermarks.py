"""Log start and end offsets of partitions, from Kafka's ListOffsets.

The end depends on the reader's isolation level, as for any Kafka consumer: a
``read_uncommitted`` reader can fetch up to the high watermark, a ``read_committed``
reader up to the last stable offset (LSO: the first offset of the oldest open transaction,
or the high watermark when none is open). A plan over a ``read_committed`` source
therefore ends at the LSO and never waits on an open transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]
# How long librdkafka may take to accept a ListOffsets request (it only queues it, in
# microseconds): a call that has not returned by then is stuck inside librdkafka.
SUBMIT_TIMEOUT_S = 10.0
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


class WatermarkError(MirrorflowError):
    """A partition's offsets could not be read."""


@dataclass(frozen=True)
class Watermarks:
    """[log start, end) of one partition: the offsets a reader can fetch now."""

    low: int
    high: int


def probe_watermarks(cluster: ClusterConfig, partitions: Iterable[TopicPart],
                     isolation: str = READ_COMMITTED, timeout: float = 30.0,
                     ) -> dict[TopicPart, Watermarks]:
    """The log start and the end (for ``isolation``) of every partition."""
    from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    # A topic deleted and created again under the same name, or a restarted broker, leaves
    # clients with an old leader epoch (UNKNOWN_LEADER_EPOCH, FENCED_LEADER_EPOCH), and a
    # partition or topic just created is unknown to metadata cached before
    # (_UNKNOWN_PARTITION; _NOENT: "No leaders found"): settling too, asked again through
    # an admin client with fresh metadata.
    epochs = (KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
              KafkaError._UNKNOWN_PARTITION, KafkaError._NOENT)
    settling = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT,
                 KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT, *epochs)

    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    level = (IsolationLevel.READ_COMMITTED if isolation == READ_COMMITTED
             else IsolationLevel.READ_UNCOMMITTED)
    admin = clients.admin_client(cluster)
    deadline = time.monotonic() + timeout
    found: dict[str, dict[TopicPart, int]] = {"low": {}, "high": {}}
    specs = {"low": OffsetSpec.earliest(), "high": OffsetSpec.latest()}
    # Both requests are sent before either answer is awaited: a probe costs one round trip
    # to each leader, not two (one per watermark), which counts on a remote cluster.
    pending: dict[str, list[TopicPart]] = {"low": list(wanted), "high": list(wanted)}
    while pending["low"] or pending["high"]:
        futures = {}
        for name, tps in pending.items():
            if tps:
                request = {TopicPartition(t, p): specs[name] for t, p in tps}
                while (answers := _submitted(admin, request, level, timeout)) is None:
                    if time.monotonic() >= deadline:
                        raise WatermarkError(
                            f"cluster {cluster.alias!r} ({cluster.bootstrap_servers}): no "
                            f"admin client took a request to list the offsets of {len(tps)} "
                            f"partitions in {timeout:g}s (each call stuck in librdkafka for "
                            f"{SUBMIT_TIMEOUT_S:g}s)")
                    admin = clients.renewed_admin_client(cluster)
                futures[name] = answers
        pending, stale = {"low": [], "high": []}, False
        for name, answers in futures.items():
            for tp, future in answers.items():
                try:
                    found[name][(tp.topic, tp.partition)] = future.result(timeout).offset
                except KafkaException as exc:
                    # Leadership settling (a new topic, a restarted broker) is retried.
                    if exc.args[0].code() in settling and time.monotonic() < deadline:
                        pending[name].append((tp.topic, tp.partition))
                        stale |= exc.args[0].code() in epochs
                        continue
                    raise WatermarkError(
                        f"cluster {cluster.alias!r} ({cluster.bootstrap_servers}): cannot "
                        f"list the offsets of {tp.topic}[{tp.partition}]: "
                        f"{exc.args[0].str()}") from None
        if stale:  # its metadata, not the broker, is behind
            admin = clients.renewed_admin_client(cluster)
        if pending["low"] or pending["high"]:
            time.sleep(0.1)
    return {tp: Watermarks(found["low"][tp], max(found["high"][tp], found["low"][tp]))
            for tp in wanted}


def _submitted(admin, request: dict, level, timeout: float) -> dict | None:
    """``admin.list_offsets(request)``: its futures, or None when the call itself has not
    returned within :data:`SUBMIT_TIMEOUT_S`.

    The call only queues the request, but twice in a soak a task's first call on a new
    admin client stayed inside librdkafka's ``rd_kafka_ListOffsets`` (GIL released) for the
    eleven minutes until the task's watchdog ended the process. Made on a daemon thread,
    a stuck call is left behind with its client (destroying either would block too), and
    the caller asks again through a new client, which shares no lock with the old one."""
    answer: dict = {}

    def call() -> None:
        try:
            answer["futures"] = admin.list_offsets(request, isolation_level=level,
                                                   request_timeout=timeout)
        except BaseException as exc:  # raised on the caller's thread below
            answer["error"] = exc

    thread = threading.Thread(target=call, name="list_offsets", daemon=True)
    thread.start()
    thread.join(SUBMIT_TIMEOUT_S)
    if "error" in answer:
        raise answer["error"]
    if "futures" not in answer:
        log.warning("an admin client did not take a ListOffsets request of %d partitions "
                    "within %gs: left behind, asking again through a new one",
                    len(request), SUBMIT_TIMEOUT_S)
        return None
    return answer["futures"]
