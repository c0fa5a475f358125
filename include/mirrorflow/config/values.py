"""Value types of MM2's properties (``ConfigDef.Type``), each a parser that raises
``ValueError`` with what it expected: the caller names the property."""

from __future__ import annotations

import re
from collections.abc import Callable


def as_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low not in ("true", "false"):
        raise ValueError(f"expected true or false, got {raw!r}")
    return low == "true"


def as_int(raw: str) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise ValueError(f"expected a whole number, got {raw!r}")
    return int(text)


def as_non_negative_int(raw: str) -> int:
    value = as_int(raw)
    if value < 0:
        raise ValueError(f"expected a number >= 0, got {raw!r}")
    return value


def as_positive_int(raw: str) -> int:
    value = as_int(raw)
    if value < 1:
        raise ValueError(f"expected a number >= 1, got {raw!r}")
    return value


def as_replication_factor(raw: str) -> int:
    """A replication factor as Kafka takes it: positive, or -1 for the broker's default
    (``default.replication.factor``)."""
    value = as_int(raw)
    if value == 0 or value < -1:
        raise ValueError(f"expected a positive replication factor or -1 (the broker's "
                         f"default), got {raw!r}")
    return value


def as_list(raw: str) -> tuple[str, ...]:
    """ConfigDef.Type.LIST: comma-separated, items trimmed, empty string is empty list."""
    if not raw.strip():
        return ()
    return tuple(item.strip() for item in raw.split(","))


def as_regex_list(raw: str) -> tuple[str, ...]:
    items = as_list(raw)
    for item in items:
        try:
            re.compile(item)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {item!r}: {exc}") from None
    return items


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def as_string(raw: str) -> str:
    return raw.strip()


# Airflow's schedule presets: cron shorthands, one run, and runs back to back.
SCHEDULE_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly",
                    "@quarterly", "@yearly")


def as_schedule(raw: str) -> str | None:
    value = raw.strip()
    if value.lower() in ("none", "manual", ""):
        return None
    if value in SCHEDULE_PRESETS or (not value.startswith("@") and len(value.split()) == 5):
        return value
    raise ValueError(
        f"expected a 5-field cron expression, one of {', '.join(SCHEDULE_PRESETS)}, or "
        f"'none', got {raw!r}"
    )


def as_fraction(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"expected a number between 0 and 1, got {raw!r}") from None
    if not 0.0 < value <= 1.0:
        raise ValueError(f"expected a number in (0, 1], got {raw!r}")
    return value
