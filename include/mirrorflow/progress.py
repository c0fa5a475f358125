"""Progress of a run while it works: the plan as soon as it is made, then the records
written as the Spark job commits them, then the proof.

Written records are read where the writers commit them, atomically with the data: the
span records on the target (:mod:`mirrorflow.source.ledger`). So progress
is the same whether the job runs on a Spark Connect server, in a session or through
spark-submit, and never counts a record twice. On a terminal the line is redrawn in
place; elsewhere (logs, the DAG's task logs) a line is written every ``interval`` seconds.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TextIO

from confluent_kafka import KafkaException

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.errors import MirrorflowError
from mirrorflow.source import ledger
from mirrorflow.source.plan_records import Plan


class Sink:
    """Where progress goes: ``note`` a line that stays, ``update`` one that the next
    replaces. This one logs both (a DAG task's log, a script's)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("mirrorflow.progress")

    def note(self, line: str) -> None:
        self.logger.info("%s", line)

    def update(self, line: str) -> None:
        self.note(line)


class StreamSink(Sink):
    """Lines to ``stream`` (stderr): on a terminal the update is redrawn in place."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.out = stream or sys.stderr
        self.tty = self.out.isatty()
        self._open = False  # an update line waits for its newline

    def note(self, line: str) -> None:
        self.out.write(("\r\033[K" if self._open else "") + line + "\n")
        self._open = False
        self.out.flush()

    def update(self, line: str) -> None:
        if self.tty:
            self.out.write(f"\r\033[K{line}")
            self._open = True
        else:
            self.out.write(line + "\n")
        self.out.flush()


def describe_plan(plan: Plan, resumed: bool) -> str:
    """One line: the plan's partitions and records (offsets: compaction holes and
    transaction markers count until read)."""
    partitions = len(plan.ranges)
    state = "resuming pending plan" if resumed else "planned"
    topics = len({r.topic for r in plan.ranges})
    return (f"{state} {plan.plan_id}: {plan.offsets:,} records over {partitions} partitions of "
            f"{topics} topics" + (f"; {len(plan.gaps)} data-loss gaps recorded"
                                  if plan.gaps else ""))


def written(config: MirrorConfig, flow: FlowConfig, plan: Plan) -> int:
    """Offsets of the plan's ranges committed so far (by this plan's transactions: their
    span records, which each transaction commits with its records)."""
    spans = ledger.read_spans(config.cluster(flow.target), flow.source, plan.plan_id)
    done = 0
    for r in plan.ranges:
        mine = spans.get((r.topic, r.partition))
        if mine:
            done += max(0, min(max(s.upstream_last for s in mine) + 1, r.end) - r.start)
    return done


class WriteProgress:
    """A thread reporting the plan's written records every ``interval`` seconds while the
    Spark job runs (``with WriteProgress(...):``)."""

    def __init__(self, config: MirrorConfig, flow: FlowConfig, plan: Plan, sink: Sink,
                 interval: float = 10.0) -> None:
        self.config, self.flow, self.plan, self.sink = config, flow, plan, sink
        self.interval = interval
        self.total = plan.offsets
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mirrorflow-progress",
                                        daemon=True)

    def __enter__(self) -> WriteProgress:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def line(self, done: int) -> str:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        share = done / self.total if self.total else 1.0
        bar = "#" * int(share * 20)
        return (f"[{bar:<20}] written {done:,} of {self.total:,} records ({share:.0%}), "
                f"{done / elapsed:,.0f} records/s, {elapsed:.0f}s")

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                done = written(self.config, self.flow, self.plan)
            except (MirrorflowError, KafkaException):
                continue  # advisory: the run itself reports what failed
            self.sink.update(self.line(done))
