"""The pauses code under test sleeps, recorded as it sleeps them."""

from __future__ import annotations

import threading
import time


def recorded_pauses(monkeypatch) -> list[float]:
    """The seconds of every ``time.sleep`` the test's own thread makes from now on, each
    still slept (the module is the process's: other threads' sleeps go unrecorded)."""
    pauses: list[float] = []
    sleep = time.sleep

    def pause(seconds: float) -> None:
        if threading.current_thread() is threading.main_thread():
            pauses.append(seconds)
        sleep(seconds)

    monkeypatch.setattr(time, "sleep", pause)
    return pauses
