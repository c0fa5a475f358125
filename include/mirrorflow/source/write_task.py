"""What one write task is given (:class:`WriteTask`, a planned range as the Spark task
sees it) and returns (:class:`RangeResult`, what its attempt did), and the transactional
id that fences every earlier writer of its slot."""

from __future__ import annotations

from dataclasses import dataclass, field

from mirrorflow.errors import MirrorflowError
from mirrorflow.plain import plain


class WriteError(MirrorflowError):
    """A range could not be written; the message names topic, partition and offset."""


@dataclass(frozen=True)
class WriteTask:
    """One planned range, as the Spark task that writes it sees it."""

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

    @property
    def source_alias(self) -> str:
        return self.flow.split("->", 1)[0]


@dataclass
class RangeResult:
    """What one attempt's writer did for one range (the ledger holds what every attempt
    wrote; this holds this attempt's figures and findings)."""

    topic: str
    partition: int
    remote_topic: str
    start: int
    end: int
    resumed_from: int = 0
    records_written: int = 0
    bytes_written: int = 0
    first_downstream: int | None = None
    last_downstream: int | None = None
    transactional: bool = False
    at_least_once: str | None = None  # why this range was written without transactions
    restamped: int = 0  # records whose timestamp (<= 0) was written as the plan's time
    gaps: list[tuple[int, int]] = field(default_factory=list)
    record_age_ms: dict[str, float] | None = None
    replication_latency_ms: dict[str, float] | None = None
    write_seconds: float = 0.0  # its write slot's writer was open (its ranges are written together)
    # The span records this attempt committed (their JSON): the driver need not wait for
    # the transaction markers to reach the spans topic before it reads it.
    spans: list[str] = field(default_factory=list)
    # The proof's source-side aggregates, when this attempt wrote the whole range from
    # contiguous offsets (digests.RangeDigest.summary).
    source_digest: dict | None = None
    # (record part, source schema id) of the records it wrote, under a schema transfer.
    schema_ids: list[tuple[str, int]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return plain(self)


def transactional_id(flow_name: str, slot: int) -> str:
    """Fixed per flow and write slot: a plan deals each range to the same slot in every
    attempt, so a new writer of a range fences every earlier one."""
    return f"mirrorflow|{flow_name}|write-{slot}"
