"""An auth manager with per-DAG read permissions, for the plugin's authorization test.

Airflow's SimpleAuthManager grants by role only (a viewer reads every DAG), and the FAB
auth manager needs its provider and a users database; this one is SimpleAuthManager
with one rule added: ``bob`` may not read ``mirror__a__b``. The plugin asks the auth
manager through the same API either way.
"""

from __future__ import annotations

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if user.username == "bob" and details is not None and details.id == "mirror__a__b":
            return False
        return super().is_authorized_dag(method=method, user=user,
                                         access_entity=access_entity, details=details)
