"""A hard limit on each task of a flow's DAG that holds where Python cannot be interrupted.

Airflow 3.3 enforces a task's ``execution_timeout`` with SIGALRM inside the task process.
A process stuck where Python never handles the signal (a lock inherited across a fork, a
native call that does not return) stays running for good, and with
``max_active_runs = 1`` its DAG run holds the flow: in a soak a ``report`` task hung
before its first line and stopped its flow for 40 minutes, until the soak gave up.

This listener (registered by the plugin) arms faulthandler's watchdog, a C thread that
needs neither the interpreter nor a signal, as each task of a mirrorflow DAG starts: a
tenth of ``execution_timeout`` (at most a minute) after Airflow's own limit it writes every
thread's stack to the task's log and exits the process with status 1, which Airflow's
supervisor turns into a retry (or a failure once retries are spent). A task that ends
disarms it.

It also gives a crash its default end. Airflow's DAG importer installs a Python handler
for SIGSEGV while it parses the DAG file and leaves it installed for the whole task
(apache/airflow#57174). A native crash then never ends: the C-level handler only flags the
signal and returns, the faulting instruction runs again, and the thread spins there for
good. Four ``report`` tasks of soaks crashed so inside librdkafka (the race is told in
:mod:`mirrorflow.kafka.watermarks`) and held their flows for up to forty minutes. In a
flow's task SIGSEGV goes back to its default action, with faulthandler's dump of every
thread's stack before it: the process dies, its log says where, and Airflow retries the
task.
"""

from __future__ import annotations

import faulthandler
import signal

from airflow.listeners import hookimpl

TAG = "mirrorflow"  # the tag of every DAG mirrorflow generates
GRACE_MAX_S = 60.0


def deadline_s(execution_timeout_s: float) -> float:
    """When the watchdog fires: Airflow's limit plus a tenth, at most a minute more."""
    return execution_timeout_s + min(GRACE_MAX_S, execution_timeout_s / 10)


def arm(seconds: float) -> None:
    """Dump every thread's stack to stderr (the task log) and exit with status 1 unless
    :func:`disarm` comes within ``seconds``."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=2)


def disarm() -> None:
    faulthandler.cancel_dump_traceback_later()


def crash_on_fatal_signals() -> None:
    """SIGSEGV's default action back (a crash ends the process), faulthandler's dump of
    every thread's stack to stderr (the task log) before it and before any other fatal
    signal."""
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    faulthandler.enable(file=2, all_threads=True)


def _ours(task_instance) -> bool:
    dag = getattr(getattr(task_instance, "task", None), "dag", None)
    return dag is not None and TAG in (dag.tags or ())


def _limit(task_instance) -> float | None:
    timeout = getattr(getattr(task_instance, "task", None), "execution_timeout", None)
    if timeout is None or not _ours(task_instance):
        return None
    return deadline_s(timeout.total_seconds())


@hookimpl
def on_task_instance_running(previous_state, task_instance) -> None:
    if _ours(task_instance):
        crash_on_fatal_signals()
    if (seconds := _limit(task_instance)) is not None:
        arm(seconds)


def _disarm_ours(task_instance) -> None:
    """Disarm where :func:`on_task_instance_running` armed (not another project's task)."""
    if _limit(task_instance) is not None:
        disarm()


@hookimpl
def on_task_instance_success(previous_state, task_instance) -> None:
    _disarm_ours(task_instance)


@hookimpl
def on_task_instance_failed(previous_state, task_instance, error) -> None:
    _disarm_ours(task_instance)


@hookimpl
def on_task_instance_skipped(previous_state, task_instance) -> None:
    _disarm_ours(task_instance)
