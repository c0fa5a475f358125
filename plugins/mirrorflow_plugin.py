"""mirrorflow's Airflow plugin: metrics endpoint, status view and reports under /mirrorflow
on the API server, and "Replication" in the UI's Browse menu (mirrorflow.airflow.plugin);
in task processes, the watchdog of every flow task (mirrorflow.airflow.watchdog); for the
scheduler, the timetable of flows started a few seconds after their cron time
(mirrorflow.airflow.timetables)."""

from typing import ClassVar

from airflow.plugins_manager import AirflowPlugin

from mirrorflow.airflow import watchdog
from mirrorflow.airflow.plugin import PREFIX, app
from mirrorflow.airflow.timetables import OffsetCronTimetable


class MirrorflowPlugin(AirflowPlugin):
    name = "mirrorflow"
    fastapi_apps: ClassVar[list[dict]] = [{"app": app, "url_prefix": PREFIX, "name": "mirrorflow"}]
    external_views: ClassVar[list[dict]] = [
        {"name": "Replication", "href": f"{PREFIX}/status", "destination": "nav",
         "url_route": "mirrorflow", "category": "browse"}]
    listeners: ClassVar[list] = [watchdog]
    timetables: ClassVar[list] = [OffsetCronTimetable]
