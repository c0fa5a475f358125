"""One run of a flow at a time: a lease on the target cluster, kept in a Kafka log.

Two runs of the same flow (a ``mirrorflow run`` beside the Airflow DAG, two Airflow
deployments) must never write at once. Every step that writes (plan, the Spark job's
mirror, commit, checkpoints, group sync, metadata sync) holds the flow's lease while it
runs; ``mirrorflow run`` holds it for the whole cycle.

The lease belongs to an **owner** (a run id) and is held by one or more **holders** (each
step that holds it, e.g. the tasks of one DAG run, some at the same time, or a run's
Spark job): a holder joins a lease its own run owns, and the lease is free again only
once every holder has released it or lapsed, so siblings never release each other.

It is the replay of one single-partition topic, ``mirrorflow-leases.internal``: every
contender appends an ``acquire`` record, reads the log up to its own record and replays
it with :func:`holder`. The log's order is the same for every reader, so every contender
computes the same answer: the first live claim wins, a claim by another owner while a
holder is live is void. A holder renews every third of ``mirrorflow.lease.timeout.seconds``
and lapses that long after its last renewal. Clocks of the contenders must agree to well
within the timeout. The topic uses time retention (one day), not compaction, so the
records a replay needs are never compacted away.

A holder that cannot renew in time (a paused process, a partitioned network) may have
been replaced. :meth:`FlowLease.check` raises :class:`LeaseLostError` then, and every step
calls :func:`check_held` right before it commits anything (positions, offset syncs,
checkpoints, group offsets, topic metadata, plans), so a lapsed holder stops first.

Checking is not enough: a holder can pass the check and pause before its write lands.
So every state write is **fenced**, as Kafka fences a zombie producer: while a lease is
held, the flow's internal-topic writes on its target (where all of its state lives) go
through :class:`StateFence`, transactions of one ``transactional.id`` per flow
(``mirrorflow|<flow>|state``, under the writers' ACL prefix ``mirrorflow|``). A holder
calls ``init_transactions`` right after its claim wins and only then reads any state,
which bumps the producer epoch and so fences every earlier holder for good: a write of a
paused, lapsed holder fails at the broker instead of landing. A holder whose write is
fenced (a sibling task of its own run initialised the same id) initialises again,
re-reads the lease log, and writes again only while it still holds the flow; otherwise
it raises :class:`LeaseLostError`. Offset syncs on the source are checked, not fenced: a
stale holder's sync there is an older, still true pair (the flow's own translation
reads the fenced history on the target), and the source needs no transactional grant.

**A DAG run owns the flow from its first task to its last** (issue 37): the DAG's
first task, ``plan`` (a sensor), adds the run's *run hold* (holder ``run``, lapsing
``mirrorflow.lease.run.timeout.seconds`` after the run's last task let go), every task
of the run joins it, and its last task, ``report`` (run whatever the other tasks'
outcome), releases it. A run that finds the flow owned by another live run waits in the sensor,
rescheduled, holding no worker slot.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.kafka.internal_topics import (
    STATE_SEGMENT_MS,
    CompactedTopic,
    fenced_by,
    incremental_reads,
    read_log,
    unfenced,
)
from mirrorflow.plain import plain
from mirrorflow.state_fence import LeaseLostError, StateFence

log = logging.getLogger(__name__)


LEASES_TOPIC = "mirrorflow-leases.internal"
RETENTION_MS = 24 * 3600 * 1000
POLL_S = 1.0
RUN_HOLDER = "run"  # the holder a DAG run's claim adds, kept between its tasks
_HELD: contextvars.ContextVar[FlowLease | None] = contextvars.ContextVar("lease", default=None)


class LeaseHeldError(MirrorflowError):
    """Another run holds the flow; nothing was done."""


@dataclass(frozen=True)
class LeaseRecord:
    """One claim, renewal or release of a flow's lease by one holder of an owner."""

    flow: str
    owner: str
    op: str  # acquire, renew, release
    at_ms: int
    ttl_ms: int
    holder: str = ""

    @property
    def until_ms(self) -> int:
        return self.at_ms + self.ttl_ms


@dataclass
class LeaseState:
    """The replay's answer: the owning run and its live holders (holder -> until)."""

    owner: str
    holders: dict[str, int] = field(default_factory=dict)

    def live(self, at_ms: int) -> bool:
        return any(until > at_ms for until in self.holders.values())

    @property
    def until_ms(self) -> int:
        return max(self.holders.values(), default=0)


def holder(records: Iterable[LeaseRecord]) -> LeaseState | None:
    """The lease after replaying ``records`` (one flow's, in log order)."""
    state: LeaseState | None = None
    for record in records:
        if state is not None and not state.live(record.at_ms):
            state = None
        if record.op == "release":
            if state is not None and state.owner == record.owner:
                state.holders.pop(record.holder, None)
                if not state.holders:
                    state = None
        elif state is None:
            if record.op == "acquire":  # a renewal after a lapse brings nothing back
                state = LeaseState(record.owner, {record.holder: record.until_ms})
        elif state.owner == record.owner:
            state.holders[record.holder] = record.until_ms
    return state


class FlowLease:
    """``with FlowLease(config, flow, owner):`` holds the flow for ``owner`` (a run id),
    joining a lease its run already owns (see the module's note)."""

    def __init__(self, config: MirrorConfig, flow: FlowConfig, owner: str,
                 wait_s: float | None = None):
        self.cluster = config.cluster(flow.target)
        self.flow = flow.name
        self.owner = owner
        self.holder = uuid.uuid4().hex[:12]
        self.ttl_ms = flow.get("mirrorflow.lease.timeout.seconds") * 1000
        self.wait_s = flow.get("mirrorflow.lease.wait.seconds") if wait_s is None else wait_s
        self.replication_factor = flow.get("replication.factor")
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._renewed = 0.0  # monotonic time of the last acknowledged claim or renewal
        self.run_ttl_ms = flow.get("mirrorflow.lease.run.timeout.seconds") * 1000
        self.exactly_once = flow.get("exactly.once.support")
        self._token: contextvars.Token | None = None
        self._fence_token: contextvars.Token | None = None
        self._fence: StateFence | None = None
        self._own_fence = False  # made here, not joined from this process's run
        self._run_held = False  # the owner's run hold was live when this holder joined
        # The holder's steps read each state topic in full once, then only what is new.
        self._reads = contextlib.ExitStack()

    def _topic(self) -> CompactedTopic:
        return CompactedTopic(self.cluster, LEASES_TOPIC, 1, self.replication_factor)

    def _append(self, op: str, holder_id: str | None = None,
                ttl_ms: int | None = None) -> LeaseRecord:
        record = LeaseRecord(self.flow, self.owner, op, int(time.time() * 1000),
                             self.ttl_ms if ttl_ms is None else ttl_ms,
                             self.holder if holder_id is None else holder_id)
        self._topic().write_unfenced([(self.flow.encode(),
                                       json.dumps(plain(record)).encode())])
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

    def current(self) -> LeaseState | None:
        """Who holds the flow now, if anyone."""
        state = holder(self.records())
        return state if state is not None and state.live(int(time.time() * 1000)) else None

    def _ensure_topic(self) -> None:
        # Retention deletes only rolled segments: rolled every 10 minutes, the log holds
        # a day of claims, not up to the 7 days of Kafka's default segment.ms on top.
        clients.ensure_topic(self.cluster, LEASES_TOPIC, 1, self.replication_factor,
                             config={"cleanup.policy": "delete",
                                     "retention.ms": str(RETENTION_MS),
                                     "segment.ms": str(STATE_SEGMENT_MS)})

    def verify(self) -> None:
        """Raise :class:`LeaseLostError` unless the log's replay, read now, has this holder
        live: the fence's check after each ``init_transactions``."""
        state = holder(self.records())
        if state is None or not state.live(int(time.time() * 1000)) \
                or self.holder not in state.holders:
            self.lost.set()
            raise LeaseLostError(
                f"flow {self.flow}: the lease of {self.owner} on cluster "
                f"{self.cluster.alias!r} is held by "
                f"{state.owner if state is not None else 'nobody'} now; nothing more is "
                "written")

    def claim_run(self) -> LeaseState | None:
        """Add the run hold of this owner (a DAG run) unless another owner holds the
        flow: None when claimed (or already this owner's), else who holds it."""
        self._ensure_topic()
        while True:
            claim = self._append("acquire", RUN_HOLDER, self.run_ttl_ms)
            records = self.records()
            if claim not in records:
                continue
            state = holder(records[:records.index(claim) + 1])
            if state is not None and state.owner == self.owner:
                return None
            state = holder(records)
            if state is not None:
                return state

    def release_run(self) -> None:
        """Release this owner's run hold (the DAG's last step, whatever the run did)."""
        self._ensure_topic()
        self._append("release", RUN_HOLDER)

    def __enter__(self) -> FlowLease:
        self._ensure_topic()
        deadline = time.monotonic() + self.wait_s
        waiting_for: str | None = None
        while True:
            started = time.monotonic()
            claim = self._append("acquire")
            records = self.records()
            if claim not in records:  # not visible yet: read again
                continue
            state = holder(records[:records.index(claim) + 1])
            if state is not None and self.holder in state.holders:
                self._renewed = started
                self._run_held = RUN_HOLDER in state.holders
                break
            state = holder(records)
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
        self._renewer.start()  # renewing while the fence is set up
        outer = _HELD.get()
        if outer is not None and outer.flow == self.flow and outer.owner == self.owner \
                and outer._fence is not None:
            self._fence = outer._fence  # a holder of this process's own run: one fence
        else:
            self._fence = StateFence(self.flow, self.cluster, self.verify, self.exactly_once)
            self._own_fence = True
            try:
                self._fence.open()
            except BaseException:
                self._fence.close()
                self._stop.set()
                self._renewer.join()
                if not self.lost.is_set():
                    self._append("release")
                raise
        self._token = _HELD.set(self)
        self._fence_token = fenced_by(self._fence.write)
        self._reads.enter_context(incremental_reads())
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            started = time.monotonic()
            try:
                self._append("renew")
                state = holder(self.records())
            except Exception as exc:  # a failed renewal is retried; the lease may lapse
                log.warning("renewing the lease of flow %s failed: %s", self.flow, exc)
                continue
            if state is None or self.holder not in state.holders:
                log.error("flow %s: the lease of %s lapsed and was taken by %s", self.flow,
                          self.owner, state.owner if state else "nobody")
                self.lost.set()
                return
            self._renewed = started

    def check(self) -> None:
        """Raise :class:`LeaseLostError` unless this holder surely holds the flow: no
        lapse seen by the renewer, and a renewal within the timeout."""
        late = time.monotonic() - self._renewed > self.ttl_ms / 1000
        if self.lost.is_set() or late:
            self.lost.set()
            raise LeaseLostError(
                f"flow {self.flow}: the lease of {self.owner} on cluster "
                f"{self.cluster.alias!r} lapsed (not renewed within "
                f"{self.ttl_ms / 1000:.0f}s, mirrorflow.lease.timeout.seconds); another run "
                "may hold the flow, so nothing more is committed")

    def __exit__(self, *exc_info) -> None:
        # The holder's own failure goes to its reads' context, which then reports it rather
        # than a failure to settle its writes; and the lease is released either way.
        try:
            self._reads.__exit__(*exc_info)
        finally:
            if self._fence_token is not None:
                _HELD.reset(self._token)
                unfenced(self._fence_token)
            if self._own_fence:
                self._fence.close()
            self._stop.set()
            if self._renewer is not None:
                self._renewer.join()
            if not self.lost.is_set():
                if self._run_held:  # the run hold lapses counting from this task's end
                    self._append("renew", RUN_HOLDER, self.run_ttl_ms)
                self._append("release")


def unfenced_reason() -> str | None:
    """Why the lease held in this context writes state unfenced (the target refuses the
    flow's transactions), or None."""
    lease = _HELD.get()
    return lease._fence.refused if lease is not None and lease._fence is not None else None


def check_held() -> None:
    """Before committing anything: the lease held in this context must still be held."""
    lease = _HELD.get()
    if lease is not None:
        lease.check()
