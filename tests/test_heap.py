"""A run's heap scope: no automatic cyclic collection within it, the state before it
restored after it (also when it fails), the process's imports frozen once."""

from __future__ import annotations

import gc

import pytest

from mirrorflow import heap


def test_a_run_scope_pauses_automatic_collections_and_freezes_once() -> None:
    assert gc.isenabled()
    with heap.run_scope():
        assert not gc.isenabled()
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # the imports: pytest's, mirrorflow's
    with pytest.raises(ValueError, match="failed run"), heap.run_scope():
        raise ValueError("failed run")
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen  # once per process
    gc.disable()
    try:
        with heap.run_scope():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a caller's own choice stays
    finally:
        gc.enable()


def test_between_runs_collects_what_the_runs_before_left_within_the_scope() -> None:
    """A repeating mirror task's cycles share one scope: between them, the cyclic garbage
    of the cycles before is collected, and collection stays paused."""
    import weakref

    class Node:
        pass

    with heap.run_scope():
        node = Node()
        node.me = node  # a cycle: reference counting alone never frees it
        gone = weakref.ref(node)
        del node
        assert gone() is not None
        heap.between_runs()
        assert gone() is None
        assert not gc.isenabled()
