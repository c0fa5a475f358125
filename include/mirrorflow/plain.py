"""Records (dataclasses) as plain values for JSON: reports, results, stored state.

``dataclasses.asdict`` deep-copies every leaf through ``copy.deepcopy``; a run's report
over 1,000 partitions made 160,000 such copies (0.65 s of a 10 s run). Records here hold
scalars, strings, bytes and containers of them, which need no copy: :func:`plain` builds
the same dicts, lists and tuples without one.
"""

from __future__ import annotations

import functools
from dataclasses import fields, is_dataclass
from typing import Any


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


# Leaves, by exact type: most values are, and one set lookup tells them (a report over
# 10,000 partitions holds millions).
_LEAVES = frozenset({str, int, float, bool, bytes, type(None)})


def plain(value: Any) -> Any:
    """``value`` with every dataclass instance in it (nested in dataclasses, lists,
    tuples and dicts) a dict of its fields, as ``dataclasses.asdict`` gives."""
    if type(value) in _LEAVES:
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return {name: plain(getattr(value, name)) for name in _names(type(value))}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return type(value)(*map(plain, value)) if hasattr(value, "_fields") \
            else tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    return value
