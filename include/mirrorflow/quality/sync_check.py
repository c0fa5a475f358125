"""The proof's check of the offset syncs a run emits against the spans its writers committed.

Failover translates a consumer's upstream offset with the syncs in MM2's offset-syncs
topic, so a wrong sync sends the consumer to the wrong record. The records themselves are
proven at the remote offsets the spans' own syncs give them (the writer's digests place
each record by its span's syncs, and a source read by the syncs emitted); this check ties
the emitted list, merged across transactions and attempts, to those spans:

* each span is contiguous on the target: its ``records`` fill ``[downstream_first,
  downstream_last]`` (every offset in between is the flow's, not only the ends), and its
  own syncs map its first and last upstream offsets to those ends;
* every emitted sync lies in a span and maps its upstream offset where that span does;
* every sync point and end of every span maps, through the emitted syncs, where the span
  does. Both mappings are piecewise shifts, so agreeing on the breakpoints of both, they
  agree on every offset of the range.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from mirrorflow.source.ledger import Span

Pair = tuple[int, int]


def shift(syncs: Sequence[Pair], upstream: int) -> int | None:
    """Where piecewise-shift ``syncs`` (sorted) put ``upstream``; None before the first."""
    i = bisect.bisect_right([u for u, _ in syncs], upstream) - 1
    return None if i < 0 else upstream + syncs[i][1] - syncs[i][0]


def shifted(syncs: Sequence[Pair], upstream):
    """:func:`shift` of a numpy array of upstream offsets, none before the first sync."""
    import numpy as np

    ordered = sorted(syncs)
    ups = np.array([u for u, _ in ordered], dtype=np.int64)
    deltas = np.array([d - u for u, d in ordered], dtype=np.int64)
    return upstream + deltas[np.searchsorted(ups, upstream, side="right") - 1]


def sync_findings(where: str, spans: Sequence[Span], emitted: Sequence[Pair]) -> list[str]:
    """What is wrong with one range's emitted syncs or spans (``where``: the range's
    ``topic[partition] -> remote[partition]``); empty when they agree."""
    out = []
    emitted = sorted(emitted)
    ordered = sorted(spans, key=lambda s: s.upstream_first)
    for span in ordered:
        name = (f"span {span.upstream_first}..{span.upstream_last} -> "
                f"{span.downstream_first}..{span.downstream_last}")
        if span.records != span.downstream_last - span.downstream_first + 1:
            out.append(f"{where}: {name} holds {span.records} records, not one at every "
                       f"remote offset in between")
        own = sorted(span.syncs)
        if (not own or own[0][0] != span.upstream_first
                or shift(own, span.upstream_first) != span.downstream_first
                or shift(own, span.upstream_last) != span.downstream_last):
            out.append(f"{where}: {name} has syncs {own} that do not map its ends")
            continue
        points = [p[0] for p in own] + [span.upstream_last]
        for upstream in points:
            if shift(emitted, upstream) != shift(own, upstream):
                out.append(f"{where}: the emitted offset syncs put upstream offset {upstream} "
                           f"at {shift(emitted, upstream)}, its {name} at "
                           f"{shift(own, upstream)}")
                break
    for upstream, downstream in emitted:
        holder = next((s for s in ordered
                       if s.upstream_first <= upstream <= s.upstream_last), None)
        if holder is None:
            out.append(f"{where}: the emitted offset sync {upstream} -> {downstream} lies in "
                       f"no span the writers committed")
        elif (placed := shift(sorted(holder.syncs), upstream)) != downstream:
            out.append(f"{where}: the emitted offset sync {upstream} -> {downstream} "
                       f"disagrees with its span, which puts it at {placed}")
    return out


def range_findings(done: dict) -> list[str]:
    """:func:`sync_findings` of one range of a plan's result (``spans``: the span records'
    JSON, as the writers committed them; ``syncs``); nothing for a result stored before
    results listed their spans."""
    if "spans" not in done:
        return []
    where = (f"{done['topic']}[{done['partition']}] -> "
             f"{done['remote_topic']}[{done['partition']}]")
    return sync_findings(where, [Span.decode(s.encode()) for s in done["spans"]],
                         [(int(u), int(d)) for u, d in done.get("syncs", [])])
