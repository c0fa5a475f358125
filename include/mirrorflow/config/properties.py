"""Java ``.properties`` reader, exactly as ``java.util.Properties.load`` reads it.

MM2 loads ``connect-mirror-maker.properties`` with ``Utils.loadProps``, i.e. Java's
``Properties.load``. We keep the line number of every entry so that configuration
errors can point at the line a user has to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mirrorflow.errors import MirrorflowError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_KEY_TERMINATORS = "=: \t\f"
_WHITESPACE = " \t\f"


class PropertiesSyntaxError(MirrorflowError):
    """A malformed ``\\uXXXX`` escape: the only syntax error Java reports."""


@dataclass(frozen=True)
class Entry:
    """One key/value pair with the (1-based) line its logical line starts on."""

    key: str
    value: str
    line: int


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continuation lines; drop blank and comment lines. Returns (line, raw)."""
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    result: list[tuple[int, str]] = []
    i = 0
    while i < len(natural):
        start = i
        line = natural[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 1:
                parts.append(line[:-1])
                if i == len(natural):
                    break
                line = natural[i].lstrip(_WHITESPACE)
                i += 1
                continue
            parts.append(line)
            break
        result.append((start + 1, "".join(parts)))
    return result


def _unescape(raw: str, line: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\" or i + 1 >= len(raw):
            out.append(ch)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesSyntaxError(f"line {line}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split_key_value(raw: str) -> tuple[str, str]:
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\":
            i += 2
            continue
        if ch in _KEY_TERMINATORS:
            break
        i += 1
    key, rest = raw[:i], raw[i:]
    rest = rest.lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str) -> list[Entry]:
    """All entries in file order (duplicates kept: Java keeps the last one)."""
    entries = []
    for line, raw in _logical_lines(text):
        key, value = _split_key_value(raw)
        entries.append(Entry(_unescape(key, line), _unescape(value, line), line))
    return entries


def decode_properties(data: bytes) -> str:
    """A properties file's text. Java reads ISO-8859-1; UTF-8 is accepted as a superset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def load_properties(path: str | Path) -> list[Entry]:
    """Read a properties file (see :func:`decode_properties`)."""
    return parse_properties(decode_properties(Path(path).read_bytes()))
