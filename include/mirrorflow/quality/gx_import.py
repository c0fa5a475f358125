"""Importing Great Expectations: in the background, and without what mirrorflow's proof
never uses.

GX imports ``scipy.stats`` and ``altair`` at its own import, for one expectation
(``expect_column_kl_divergence_to_be_less_than``) and its chart. That is about 0.8 s of
the 2.7 s GX takes to import, paid by every process that proves a run: each Airflow
``mirror`` task and each ``mirrorflow run``. Here they are imported on first use instead:
a module object stands in for each until one of its attributes is asked for, and then the
real module is imported and answers. A user suite that runs that expectation gets both as
it always would.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
import types

ON_FIRST_USE = ("scipy.stats", "altair")
_lock = threading.Lock()


class _ImportedOnFirstUse(types.ModuleType):
    """Stands in for a module until one of its attributes is asked for."""

    def __getattr__(self, attr: str):
        with _lock:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def _import_on_first_use(names: tuple[str, ...]) -> None:
    """A stand-in in ``sys.modules`` for each module not imported yet, carrying the real
    module's spec (``importlib.util.find_spec`` answers with it, as for any module)."""
    with _lock:
        for name in names:
            if name in sys.modules or (spec := importlib.util.find_spec(name)) is None:
                continue
            stand_in = _ImportedOnFirstUse(name)
            stand_in.__spec__ = spec
            sys.modules[name] = stand_in


def import_gx():
    """Great Expectations, imported with its usage analytics off unless the user set them,
    and :data:`ON_FIRST_USE` left for first use."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    _import_on_first_use(ON_FIRST_USE)
    import great_expectations as gx

    return gx


def prepare_validation() -> None:
    """Import Great Expectations in the background: it takes seconds of CPU, and a run
    mostly waits on brokers and Spark before its check needs it."""
    threading.Thread(target=import_gx, daemon=True, name="import gx").start()
