"""The proof's verdicts: per remote partition (:class:`PartitionVerdict`), per checkpoint
(:class:`CheckpointVerdict`) and per run (:class:`Validation`, stored with its plan and
written to the reports), each naming what it found in plain words."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from mirrorflow.errors import MirrorflowError
from mirrorflow.plain import plain
from mirrorflow.quality import reports

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]


class ValidationError(MirrorflowError):
    """The target does not hold exactly the run's records; the message names where."""


@dataclass
class PartitionVerdict:
    """One remote partition of the flow: its planned range compared (when the plan has
    one and the sample takes it), and its unverified region searched for foreign
    records."""

    topic: str
    partition: int
    remote_topic: str
    source_start: int | None = None
    source_end: int | None = None
    region_start: int | None = None
    region_end: int | None = None
    planned: int = 0
    verified: bool = False
    timestamps_compared: bool = True
    source_records: int = 0
    target_records: int = 0
    source_digest: str = ""
    target_digest: str = ""
    missing: int = 0
    duplicates: int = 0
    altered: int = 0
    misplaced: int = 0
    foreign: int = 0
    first_foreign_offset: int | None = None
    first_bad_source_offset: int | None = None
    first_bad_target_offset: int | None = None
    lag: int | None = None
    # Offsets [a, b) of the range the source lost (retention, DeleteRecords) after they
    # were written and before the proof read them again, and how many copies they have.
    lost: tuple[int, int] | None = None
    unproven: int = 0
    # Records of a compacted source that its cleaner removed after the mirror read them,
    # each proven by a newer record of its key (counted in source and target records).
    superseded: int = 0

    @property
    def checked(self) -> bool:
        return self.verified or self.region_start is not None

    @property
    def digest_match(self) -> bool:
        return self.source_digest == self.target_digest

    def problems(self) -> list[str]:
        """Plain-language findings, naming topic, partition and the first bad offset."""
        where = f"{self.topic}[{self.partition}] -> {self.remote_topic}[{self.partition}]"
        found = []
        if self.foreign:
            found.append(f"{self.remote_topic}[{self.partition}]: {self.foreign} records "
                         f"between offsets {self.region_start} and {self.region_end - 1} "
                         f"were not written by a mirror flow (the first at offset "
                         f"{self.first_foreign_offset})")
        if not self.verified:
            return found
        if self.source_records != self.planned:
            found.append(f"{where}: the source holds {self.source_records} records in offsets "
                         f"{self.source_start}..{self.source_end - 1}, the mirror wrote "
                         f"{self.planned}")
        if self.target_records != self.source_records:
            found.append(f"{where}: {self.target_records} records on the target in the "
                         f"flow's spans, {self.source_records} on the source")
        for name, meaning in (("missing", "source records missing on the target"),
                              ("duplicates", "records duplicated on the target"),
                              ("altered", "records on the target that are not source "
                                          "records (altered)")):
            if getattr(self, name):
                found.append(f"{where}: {getattr(self, name)} {meaning}")
        if self.first_bad_source_offset is not None or self.first_bad_target_offset is not None:
            found.append(f"{where}: first mismatch at source offset "
                         f"{self.first_bad_source_offset}, target offset "
                         f"{self.first_bad_target_offset}")
        return found


@dataclass
class CheckpointVerdict:
    """A checkpoint on the target against how far the flow has mirrored its partition.

    A group may be ahead of the mirror (live traffic): its checkpoint then points
    consumers at the end of what was mirrored, which is safe. A checkpoint that points past
    that end would make a failed-over consumer skip records not yet on the target."""

    group: str
    topic: str
    partition: int
    checkpoint_upstream_offset: int
    mirrored_end: int  # upstream: the next offset to mirror
    checkpoint_downstream_offset: int | None = None
    mirrored_downstream_end: int | None = None  # the remote offset after the mirrored ones

    def problem(self) -> str | None:
        if (self.checkpoint_downstream_offset is None
                or self.checkpoint_downstream_offset <= self.mirrored_downstream_end):
            return None
        return (f"checkpoint of group {self.group!r} for {self.topic}[{self.partition}] "
                f"points consumers at remote offset {self.checkpoint_downstream_offset}, past "
                f"the flow's mirrored records (remote offsets up to "
                f"{self.mirrored_downstream_end - 1}, upstream up to {self.mirrored_end - 1})")


@dataclass
class Validation:
    """The verdict of one run, stored with its plan and written to the reports."""

    flow: str
    run_id: str
    plan_id: str
    success: bool
    fraction: float
    verified_records: int = 0
    planned_records: int = 0
    ranges: list[PartitionVerdict] = field(default_factory=list)
    checkpoints: list[CheckpointVerdict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    expectations: dict[str, bool] = field(default_factory=dict)
    # A schema transfer's mappings the run's records use (quality.schema_check).
    schemas: list[dict] = field(default_factory=list)
    data_docs: str | None = None
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        # Rendering the Data Docs, and the thread doing it (neither stored).
        self._build: Callable[[], None] | None = None
        self._docs: threading.Thread | None = None

    def defer_docs(self, build: Callable[[], None]) -> None:
        """Hold the rendering of the run's Data Docs (``build``: the suites'
        :func:`~mirrorflow.quality.suites.build_docs`, into the run's reports) until
        :meth:`start_docs` or :meth:`wait_for_docs`; a repeating ``mirror`` task renders
        only its last cycle's, which the run's report shows
        (:mod:`mirrorflow.airflow.operators`)."""
        self.data_docs = str(reports.run_dir(self.flow, self.run_id) / "index.html")
        self._build = build

    def start_docs(self) -> None:
        """Render the Data Docs in the background, off the verdict's path, so a commit
        need not wait for HTML."""
        if self._build is not None and self._docs is None:
            log.info("rendering the Data Docs of plan %s into %s", self.plan_id, self.data_docs)
            self._docs = threading.Thread(target=self._build, name=f"data docs {self.run_id}")
            self._docs.start()

    def wait_for_docs(self) -> None:
        """Return once the run's Data Docs are written (rendering them now if nothing
        started it); whoever ends the run (or its process) waits here."""
        self.start_docs()
        if self._docs is not None:
            self._docs.join()

    @property
    def verified_fraction(self) -> float:
        return 1.0 if not self.planned_records else self.verified_records / self.planned_records

    def verified_ends(self) -> dict[TopicPart, int]:
        """Remote partition -> the end of the region this check proved."""
        return {(v.remote_topic, v.partition): v.region_end for v in self.ranges
                if v.region_end is not None}

    def to_dict(self) -> dict:
        doc = plain(self)
        doc["verified_fraction"] = round(self.verified_fraction, 6)
        for verdict, row in zip(self.ranges, doc["ranges"], strict=True):
            row["digest_match"] = verdict.digest_match
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> Validation:
        doc = dict(doc)
        doc.pop("verified_fraction", None)
        ranges = [PartitionVerdict(**{k: v for k, v in r.items() if k != "digest_match"})
                  for r in doc.pop("ranges", [])]
        cps = [CheckpointVerdict(**c) for c in doc.pop("checkpoints", [])]
        return cls(**doc, ranges=ranges, checkpoints=cps)

    def error(self) -> ValidationError:
        lines = "\n".join(f"  - {f}" for f in self.failures)
        return ValidationError(
            f"flow {self.flow}: run {self.run_id} failed its completeness check; positions "
            f"were not committed, plan {self.plan_id} stays pending:\n{lines}")
