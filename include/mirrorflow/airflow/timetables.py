"""Flows on one cron schedule, started a few seconds apart.

Every enabled flow is a DAG, and flows on the same cron (every minute, say) would all
start at the same second: their plans query the clusters together and their mirrors queue
for the Spark pool together, while the rest of the minute stays idle. A flow's schedule is
therefore its cron shifted by an offset, flow ``k`` of ``n`` starting
``k * mirrorflow.schedule.spread.seconds / n`` seconds after each cron time (in the order
of their names, the first flow on the cron time itself). The cron keeps its meaning: every
run still starts once per cron time, and a backfill's runs are those cron times, shifted.

Airflow stores a DAG's timetable by class name and finds a class outside Airflow only
among its plugins' ``timetables``: the project's plugin registers this one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.timetables.trigger import CronTriggerTimetable
from pendulum import DateTime

from mirrorflow.config.model import FlowConfig, MirrorConfig

# Schedules that are not a cron: no run times to shift.
NOT_CRON = (None, "@once", "@continuous")


class OffsetCronTimetable(CronTriggerTimetable):
    """Airflow's ``CronTriggerTimetable``, each run ``offset`` after its cron time."""

    def __init__(self, cron: str, *, timezone: Any, offset: timedelta = timedelta(),
                 **kwargs: Any) -> None:
        super().__init__(cron, timezone=timezone, **kwargs)
        self._offset = offset

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> OffsetCronTimetable:
        timetable = super().deserialize(data)
        timetable._offset = timedelta(seconds=data["offset_seconds"])
        return timetable

    def serialize(self) -> dict[str, Any]:
        return {**super().serialize(), "offset_seconds": self._offset.total_seconds()}

    @property
    def summary(self) -> str:
        return f"{self._expression} +{self._offset.total_seconds():g}s"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OffsetCronTimetable):
            return NotImplemented
        return super().__eq__(other) and self._offset == other._offset

    def __hash__(self) -> int:
        return hash((super().__hash__(), self._offset))

    # The cron's next and previous times, computed where the cron lives (the offset taken
    # off) and shifted back; Airflow's alignment and catch-up logic build on these two.
    def _get_next(self, current: DateTime) -> DateTime:
        return super()._get_next(current - self._offset) + self._offset

    def _get_prev(self, current: DateTime) -> DateTime:
        return super()._get_prev(current - self._offset) + self._offset


def schedule_offset(flow: FlowConfig, config: MirrorConfig) -> timedelta:
    """This flow's offset: its place among the enabled flows on a cron schedule (in the
    order of their names) times its spread over their number."""
    on_cron = sorted(f.name for f in config.enabled_flows()
                     if f.get("mirrorflow.schedule") not in NOT_CRON)
    if flow.name not in on_cron:
        return timedelta()
    spread = flow.get("mirrorflow.schedule.spread.seconds")
    return timedelta(seconds=on_cron.index(flow.name) * spread // len(on_cron))


def flow_schedule(flow: FlowConfig, offset: timedelta) -> str | OffsetCronTimetable | None:
    """What the flow's DAG gets as ``schedule``: ``mirrorflow.schedule`` itself, or, for a
    cron started ``offset`` (:func:`schedule_offset`) after its time, that cron in an
    ``OffsetCronTimetable``."""
    schedule = flow.get("mirrorflow.schedule")
    if not offset:
        return schedule
    from airflow.settings import TIMEZONE  # a cron string's timezone in a DAG like ours

    return OffsetCronTimetable(schedule, timezone=TIMEZONE, offset=offset)
