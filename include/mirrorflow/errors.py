"""The one error base class: every error mirrorflow raises derives from it, so a caller
(the CLI, a DAG task, an application) catches mirrorflow's failures, and only those, with
one ``except MirrorflowError``; its message is one line naming what is at fault."""

from __future__ import annotations

import re


class MirrorflowError(Exception):
    """An error of mirrorflow's; the message names the property, topic, offset or cluster."""


class DataLossError(MirrorflowError):
    """Records not yet mirrored were removed from the source (retention, truncation): the
    planner finds them gone before a run, a writer or the mirror's result while it runs.
    The message names the topic, partition, offsets and ``failOnDataLoss``."""


# A Java or Python exception line inside a longer text (Spark's wrapping, a traceback).
_EXCEPTION_LINE = re.compile(r"^\s*(?:Caused by: )?([A-Za-z_][\w.$]*(?:Error|Exception)): (\S.*)$",
                             re.MULTILINE)


def first_exception(text: str) -> str | None:
    """The first ``Name: message`` exception line of ``text`` (a driver's log, Spark's
    text of a failed job), with the name's package dropped; None where there is none."""
    found = _EXCEPTION_LINE.search(text)
    if found is None:
        return None
    return f"{found.group(1).rsplit('.', 1)[-1]}: {found.group(2).strip()}"


def one_line(exc: BaseException) -> str:
    """What a user is told of ``exc``: a mirrorflow error's own message; of anything else
    the first exception line its text holds (Spark wraps a task's failure in pages of
    stack traces), else its type and first line."""
    text = str(exc).strip()
    if isinstance(exc, MirrorflowError):
        return text
    return first_exception(text) or (f"{type(exc).__name__}: {text.splitlines()[0]}" if text
                                     else type(exc).__name__)


# A mirrorflow error raised where Spark ran it: in a Python worker (its traceback's last
# line) or in the JVM (the range source's ``dev.mirrorflow...XException``, whose Python
# twin is ``XError``).
_RAISED = re.compile(r"(?:\bmirrorflow\.[\w.]*?(\w+Error)|\bdev\.mirrorflow\.[\w.]*?(\w+)Exception)"
                     r": ([^\n]+)")


def raised_within(text: str, default: type[MirrorflowError] = MirrorflowError
                  ) -> MirrorflowError | None:
    """The last mirrorflow error ``text`` (Spark's text of a failed job) names, raised
    again with its own type and one-line message; None where it names none."""
    found = _RAISED.findall(text)
    if not found:
        return None
    python, java, message = found[-1]
    return error_named(python or f"{java}Error", message.strip(), default)


def described(exc: BaseException) -> tuple[str, str]:
    """``(type name, one-line message)`` of ``exc`` for another process to raise again
    (:func:`error_named`): the mirrorflow error inside a Spark failure where it holds
    one."""
    if not isinstance(exc, MirrorflowError):
        found = raised_within(str(exc))
        if found is not None:
            return type(found).__name__, str(found)
    return type(exc).__name__, one_line(exc)


def error_named(name: str, message: str,
                default: type[MirrorflowError] = MirrorflowError) -> MirrorflowError:
    """An error of the mirrorflow class called ``name`` (any loaded subclass of
    :class:`MirrorflowError`), else of ``default``: how a failure that crossed a process
    boundary (a Spark worker, a spark-submit job) is raised again with its own type."""
    classes = [MirrorflowError]
    while classes:
        kind = classes.pop()
        if kind.__name__ == name:
            try:
                return kind(message)
            except TypeError:  # a class whose constructor takes more than a message
                break
        classes.extend(kind.__subclasses__())
    return default(message)
