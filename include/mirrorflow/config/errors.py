"""The configuration's one error: it names the property (and line) at fault, on one line."""

from __future__ import annotations

from mirrorflow.errors import MirrorflowError


def one_line(text: str) -> str:
    """``text`` with control and separator characters escaped: a message quoting a key or
    value from the file stays one line whatever the file holds."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


class ConfigError(MirrorflowError):
    """A configuration error that names the property (and line) at fault, on one line."""

    def __init__(self, message: str, *, prop: str | None = None, line: int | None = None):
        where = []
        if line is not None:
            where.append(f"line {line}")
        if prop is not None:
            where.append(f"property '{prop}'")
        self.prop = prop
        self.line = line
        super().__init__(one_line(f"{', '.join(where)}: {message}" if where else message))
