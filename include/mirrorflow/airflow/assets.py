"""What a flow's DAG publishes as Airflow assets, so that DAGs downstream (an analytics
cluster's jobs) run when mirrored data lands.

Topics are assets with the Kafka provider's URIs (``kafka://<server>/<topic>``, its
``create_asset``; the server is the first of the cluster's ``bootstrap.servers``, as a
user writes it; the provider converts them for OpenLineage). The remote topics follow the
flow's regexes at run time, so a run names them through the flow's :func:`alias`: each
committed plan adds one event per remote topic it wrote records to, with extras a
consumer can use (the flow, the plan and run, the records, per partition the remote
offsets written). A plan that wrote nothing, or failed its proof (never committed), has
none.

Exactly one event per committed plan and topic, whichever task commits it (``commit``,
or a repeating ``mirror`` its cycles) and however often it is retried or cleared: Airflow
keeps a task's events only when the task succeeds, so each committed plan's events wait in
the run's part :data:`PART` until a task of the run succeeds, and a task adds only those
the alias has no event of yet (asked from Airflow, since the plan was made).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.quality import reports

log = logging.getLogger(__name__)

PART = "asset-events"  # the run's committed plans' events, until a task publishes them


def alias_name(flow: FlowConfig) -> str:
    """The name of the flow's asset alias: ``mirrorflow:<flow>``."""
    return f"mirrorflow:{flow.name}"


def alias(flow: FlowConfig):
    from airflow.sdk import AssetAlias

    return AssetAlias(name=alias_name(flow))


def topic_uri(config: MirrorConfig, cluster: str, topic: str) -> str:
    """``kafka://<first bootstrap server>/<topic>``: the topic's asset URI."""
    from airflow.providers.apache.kafka.assets.kafka import create_asset

    server = config.clusters[cluster].bootstrap_servers.split(",")[0].strip()
    return create_asset(server=server, topic=topic).uri


def source_assets(config: MirrorConfig, flow: FlowConfig) -> list:
    """The flow's source topics that its config names literally (no regex), as assets: the
    inlets Airflow knows before a run (the others are in each event's extras)."""
    from airflow.sdk import Asset

    literal = [t for t in flow.get("topics") if t and not set(t) & set(".*+?[](){}|^$\\")]
    return [Asset(uri=topic_uri(config, flow.source, t)) for t in literal]


def events_of(config: MirrorConfig, flow: FlowConfig, committed: dict) -> list[dict]:
    """A committed plan's events (``committed``: its result, plain): one per remote topic
    it wrote records to, each with the plan's creation time (the first part of its id)."""
    created_ms = int(committed["plan_id"].split("-", 1)[0])
    by_topic: dict[str, dict] = {}
    for p in committed.get("partitions", []):
        if not p["records"] or p["first_downstream"] is None:
            continue
        extra = by_topic.setdefault(p["remote_topic"], {
            "flow": flow.name, "plan_id": committed["plan_id"], "run_id": committed["run_id"],
            "source_topic": p["topic"], "records": 0, "partitions": {}})
        extra["records"] += p["records"]
        extra["partitions"][str(p["partition"])] = {
            "first_offset": p["first_downstream"], "last_offset": p["last_downstream"],
            "records": p["records"]}
    return [{"uri": topic_uri(config, flow.target, topic), "created_ms": created_ms,
             "extra": extra} for topic, extra in sorted(by_topic.items())]


def lineage(config: MirrorConfig, flow: FlowConfig, committed: dict) -> None:
    """The committed plan's lineage, each source topic it read to the remote topic it
    wrote (records only), for the OpenLineage provider where it runs: through Airflow's
    hook lineage collector, which it reads as the task's inputs and outputs (the
    alias's events are not lineage to it)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.lineage import get_hook_lineage_collector

    collector, hook = get_hook_lineage_collector(), BaseHook()
    for source, remote in sorted({(p["topic"], p["remote_topic"])
                                  for p in committed.get("partitions", []) if p["records"]}):
        collector.add_input_asset(context=hook, uri=topic_uri(config, flow.source, source))
        collector.add_output_asset(context=hook, uri=topic_uri(config, flow.target, remote))


def keep(flow: FlowConfig, run_id: str, events: list[dict]) -> None:
    """Add a committed plan's events to those the run has yet to publish (once: a retry
    that finds its plan committed by an earlier attempt keeps them again)."""
    kept = reports.read_part(flow.name, run_id, PART) or []
    known = {(e["uri"], e["extra"]["plan_id"]) for e in kept}
    new = [e for e in events if (e["uri"], e["extra"]["plan_id"]) not in known]
    if new:
        reports.write_part(flow.name, run_id, PART, [*kept, *new])


def publish(flow: FlowConfig, run_id: str, outlet_events) -> int:
    """Add the run's kept events that Airflow has none of yet to this task's outlet
    events (``outlet_events``: the task's context), through the flow's alias; how many."""
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import InletEventsAccessor

    kept = reports.read_part(flow.name, run_id, PART) or []
    if not kept:
        return 0
    since = datetime.fromtimestamp(min(e["created_ms"] for e in kept) / 1000, UTC)
    seen = {(e.asset.uri, (e.extra or {}).get("plan_id")) for e in
            InletEventsAccessor(alias_name=alias_name(flow)).after(since.isoformat())}
    added = 0
    for event in kept:
        if (event["uri"], event["extra"]["plan_id"]) in seen:
            continue
        outlet_events[alias(flow)].add(Asset(uri=event["uri"]), extra=event["extra"])
        added += 1
    log.info("flow %s: %d asset events (%d kept, %d published before)", flow.name, added,
             len(kept), len(kept) - added)
    return added
