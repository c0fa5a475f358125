"""The transactions of one write slot (:class:`SlotTransactions`, the base of
:class:`mirrorflow.source.writer.SlotWriter`): begin, settle each produced slice's remote
offsets into span records, commit records, spans, new schema mappings and resume
positions together, and, for a passing cause (a record timed out, a broker went away),
abort and write the transaction again. Where the target refuses transactions, the same
steps run at-least-once: flushed, then positions committed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.kafka import clients
from mirrorflow.quality.digests import RangeDigest
from mirrorflow.quality.sync_check import shifted
from mirrorflow.source import ledger
from mirrorflow.source.write_stats import AgeStats, TimestampStats
from mirrorflow.source.write_task import RangeResult, WriteError, WriteTask

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0
TRANSACTION_ATTEMPTS = 3


class Abortable(Exception):
    """The open transaction must be aborted for a cause that may pass (a record timed
    out, a broker went away): it is written again, up to ``TRANSACTION_ATTEMPTS`` times."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RangeState:
    """One range's state inside a :class:`~mirrorflow.source.writer.SlotWriter`."""

    def __init__(self, task: WriteTask) -> None:
        self.task = task
        self.result = RangeResult(task.topic, task.partition, task.remote_topic, task.start,
                                  task.end)
        self.next = task.start  # the next upstream offset to write
        self.start_checked = False
        self.seen = False  # records of it reached the writer
        self.txn: list[Slice] = []  # its slices in the open transaction, in order
        # Metrics: a record's age when the writer gets it, and when its write is committed.
        self.age = AgeStats()
        self.latency = AgeStats()
        self.uncommitted = TimestampStats()
        self.digest = RangeDigest(task.start)
        self.schema_ids: set[tuple[str, int]] = set()

    @property
    def where(self) -> str:
        return (f"{self.task.topic}[{self.task.partition}] -> "
                f"{self.task.remote_topic}[{self.task.partition}]")


class SlotTransactions:
    """The transaction state and steps of a slot writer; the writer produces records
    (``_produce``) and sets up ``_producer``, ``ranges``, ``tasks`` and ``target``."""

    def __init__(self) -> None:
        self.transactional = False
        self.careful = False  # a callback per record, once another producer interleaved
        self._producer = None
        self._group = None
        self._txn_records = 0
        self._txn_bytes = 0
        self._fatal = None  # librdkafka's fatal error (a newer writer fenced this one)
        self._pending: list[tuple[RangeState, list[Any]]] | None = None  # slices to write again
        self._aborts = 0  # of the open transaction, for a passing cause
        self._delivery_timeout_s = TIMEOUT_S

    def _open_ranges(self) -> list[RangeState]:
        return [state for state in self.ranges.values() if state.txn]

    def _begin(self) -> None:
        if self.transactional:
            self._producer.begin_transaction()
        for state in self.ranges.values():
            state.txn = []
        self._txn_records, self._txn_bytes = 0, 0

    def _commit(self) -> None:
        """Wait for the transaction's records, then write the spans and resume position of
        every range in it into it and commit: data, spans and positions land together."""
        touched = self._open_ranges()
        if not touched:
            if self.transactional:
                self._producer.abort_transaction(TIMEOUT_S)
            return
        while True:
            try:
                spans = self._commit_once(touched)
                break
            except Abortable as exc:
                self._write_again(exc.reason)
        self._aborts = 0
        if self.mapper is not None:
            self.mapper.committed()
        self._committed(touched, spans)

    def _commit_once(self, touched: list[RangeState]) -> dict[int, list[ledger.Span]]:
        """One attempt at committing the open transaction; its spans per range."""
        from confluent_kafka import KafkaException, TopicPartition

        spans = self._settle(touched)
        if spans is None:  # another producer interleaved: write this transaction again
            log.warning("%s: another producer writes to a remote partition of this slot; "
                        "writing with a delivery callback per record from now on",
                        self.where)
            self.careful = True
            self._rewrite()
            spans = self._settle(touched)
            if spans is None:
                raise WriteError(f"{self.where}: remote offsets of one record are not "
                                 "contiguous with themselves")  # never with a callback each
        failed = self._produce_state(
            [(self._spans_topic, span.value(), span.key())
             for state in touched for span in spans[id(state)]]
            + [(self._plans_topic, m.value(), m.key())
               for m in (self.mapper.uncommitted if self.mapper else [])])
        positions = [TopicPartition(state.task.remote_topic, state.task.partition,
                                    int(state.txn[-1].upstream[-1]) + 1,
                                    metadata=state.task.plan_id) for state in touched]
        try:
            if self.transactional:
                self._producer.send_offsets_to_transaction(positions, self._group, TIMEOUT_S)
                self._producer.commit_transaction(TIMEOUT_S)
            else:
                self._flush(touched)
                self._commit_positions_without_transaction(positions)
        except KafkaException as exc:
            error = exc.args[0]
            lasting = [e for e in failed if not passing(e)]
            if lasting:
                raise self._spans_failed(lasting[0]) from None
            if self.transactional and error.txn_requires_abort() and not error.fatal():
                raise Abortable(error.str()) from None
            raise self._transaction_failed(error.str()) from None
        return spans

    def _produce_state(self, records: list[tuple[str, bytes, bytes]]) -> list:
        """Produce the span records (and new schema mappings) into the transaction; the
        returned list fills with their delivery errors."""
        from confluent_kafka import KafkaException

        failed: list = []

        def delivered(err, _msg) -> None:
            if err is not None:
                failed.append(err)

        for topic, value, key in records:
            try:
                self._producer.produce(topic, value, key, on_delivery=delivered)
            except KafkaException as exc:
                raise self._abortable(exc.args[0]) or self._spans_failed(exc.args[0]) from None
        return failed

    def _spans_failed(self, error) -> WriteError:
        return WriteError(f"writing {self.where}: cannot write its span records to "
                          f"{self._spans_topic} on cluster {self.target.alias!r}: "
                          f"{error.str()}; nothing of the transaction was committed")

    def _committed(self, touched: list[RangeState], spans: dict[int, list[ledger.Span]]) -> None:
        """Account a committed transaction to its ranges."""
        at = time.time() * 1000
        for state in touched:
            mine = spans[id(state)]
            # The proof's digests place each record where its span's syncs say, so a wrong
            # sync fails the proof instead of sending a consumer astray after failover.
            syncs = [pair for span in mine for pair in span.syncs]
            for piece in state.txn:
                state.digest.add(piece.upstream, shifted(syncs, piece.upstream), piece.batch)
            result = state.result
            for span in mine:
                result.spans.append(span.value().decode())
                result.records_written += span.records
                if result.first_downstream is None:
                    result.first_downstream = span.downstream_first
                result.last_downstream = span.downstream_last
            result.bytes_written += sum(p.bytes for p in state.txn)
            # Records of a batch that straddles a commit count at the next one: an upper
            # bound.
            state.latency.add(at, state.uncommitted)
            state.uncommitted = TimestampStats()
            state.txn = []

    def _on_error(self, error) -> None:
        """librdkafka's error callback: keep a fatal error, which later calls only report
        as "Local: Fatal error"."""
        if error.fatal():
            self._fatal = error

    def _serve_fatal(self) -> None:
        """Serve the callbacks that name a fatal error; confluent-kafka raises that error
        from poll() as well."""
        from confluent_kafka import KafkaException

        try:
            self._producer.poll(0)
        except KafkaException as exc:
            self._fatal = self._fatal or exc.args[0]

    def _transaction_failed(self, reason: str) -> WriteError:
        """The open transaction failed: name its ranges' upstream offsets and the cause
        (the fatal error behind a generic one, e.g. the fencing by a newer writer)."""
        cause = self._fatal.str() if self._fatal is not None else reason
        touched = self._open_ranges()
        state = touched[0]
        more = (f" (and of {len(touched) - 1} more ranges of write slot "
                f"{self.tasks[0].slot})" if len(touched) > 1 else "")
        return WriteError(
            f"writing {state.where}: the transaction of upstream offsets "
            f"{state.txn[0].upstream[0]}..{state.txn[-1].upstream[-1]}{more} failed: "
            f"{cause}")

    def _flush(self, touched: list[RangeState]) -> None:
        from confluent_kafka import KafkaException

        try:
            remaining = self._producer.flush(TIMEOUT_S)
        except SystemError:
            # confluent-kafka raises this from flush() when the producer has hit a fatal
            # error (fenced by a newer writer); the transaction's own call names the error.
            try:
                self._producer.commit_transaction(1)
            except KafkaException as exc:
                raise self._transaction_failed(exc.args[0].str()) from None
            raise
        if remaining:
            raise WriteError(f"writing {self.where}: {remaining} records unacknowledged after "
                             f"{TIMEOUT_S:.0f}s")
        for state in touched:
            for piece in state.txn:
                if piece.error is None:
                    continue
                if self.transactional and piece.passing:
                    raise Abortable(f"{state.where} {piece.error}")
                raise WriteError(f"writing {state.where}: {piece.error}")

    def _abortable(self, error) -> Abortable | None:
        """A produce refused because the open transaction already failed (``_STATE``):
        abortable, for the cause its delivery reports name."""
        from confluent_kafka import KafkaError

        if error.code() != KafkaError._STATE or not self.transactional:
            return None
        self._producer.poll(0)  # serves the delivery reports
        return Abortable(next((f"{state.where} {piece.error}"
                                for state in self._open_ranges() for piece in state.txn
                                if piece.error is not None), error.str()))

    def _settle(self, touched: list[RangeState]) -> dict[int, list[ledger.Span]] | None:
        """Per range of the transaction (by ``id``), its spans (runs of contiguous remote
        offsets); None when a slice written with callbacks at its ends only was
        interleaved."""
        import numpy as np

        self._flush(touched)
        out = {}
        for state in touched:
            runs: list[tuple[Any, Any]] = []  # (upstream offsets, downstream offsets)
            for piece in state.txn:
                downstream = piece.downstream()
                if downstream is None:
                    return None
                breaks = np.flatnonzero(np.diff(downstream) != 1) + 1
                for up, down in zip(np.split(piece.upstream, breaks),
                                    np.split(downstream, breaks), strict=True):
                    if runs and runs[-1][1][-1] + 1 == down[0]:
                        runs[-1] = (np.concatenate((runs[-1][0], up)),
                                    np.concatenate((runs[-1][1], down)))
                    else:
                        runs.append((up, down))
            out[id(state)] = [span_of(state.task, up, down) for up, down in runs]
        return out

    def _write_again(self, reason: str) -> None:
        """A passing failure (a record timed out while a broker restarted) made the open
        transaction abortable: abort it and write its slices again, in a new one, unless
        it failed ``TRANSACTION_ATTEMPTS`` times."""
        while True:
            self._aborts += 1
            if self._aborts >= TRANSACTION_ATTEMPTS:
                raise self._transaction_failed(reason)
            log.warning("%s: transaction attempt %d of %d aborted (%s); writing it again",
                        self.where, self._aborts, TRANSACTION_ATTEMPTS, reason)
            try:
                self._rewrite()
                return
            except Abortable as exc:
                reason = exc.reason

    def _rewrite(self) -> None:
        """Abort the open transaction and produce its slices again in a new one (kept
        until they are: a failure midway rewrites all of them again)."""
        from confluent_kafka import KafkaException

        if self._pending is None:
            self._pending = [(state, [piece.batch for piece in state.txn])
                             for state in self._open_ranges()]
        try:  # no longer than a record may take: a target down that long fails the write
            self._producer.abort_transaction(self._delivery_timeout_s)
        except KafkaException as exc:
            raise self._transaction_failed(exc.args[0].str()) from None
        self._begin()
        for state, batches in self._pending:
            for batch in batches:
                self._produce(state, batch)
        self._pending = None

    def _commit_positions_without_transaction(self, positions) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions

        group = ledger.progress_group(self.tasks[0].source_alias)
        admin = clients.admin_client(self.target)
        clients.answer(admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, positions)], request_timeout=TIMEOUT_S)[group],
            self.target, f"committing the positions to group {group!r}", TIMEOUT_S)


def span_of(task: WriteTask, upstream, downstream) -> ledger.Span:
    import numpy as np

    delta = downstream - upstream
    changes = np.concatenate(([0], np.flatnonzero(np.diff(delta)) + 1))
    return ledger.Span(task.plan_id, task.topic, task.partition, task.remote_topic,
                       int(upstream[0]), int(upstream[-1]), int(downstream[0]),
                       int(downstream[-1]), len(upstream),
                       tuple((int(upstream[i]), int(downstream[i])) for i in changes))


@dataclass
class Slice:
    """Records produced inside one transaction, waiting for their remote offsets: the
    first and last (or, careful, every) record carry a delivery callback."""

    batch: Any
    upstream: Any  # numpy int64 array of the records' source offsets
    careful: bool
    bytes: int
    offsets: dict[int, int] = field(default_factory=dict)
    error: str | None = None
    passing: bool = False  # the error may not recur: a timeout, a broker going away

    def delivered(self, index: int, err, msg) -> None:
        if err is not None:
            if self.error is None:
                self.error = f"offset {self.upstream[index]}: {err.str()}"
                self.passing = passing(err)
        else:
            self.offsets[index] = msg.offset()

    def downstream(self):
        """Every record's remote offset, or None when the ends alone cannot tell them."""
        import numpy as np

        n = len(self.upstream)
        if self.careful or len(self.offsets) == n:
            return np.array([self.offsets[i] for i in range(n)], dtype=np.int64)
        first, last = self.offsets[0], self.offsets[n - 1]
        if last - first != n - 1:
            return None
        return np.arange(first, last + 1, dtype=np.int64)


def passing(error) -> bool:
    """Whether a failed delivery may succeed when written again: a timeout, a broker
    gone for a while, or what Kafka marks retriable."""
    from confluent_kafka import KafkaError

    return error.retriable() or error.code() in (
        KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT)
