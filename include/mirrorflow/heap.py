"""The Python heap of a process that runs flows.

A run's driver holds what PySpark's Connect client, Great Expectations, pandas and
confluent-kafka made when imported: about 300,000 objects the cyclic collector tracks and
scans in each full collection, while they live as long as the process. A run of 1,000
partitions makes enough objects (futures, plans, JSON) to start three full collections, of
0.17 to 0.24 s each (measured on 2 cores): half a second of a three-second run.
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_once() -> None:
    """Put the objects alive now out of the collector's sight (``gc.freeze``), once per
    process, after its first run: that run's imports, which outlive every run (and what
    garbage that run left uncollected, once). What later runs make is collected as before.
    (Airflow's forkserver freezes its imports for every task: :mod:`mirrorflow.airflow.
    preload`.)"""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()
