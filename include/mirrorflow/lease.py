"""One run of a flow at a time: a lease on the target cluster, kept in a Kafka log.

Two runs of the same flow (a ``mirrorflow run`` beside the Airflow DAG, two Airflow
deployments) must never write at once. Every step that writes (plan, the Spark job's
mirror, commit, checkpoints, group sync, metadata sync) holds the flow's lease while it
runs; ``mirrorflow run`` holds it for the whole cycle, and its Spark job joins it.

The lease is the replay of one single-partition topic, ``mirrorflow-leases.internal``:
every contender appends an ``acquire`` record, reads the log up to its own record and
replays it with :func:`holder`. The log's order is the same for every reader, so every
contender computes the same holder: the first live claim wins, later ones are ignored
until it is released or lapses (``mirrorflow.lease.timeout.seconds`` after its last
renewal). A holder renews every third of that. Clocks of the contenders must agree to
well within the timeout. The topic uses time retention (one day), not compaction, so
the records a replay needs are never compacted away.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from mirrorflow import clients
from mirrorflow.config import FlowConfig, MirrorConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.internal_topics import CompactedTopic, read_log

log = logging.getLogger(__name__)

LEASES_TOPIC = "mirrorflow-leases.internal"
RETENTION_MS = 24 * 3600 * 1000
POLL_S = 1.0


class LeaseHeldError(MirrorflowError):
    """Another run holds the flow; nothing was done."""


@dataclass(frozen=True)
class LeaseRecord:
    """One claim, renewal or release of a flow's lease."""

    flow: str
    owner: str
    op: str  # acquire, renew, release
    at_ms: int
    ttl_ms: int

    @property
    def until_ms(self) -> int:
        return self.at_ms + self.ttl_ms


def holder(records: Iterable[LeaseRecord]) -> LeaseRecord | None:
    """The holding record after replaying ``records`` (one flow's, in log order)."""
    state: LeaseRecord | None = None
    for record in records:
        live = state is not None and state.until_ms > record.at_ms
        if record.op == "release":
            if state is not None and state.owner == record.owner:
                state = None
        elif not live or state.owner == record.owner:
            state = record
    return state


def _last_index(records: list[LeaseRecord], record: LeaseRecord) -> int:
    return len(records) - 1 - records[::-1].index(record)


class FlowLease:
    """``with FlowLease(config, flow, owner):`` holds the flow for ``owner`` (a run id).
    Re-entrant per owner: a holder's own Spark job joins its lease and leaves it held."""

    def __init__(self, config: MirrorConfig, flow: FlowConfig, owner: str,
                 wait_s: float | None = None):
        self.cluster = config.cluster(flow.target)
        self.flow = flow.name
        self.owner = owner
        self.ttl_ms = flow.get("mirrorflow.lease.timeout.seconds") * 1000
        self.wait_s = flow.get("mirrorflow.lease.wait.seconds") if wait_s is None else wait_s
        self.replication_factor = flow.get("replication.factor")
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._joined = False

    def _topic(self) -> CompactedTopic:
        return CompactedTopic(self.cluster, LEASES_TOPIC, 1, self.replication_factor)

    def _append(self, op: str) -> LeaseRecord:
        record = LeaseRecord(self.flow, self.owner, op, int(time.time() * 1000), self.ttl_ms)
        self._topic().write([(self.flow.encode(), json.dumps(asdict(record)).encode())])
        return record

    def records(self) -> list[LeaseRecord]:
        """This flow's lease records in log order; malformed ones are skipped with a
        warning (a crash loop on one bad record would stop every run)."""
        out = []
        for entry in read_log(self.cluster, LEASES_TOPIC):
            if entry.key != self.flow.encode():
                continue
            try:
                out.append(LeaseRecord(**json.loads(entry.value)))
            except (TypeError, ValueError) as exc:
                log.warning("%s@%d: malformed lease record skipped (%s)", LEASES_TOPIC,
                            entry.offset, exc)
        return out

    def current(self) -> LeaseRecord | None:
        """Who holds the flow now, if anyone."""
        state = holder(self.records())
        return state if state is not None and state.until_ms > time.time() * 1000 else None

    def __enter__(self) -> FlowLease:
        clients.ensure_topic(self.cluster, LEASES_TOPIC, 1, self.replication_factor,
                             config={"cleanup.policy": "delete",
                                     "retention.ms": str(RETENTION_MS)})
        deadline = time.monotonic() + self.wait_s
        waiting_for: str | None = None
        while True:
            claim = self._append("acquire")
            records = self.records()
            state = holder(records)
            if state is not None and state.owner == self.owner:
                # Joined if this owner held the flow already when the claim landed.
                before = holder(records[:_last_index(records, claim)])
                self._joined = (before is not None and before.owner == self.owner
                                and before.until_ms > claim.at_ms)
                break
            if state is None:  # released after our claim, which it made void: claim again
                continue
            if time.monotonic() >= deadline:
                raise LeaseHeldError(
                    f"flow {self.flow} is being run by {state.owner} (its lease on cluster "
                    f"{self.cluster.alias!r} runs until "
                    f"{time.strftime('%H:%M:%S', time.localtime(state.until_ms / 1000))} "
                    f"unless renewed); {self.owner} waited {self.wait_s:.0f}s "
                    f"(mirrorflow.lease.wait.seconds) and did nothing")
            if state.owner != waiting_for:
                log.info("flow %s is held by %s; waiting", self.flow, state.owner)
                waiting_for = state.owner
            time.sleep(POLL_S)
        self._renewer = threading.Thread(target=self._renew, daemon=True,
                                         name=f"lease {self.flow}")
        self._renewer.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                self._append("renew")
                state = holder(self.records())
            except Exception as exc:  # a failed renewal is retried; the lease may lapse
                log.warning("renewing the lease of flow %s failed: %s", self.flow, exc)
                continue
            if state is None or state.owner != self.owner:
                log.error("flow %s: the lease of %s lapsed and was taken by %s", self.flow,
                          self.owner, state.owner if state else "nobody")
                self.lost.set()
                return

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if not self._joined and not self.lost.is_set():
            self._append("release")
