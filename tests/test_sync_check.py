"""The proof's check of emitted offset syncs against the writers' spans (issue 32 §6)."""

from __future__ import annotations

import numpy as np

from mirrorflow.quality.sync_check import range_findings, shifted, sync_findings
from mirrorflow.source.ledger import Span, merged_syncs

WHERE = "orders[0] -> a.orders[0]"


def claim(*fields) -> Span:
    """A span of ``orders[0] -> a.orders[0]``: upstream first/last, downstream first/last,
    records, syncs."""
    return Span("p", "orders", 0, "a.orders", *fields)


def spans() -> list[Span]:
    """Two transactions: upstream 0..9 at 100..109; then 10..19 (a hole at 15: a
    transaction marker on the source) at 110..118, and another producer's record on the
    target before 120..124 (upstream 20..24)."""
    return [claim(0, 9, 100, 109, 10, ((0, 100),)),
            claim(10, 19, 110, 118, 9, ((10, 110), (16, 115))),
            claim(20, 24, 120, 124, 5, ((20, 120),))]


def test_the_syncs_merged_from_the_spans_agree_with_them() -> None:
    emitted = merged_syncs(spans())
    assert emitted == [(0, 100), (16, 115), (20, 120), (24, 124)]
    assert sync_findings(WHERE, spans(), emitted) == []
    assert range_findings({"topic": "orders", "partition": 0, "remote_topic": "a.orders",
                           "spans": [s.value().decode() for s in spans()],
                           "syncs": [list(p) for p in emitted]}) == []
    assert shifted(emitted, np.array([0, 9, 10, 14, 16, 19, 20, 24])).tolist() == [
        100, 109, 110, 114, 115, 118, 120, 124]


def test_a_wrong_emitted_sync_is_named() -> None:
    # The second distance change dropped: 16..19 would be translated one offset too far.
    assert sync_findings(WHERE, spans(), [(0, 100), (20, 120), (24, 124)]) == [
        f"{WHERE}: the emitted offset syncs put upstream offset 16 at 116, its span "
        f"10..19 -> 110..118 at 115"]
    assert sync_findings(WHERE, spans(), [(0, 100), (16, 115), (20, 121), (24, 124)]) == [
        f"{WHERE}: the emitted offset syncs put upstream offset 20 at 121, its span "
        f"20..24 -> 120..124 at 120",
        f"{WHERE}: the emitted offset sync 20 -> 121 disagrees with its span, which puts "
        f"it at 120"]
    assert sync_findings(WHERE, spans(), [(0, 100), (16, 115), (20, 120), (24, 124),
                                          (30, 130)]) == [
        f"{WHERE}: the emitted offset sync 30 -> 130 lies in no span the writers committed"]


def test_a_span_that_is_not_contiguous_on_the_target_is_named() -> None:
    holed = [claim(0, 9, 100, 110, 10, ((0, 100), (5, 106)))]
    assert sync_findings(WHERE, holed, [(0, 100), (5, 106), (9, 110)]) == [
        f"{WHERE}: span 0..9 -> 100..110 holds 10 records, not one at every remote offset "
        f"in between"]
    wrong_ends = [claim(0, 9, 100, 109, 10, ((0, 101),))]
    assert sync_findings(WHERE, wrong_ends, [(0, 101)]) == [
        f"{WHERE}: span 0..9 -> 100..109 has syncs [(0, 101)] that do not map its ends"]
