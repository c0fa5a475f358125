"""Stopping a process the development helpers started (a broker, the Spark Connect
server, a schema registry): SIGTERM, a wait for it to go, SIGKILL if it did not, its exit
status collected so that it never lingers as a zombie."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable


def reap(pid: int) -> None:
    """Collect a child's exit status so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def terminate(pid: int, timeout: float, alive: Callable[[], bool],
              group: bool = False) -> None:
    """Stop ``pid`` (its whole process group with ``group``: a group's other members may
    outlive its leader, so the group gets SIGKILL whatever the leader did) within
    ``timeout`` seconds; ``alive`` says whether it still runs."""
    send = os.killpg if group else os.kill
    with contextlib.suppress(ProcessLookupError):
        send(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        reap(pid)
        time.sleep(0.05)
    if group or alive():
        with contextlib.suppress(ProcessLookupError):
            send(pid, signal.SIGKILL)
    reap(pid)
