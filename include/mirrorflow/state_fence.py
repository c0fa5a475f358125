"""Fenced state writes (see :mod:`mirrorflow.lease`): while a lease is held, the flow's
internal-topic writes on its target go through a :class:`StateFence`, transactions of the
flow's one state ``transactional.id``, so that a paused holder that lost the lease finds
its writes fenced at the broker instead of landing."""

from __future__ import annotations

import contextlib
import logging

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.kafka import clients
from mirrorflow.kafka.internal_topics import (
    STATE_PRODUCER,
    Headers,
    InternalTopicError,
    Write,
    readable_later,
)

log = logging.getLogger(__name__)

FENCE_ATTEMPTS = 5
FENCE_TIMEOUT_S = 30.0


class LeaseLostError(MirrorflowError):
    """This holder's lease lapsed: another run may hold the flow now; nothing more is
    committed."""


class TransactionsRefusedError(MirrorflowError):
    """exactly.once.support = required, and the target refuses the flow's transactions."""


class _HandledFencing(logging.Filter):
    """librdkafka logs a fenced transactional producer as an error (``FATAL``,
    ``TXNERR``, ``ADDPARTS``). The state producer is fenced whenever another process of
    the run takes the flow's state id (a DAG run's next task, the Spark job's driver), and
    :meth:`StateFence.write` handles it: it fences again, or fails with
    :class:`LeaseLostError` if the lease was lost. Those lines are logged at INFO, so that
    an operator's log shows an error only where mirrorflow raises one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO and any(
                cue in record.getMessage() for cue in ("fenced by a newer instance",
                                                       "old epoch")):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


STATE_LOG = logging.getLogger("mirrorflow.librdkafka.state")
STATE_LOG.addFilter(_HandledFencing())


def state_transactional_id(flow_name: str) -> str:
    """The one transactional id of a flow's state writes, per cluster: each new holder's
    ``init_transactions`` fences every earlier holder's producer."""
    return f"mirrorflow|{flow_name}|state"


class StateFence:
    """A holder's transactional producer for the flow's state writes on its target (see
    the module's note). ``verify`` raises :class:`LeaseLostError` unless the holder still
    holds the flow; it is called after every (re)initialisation."""

    def __init__(self, flow_name: str, target: ClusterConfig, verify,
                 exactly_once: str = "requested") -> None:
        self.flow = flow_name
        self.target = target
        self.verify = verify
        self.exactly_once = exactly_once
        self._producer = None
        # Why state writes go unfenced: the target refuses the flow's transactions and
        # exactly.once.support is 'requested' (each write is still lease-checked).
        self.refused: str | None = None

    def open(self) -> None:
        """Fence every earlier holder, then verify."""
        self._producer = self._init()
        self.verify()

    def _produce(self, topic: str, key: bytes, value: bytes | None, headers: Headers,
                 landed) -> None:
        """One record into the open transaction; while librdkafka's queue is full (a
        commit of tens of thousands of partitions' state), its deliveries are served
        until there is room."""
        while True:
            try:
                self._producer.produce(topic, key=key, value=value, headers=headers,
                                       on_delivery=landed)
                return
            except BufferError:
                self._producer.poll(0.05)

    def close(self) -> None:
        """Purge and drop the producer: a write cut short leaves nothing queued to land
        later (see ``SlotWriter.release``)."""
        if self._producer is not None:
            self._producer.purge()
            self._producer = None

    def _init(self):
        from confluent_kafka import KafkaException, Producer

        where = f"cluster {self.target.alias!r}, the state producer of flow {self.flow}"
        producer = clients.new_client(Producer, clients.client_config(
            self.target, "producer", **{**STATE_PRODUCER,
                                        "transactional.id": state_transactional_id(self.flow),
                                        "acks": "all", "linger.ms": 0,
                                        "partitioner": "murmur2_random",
                                        "logger": STATE_LOG}), where)
        try:
            producer.init_transactions(FENCE_TIMEOUT_S)
        except KafkaException as exc:
            if not clients.refuses_transactions(exc.args[0]):
                raise LeaseLostError(f"flow {self.flow}: cannot fence earlier holders on "
                                     f"cluster {self.target.alias!r}: {exc.args[0].str()}"
                                     ) from None
            reason = (f"cluster {self.target.alias!r} refuses the flow's transactions "
                      f"({state_transactional_id(self.flow)}: {exc.args[0].str()})")
            if self.exactly_once == "required":
                raise TransactionsRefusedError(
                    f"flow {self.flow}: exactly.once.support = required, but {reason}; grant "
                    "WRITE and DESCRIBE on the TransactionalId prefix 'mirrorflow|' "
                    "(docs/security.md)") from None
            log.warning("flow %s: %s; state writes are lease-checked, not fenced, and "
                        "records are written at-least-once (exactly.once.support = "
                        "requested)", self.flow, reason)
            self.refused = reason
            return None
        return producer

    def _cause(self, error):
        """The error behind ``error``, for the log: a produce call of a producer fenced
        meanwhile (its transaction's first request was answered while it still produced)
        raises only ``_FATAL``; poll raises the producer's fatal error itself, the
        fencing."""
        from confluent_kafka import KafkaError, KafkaException

        if error.code() != KafkaError._FATAL:
            return error
        try:
            self._producer.poll(0)
        except KafkaException as exc:
            return exc.args[0]
        return error

    def write(self, writes: list[Write], timeout: float) -> None:
        """Write ``writes`` (each a topic, its records and their headers) in one transaction
        of the flow's id; a fenced producer is initialised again (and the lease verified)
        before a new attempt. Writes to another cluster (offset syncs on the source) are
        not fenced, and go first."""
        from confluent_kafka import KafkaException

        fenced = [w for w in writes if w[0].cluster.alias == self.target.alias]
        for topic, records, headers in writes:
            if self._producer is None or topic.cluster.alias != self.target.alias:
                topic.write_unfenced(records, timeout, headers)
        if self._producer is None or not fenced:
            return
        names = ", ".join(dict.fromkeys(w[0].topic for w in fenced))
        refused = None  # the last error of a write the broker refused, not a fencing
        for _ in range(FENCE_ATTEMPTS):
            if self._producer is None:  # initialised again, and refused: unfenced
                for topic, records, headers in fenced:
                    topic.write_unfenced(records, timeout, headers)
                return
            ends: dict[tuple[str, int], int] = {}  # partition -> offset after its last record

            def landed(err, msg, ends=ends) -> None:
                if err is None:
                    tp = (msg.topic(), msg.partition())
                    ends[tp] = max(ends.get(tp, 0), msg.offset() + 1)

            try:
                self._producer.begin_transaction()
                for topic, records, headers in fenced:
                    for key, value in records:
                        self._produce(topic.topic, key, value, headers, landed)
                self._producer.commit_transaction(timeout)
                self._producer.poll(0)  # the delivery reports of what the commit flushed
                readable_later(self.target, ends, timeout)
                return
            except KafkaException as exc:
                error = self._cause(exc.args[0])
                if _fenced(error):
                    # Fenced by a newer producer of the flow's id (another holder, or a
                    # sibling task of this run): only a holder that still holds goes on.
                    log.info("flow %s: state write to %s fenced (%s); fencing again",
                             self.flow, names, error.str())
                    # Serve librdkafka's queued lines about it before dropping it (poll
                    # raises the fencing itself again).
                    with contextlib.suppress(KafkaException):
                        self._producer.poll(0)
                    self._producer = self._init()
                    self.verify()
                    refused = None
                    continue
                refused = error
                try:
                    self._producer.abort_transaction(timeout)
                except KafkaException:  # a state abort cannot leave: start over, fenced
                    self._producer = self._init()
                    self.verify()
                if not (error.txn_requires_abort() or error.retriable()):
                    break  # refused before it was sent (e.g. a record too large)
        if refused is not None:
            raise InternalTopicError(
                f"flow {self.flow}: writing {names} on cluster {self.target.alias!r} "
                f"failed: {refused.str()}; nothing of it was written") from None
        raise LeaseLostError(f"flow {self.flow}: a write to {names} on cluster "
                             f"{self.target.alias!r} was fenced {FENCE_ATTEMPTS} times in a "
                             "row; another holder keeps taking the flow, so nothing more is "
                             "written")


def _fenced(error) -> bool:
    """Whether a KafkaError says a newer producer of the transactional id fenced this one
    (librdkafka makes that fatal; a later call of the fatal producer says only ``_FATAL``)."""
    from confluent_kafka import KafkaError

    return error.fatal() or error.code() in (KafkaError._FATAL, KafkaError._FENCED,
                                             KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH)
