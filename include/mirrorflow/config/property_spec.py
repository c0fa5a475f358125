"""One flow property as MM2 defines it in its connectors' ``ConfigDef``: name, default (as
MM2 writes it), parser and meaning."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PropertySpec:
    """One flow property: its MM2 name, default (as MM2 writes it), parser and meaning."""

    name: str
    default: str
    parse: Callable[[str], Any]
    doc: str
    origin: str = "MM2"
