"""Where a flow starts a source partition it holds no position for: MM2's source
consumer's ``auto.offset.reset``.

MM2 reads a partition that has no committed offset in ``mm2-offsets`` from where its
source consumer's ``auto.offset.reset`` says, ``earliest`` unless the file sets it
(``MirrorSourceConfig.sourceConsumerConfig`` puts it if absent). The file can set it three
ways, and MM2 takes the first it finds of: the flow's ``source.consumer.auto.offset.reset``,
the source cluster's ``consumer.auto.offset.reset`` (``MirrorMakerConfig`` turns it into
the former), the flow's ``consumer.auto.offset.reset``. mirrorflow resolves it the same way
and its plan honours it (``latest``: the partition's chain starts at its end, the offsets
before it named as left out; ``none``: the plan fails naming the partition, as MM2's
consumer does). Kafka 4's ``by_duration:`` is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

RESETS = ("earliest", "latest", "none")
# The flow-level keys (after ``source->target.``) that set it.
FLOW_KEYS = ("source.consumer.auto.offset.reset", "consumer.auto.offset.reset")


class _Entry(Protocol):
    value: str
    line: int


@dataclass(frozen=True)
class OffsetReset:
    """``value`` (one of :data:`RESETS`) and the property that set it (empty: MM2's
    default)."""

    value: str = "earliest"
    prop: str = ""

    @property
    def named(self) -> str:
        """How a message names the setting."""
        return f"{self.prop} = {self.value}" if self.prop else \
            f"MM2's default auto.offset.reset = {self.value}"


def resolve(flow_name: str, source: str, latest: Mapping[str, _Entry]) -> OffsetReset:
    """The flow's reset; a value that is not one of :data:`RESETS` raises
    :class:`InvalidReset` naming its property and line."""
    for key in (f"{flow_name}.source.consumer.auto.offset.reset",
                f"{source}.consumer.auto.offset.reset",
                f"{flow_name}.consumer.auto.offset.reset"):
        entry = latest.get(key)
        if entry is None:
            continue
        value = entry.value.strip().lower()
        if value.startswith("by_duration:"):
            raise InvalidReset(key, entry, f"'{key} = {entry.value.strip()}' (Kafka's "
                           "by_duration reset) is not supported: set earliest or latest")
        if value not in RESETS:
            raise InvalidReset(key, entry, f"expected one of {', '.join(RESETS)} for "
                           f"'{key}', got {entry.value.strip()!r}")
        return OffsetReset(value, key)
    return OffsetReset()


class InvalidReset(ValueError):
    """A reset value mirrorflow cannot honour; ``key`` and ``entry`` name it."""

    def __init__(self, key: str, entry: _Entry, message: str) -> None:
        super().__init__(message)
        self.key, self.entry = key, entry
