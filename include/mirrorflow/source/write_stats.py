"""Record ages a writer measures batch by batch: when it got a record, and when the
record's transaction committed, each minus the record's timestamp (no per-record Python
work: a batch's timestamp min, max and sum)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TimestampStats:
    """Record timestamps (ms) of records not yet measured: count, min, max, sum."""

    count: int = 0
    min: float = float("inf")
    max: float = float("-inf")
    total: float = 0.0

    def add_column(self, column) -> None:
        """Fold an Arrow timestamp column in (nulls skipped)."""
        import pyarrow.compute as pc

        micros = column.cast("int64")
        n = len(micros) - micros.null_count
        if not n:
            return
        bounds = pc.min_max(micros).as_py()
        self.count += n
        self.min = min(self.min, bounds["min"] / 1000)
        self.max = max(self.max, bounds["max"] / 1000)
        self.total += pc.sum(micros).as_py() / 1000

    def merged(self, other: TimestampStats) -> TimestampStats:
        return TimestampStats(self.count + other.count, min(self.min, other.min),
                              max(self.max, other.max), self.total + other.total)


@dataclass
class AgeStats:
    """min, max and sum of (a moment - record timestamp) in ms, folded batch by batch from
    each batch's timestamp min, max and sum (no per-record Python work)."""

    count: int = 0
    min: float | None = None
    max: float | None = None
    total: float = 0.0

    def add(self, at_ms: float, ts: TimestampStats) -> None:
        if not ts.count:
            return
        young, old = at_ms - ts.max, at_ms - ts.min
        self.min = young if self.min is None else min(self.min, young)
        self.max = old if self.max is None else max(self.max, old)
        self.total += ts.count * at_ms - ts.total
        self.count += ts.count

    def summary(self) -> dict[str, float] | None:
        if not self.count:
            return None
        return {"min": round(self.min, 1), "max": round(self.max, 1),
                "avg": round(self.total / self.count, 1)}
