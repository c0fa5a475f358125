"""mirrorflow.plain gives what dataclasses.asdict gives, without deep copies."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import asdict, dataclass, field

from mirrorflow.plain import plain

Span = namedtuple("Span", "first last")


@dataclass
class Inner:
    offset: int
    key: bytes | None
    spans: tuple = ()


@dataclass
class Outer:
    name: str
    inner: Inner
    items: list[Inner] = field(default_factory=list)
    by_topic: dict = field(default_factory=dict)
    span: Span | None = None


def test_plain_equals_asdict_on_nested_records() -> None:
    record = Outer("flow", Inner(3, b"k", (1, 2)),
                   [Inner(4, None), Inner(5, b"", (Inner(6, b"x"),))],
                   {"t": [Inner(7, b"y")], "u": {"v": 1.5}}, Span(1, Inner(2, None)))
    got = plain(record)
    assert got == asdict(record)
    assert type(got["inner"]["spans"]) is tuple and type(got["items"]) is list
    assert got["span"] == Span(1, {"offset": 2, "key": None, "spans": ()})
    assert got["items"][1]["spans"] == ({"offset": 6, "key": b"x", "spans": ()},)
