"""The DAG's sensors.

* ``plan`` (:class:`FlowClaimSensor`): both clusters answer (else it fails at once,
  naming the cluster); then the run takes the flow for itself, or waits (deferred or
  rescheduled: no worker slot held) while another live run of the flow owns it, so that
  runs of one flow never race, whatever a backfill's ``max_active_runs`` says; once it owns
  the flow, the same task process plans the run (one task, not two: a task boundary costs
  a scheduler round and a task process, a second or more of every run).
* ``await_heartbeat`` (:class:`HeartbeatSensor`): has this run's heartbeat reached the
  target? It pokes in the worker, or, with ``deferrable=True`` (Airflow's
  ``[operators] default_deferrable``), hands the waiting to the triggerer through
  :class:`HeartbeatTrigger`, so no worker slot is held while the heartbeat travels.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from airflow.sdk import PokeReturnValue
from airflow.sdk.bases.sensor import BaseSensorOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent


def _arrived(config_file: str, flow_name: str, since_ms: int) -> dict:
    from mirrorflow.config.loader import load_config
    from mirrorflow.heartbeat import heartbeats
    from mirrorflow.plain import plain

    config = load_config(config_file)
    return plain(heartbeats.status(config, config.flow(flow_name), since_ms))


class HeartbeatTrigger(BaseTrigger):
    """Polls the target for the heartbeat in the triggerer; fires once it has arrived."""

    def __init__(self, config_file: str, flow_name: str, since_ms: int,
                 poke_interval: float = 5.0):
        super().__init__()
        self.config_file, self.flow_name = config_file, flow_name
        self.since_ms, self.poke_interval = since_ms, poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.HeartbeatTrigger",
                {"config_file": self.config_file, "flow_name": self.flow_name,
                 "since_ms": self.since_ms, "poke_interval": self.poke_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            status = await asyncio.to_thread(_arrived, self.config_file, self.flow_name,
                                             self.since_ms)
            if status["arrived"]:
                yield TriggerEvent(status)
                return
            await asyncio.sleep(self.poke_interval)


class HeartbeatSensor(BaseSensorOperator):
    """Succeeds once the heartbeat emitted at ``since_ms`` is visible on the target."""

    template_fields = ("since_ms",)

    def __init__(self, *, config_file: str, flow_name: str, since_ms: str | int,
                 deferrable: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.config_file, self.flow_name = config_file, flow_name
        self.since_ms = since_ms
        self.deferrable = deferrable

    def since(self, context) -> int:
        """The heartbeat's timestamp (ms) from this run's plan; for a run whose plan was
        made by an older mirrorflow (a heartbeat task of its own, upgraded in between),
        the run's start, before which its heartbeat was not written."""
        if str(self.since_ms) not in ("", "None"):
            return int(self.since_ms)
        return int(context["dag_run"].start_date.timestamp() * 1000)

    def execute(self, context):
        if not self.deferrable:
            return super().execute(context)
        from datetime import timedelta

        self.defer(trigger=HeartbeatTrigger(self.config_file, self.flow_name,
                                            self.since(context), self.poke_interval),
                   method_name="execute_complete", timeout=timedelta(seconds=self.timeout))
        return None

    def poke(self, context) -> PokeReturnValue:
        status = _arrived(self.config_file, self.flow_name, self.since(context))
        self.log.info("heartbeat in %s: arrived=%s newest=%s (age %s ms)", status["topic"],
                      status["arrived"], status["newest_ms"], status["age_ms"])
        return PokeReturnValue(is_done=bool(status["arrived"]), xcom_value=status)

    def execute_complete(self, context, event: dict) -> dict:
        self.log.info("heartbeat arrived: %s", event)
        return event


def _owner(config_file: str, flow_name: str, run_id: str) -> str | None:
    """The run that owns the flow now, if another one does."""
    from mirrorflow.config.loader import load_config
    from mirrorflow.lease import FlowLease

    config = load_config(config_file)
    state = FlowLease(config, config.flow(flow_name), run_id).current()
    return state.owner if state is not None and state.owner != run_id else None


def check_clusters(config_file: str, flow_name: str) -> None:
    """Both of the flow's clusters answer, each asked for up to
    ``mirrorflow.cluster.wait.seconds`` while none of its brokers does (a restart); else
    fail naming the cluster (:class:`mirrorflow.kafka.clients.ClusterUnreachableError`)."""
    from mirrorflow.config.loader import load_config
    from mirrorflow.kafka.reachability import await_reachable

    config = load_config(config_file)
    flow = config.flow(flow_name)
    for alias in (flow.source, flow.target):
        await_reachable(config.cluster(alias), flow.get("mirrorflow.cluster.wait.seconds"))


class FlowFreeTrigger(BaseTrigger):
    """Polls the flow's lease in the triggerer; fires once no other run owns the flow."""

    def __init__(self, config_file: str, flow_name: str, run_id: str,
                 poll_interval: float = 2.0):
        super().__init__()
        self.config_file, self.flow_name = config_file, flow_name
        self.run_id, self.poll_interval = run_id, poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.FlowFreeTrigger",
                {"config_file": self.config_file, "flow_name": self.flow_name,
                 "run_id": self.run_id, "poll_interval": self.poll_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while await asyncio.to_thread(_owner, self.config_file, self.flow_name, self.run_id):
            await asyncio.sleep(self.poll_interval)
        yield TriggerEvent({"free": True})


class FlowClaimSensor(BaseSensorOperator):
    """Succeeds once this DAG run owns its flow (the lease's run hold, see
    :mod:`mirrorflow.lease`) and has done ``then`` (the run's first step: its plan) in the
    same task process; ``then(params, run_id)``'s value is the task's XCom. While another
    run owns the flow, the task waits without a worker slot: deferred to the triggerer
    (``deferrable=True``, Airflow's ``[operators] default_deferrable``), or rescheduled
    every ``poke_interval``. A dry run claims nothing; ``then`` is asked all the same."""

    template_fields = ("run_id",)

    def __init__(self, *, config_file: str, flow_name: str,
                 then: Callable[[dict, str], Any], run_id: str = "{{ run_id }}",
                 deferrable: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.config_file, self.flow_name, self.run_id = config_file, flow_name, run_id
        self.then, self.deferrable = then, deferrable

    def execute(self, context):
        check_clusters(self.config_file, self.flow_name)
        if not self.deferrable:
            super().execute(context)  # returns once claimed; else reschedules the task
            return self._then(context)
        return self.execute_complete(context, None)

    def execute_complete(self, context, event: dict | None):
        """Claim; while another run owns the flow, defer until it is free and try again
        (another waiting run may claim it first)."""
        if not self.poke(context):
            from datetime import timedelta

            self.defer(trigger=FlowFreeTrigger(self.config_file, self.flow_name, self.run_id),
                       method_name="execute_complete", timeout=timedelta(seconds=self.timeout))
        return self._then(context)

    def _then(self, context):
        return self.then(context.get("params") or {}, self.run_id)

    def poke(self, context) -> bool:
        from mirrorflow.config.loader import load_config
        from mirrorflow.lease import FlowLease

        if (context.get("params") or {}).get("dry_run"):
            self.log.info("dry run: the flow is not claimed (nothing is written)")
            return True
        config = load_config(self.config_file)
        holder = FlowLease(config, config.flow(self.flow_name), self.run_id).claim_run()
        if holder is not None:
            self.log.info("flow %s is owned by run %s (until %s ms unless renewed); waiting",
                          self.flow_name, holder.owner, holder.until_ms)
            return False
        self.log.info("run %s owns flow %s", self.run_id, self.flow_name)
        return True
