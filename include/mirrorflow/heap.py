"""The Python heap of a process that runs flows.

A run's driver holds what PySpark's Connect client, Great Expectations, pandas and
confluent-kafka made when imported (about 300,000 objects the cyclic collector tracks),
and what the run builds up per partition: its plan, probes, results, history and proof
(tens of objects a partition, all alive to the run's end). CPython starts a full
collection whenever the objects that survived young collections grow by a quarter, and
each one scans them all: measured on 2 cores, a warm run of 1,000 partitions made three
of 0.17 to 0.24 s each (half a second of a three-second run), a run of 10,000 partitions
24 of up to 0.5 s (4.4 s of a 22-second run).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_frozen = False


def freeze_once() -> None:
    """Put the objects alive now out of the collector's sight (``gc.freeze``), once per
    process, after collecting: what it imported, which outlives every run. What later
    runs make is collected as before. (Airflow's forkserver freezes its imports for every
    task: :mod:`mirrorflow.airflow.preload`.)"""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()


@contextlib.contextmanager
def run_scope() -> Iterator[None]:
    """A run's work without automatic cyclic collections: what it builds lives to its
    end, so a collection during it frees little (records never enter Python; reference
    counting frees what has no cycle) and scans everything. After it, collections resume
    (the next one takes what the run left), and after a process's first run its imports
    are frozen (:func:`freeze_once`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        freeze_once()


def between_runs() -> None:
    """Within one scope that runs several (a repeating ``mirror`` task's cycles, for
    ``mirrorflow.mirror.repeat.seconds``): what the runs before left, collected now, so
    that a long window does not keep each cycle's garbage; the first time, the imports
    frozen instead (:func:`freeze_once`, which collects too)."""
    if _frozen:
        gc.collect()
    else:
        freeze_once()
