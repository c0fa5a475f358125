"""What one write task is given (:class:`WriteTask`, a planned range as the JVM writer of
its slot sees it: ``dev.mirrorflow.kafka.write.WriteTask`` reads these fields). What it
returns per range, the fields of ``dev.mirrorflow.kafka.write.RangeResult``: topic,
partition, remote_topic, start, end, resumed_from, records_written, bytes_written,
first_downstream, last_downstream, transactional, at_least_once, restamped, gaps,
record_age_ms, replication_latency_ms, write_seconds, spans (the span records it
committed), source_digest (the proof's aggregates of a range it wrote whole from
contiguous offsets), schema_ids (set by the driver)."""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.errors import MirrorflowError


class WriteError(MirrorflowError):
    """A range could not be written; the message names topic, partition and offset."""


class WriterFencedError(WriteError):
    """A newer producer of the write slot's ``transactional.id`` fenced this attempt's
    (another attempt of the plan) or the transaction outlived ``transaction.timeout.ms``:
    its open transaction is aborted, and the newer attempt or the next run finishes the
    plan. Raised by the JVM writer as ``WriterFencedException``."""


class RecordTooLargeError(WriteError):
    """A record is larger, as a record batch, than its remote topic's ``max.message.bytes``
    (refused before it was sent; the message names the range, offset, size and limit).
    Raised by the JVM writer as ``RecordTooLargeException``."""


@dataclass(frozen=True)
class WriteTask:
    """One planned range, as the write task of its slot sees it."""

    flow: str
    plan_id: str
    topic: str
    partition: int
    remote_topic: str
    start: int
    end: int
    max_message_bytes: int | None = None
    fail_on_data_loss: bool = True
    exactly_once: str = "requested"
    chunk_records: int = 100_000
    written_until: int = 0  # the plan's spans: the next upstream offset earlier attempts left
    restamp_ms: int = 0  # the plan's time: what a timestamp at or before the epoch becomes
    slot: int = 0  # the plan's write slot for the range (Range.slot)
