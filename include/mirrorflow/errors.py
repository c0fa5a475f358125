"""The one error base class: every error mirrorflow raises derives from it, so a caller
(the CLI, a DAG task, an application) catches mirrorflow's failures, and only those, with
one ``except MirrorflowError``; its message is one line naming what is at fault."""

from __future__ import annotations


class MirrorflowError(Exception):
    """An error of mirrorflow's; the message names the property, topic, offset or cluster."""


class DataLossError(MirrorflowError):
    """Records not yet mirrored were removed from the source (retention, truncation): the
    planner finds them gone before a run, a writer or the mirror's result while it runs.
    The message names the topic, partition, offsets and ``failOnDataLoss``."""
