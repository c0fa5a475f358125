"""Plans and their results, stored on the target cluster in the compacted topic
``mirrorflow-plans.{source}.internal``: the pending mark, each plan, its result and
validation, why its last attempt failed, which run committed it, when metadata was last
synced, and a schema transfer's id mappings (:mod:`mirrorflow.schema.mapping`, stored by
the mirror's driver before the write). Every write is fenced by the flow's lease."""

from __future__ import annotations

import json
import logging
import time

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.kafka.internal_topics import CompactedTopic
from mirrorflow.lease import check_held
from mirrorflow.source.plan_records import Plan, PlanError, PlanNotPendingError

log = logging.getLogger(__name__)

PENDING_KEY = b"pending"
KEEP_PLANS = 20


def plans_topic(source_alias: str) -> str:
    return f"mirrorflow-plans.{source_alias}.internal"


class PlanStore:
    """Plans and their results, on the target cluster, per source cluster."""

    def __init__(self, config: MirrorConfig, flow: FlowConfig):
        self.flow = flow.name
        self.topic = CompactedTopic(config.cluster(flow.target), plans_topic(flow.source), 1,
                                    flow.get("replication.factor"))

    def require_pending(self, plan_id: str) -> None:
        """Raise :class:`PlanNotPendingError` unless ``plan_id`` is the pending plan, naming
        the run that committed it or the plan that superseded it."""
        entries = self.topic.read()
        pending = entries.get(PENDING_KEY)
        if pending == plan_id.encode():
            return
        committed = entries.get(b"committed/" + plan_id.encode())
        by = None
        if committed is not None:
            by = json.loads(committed).get("run_id", "?")
            why = f"it was already committed by run {by}"
        elif pending is not None:
            newer = entries.get(b"plan/" + pending)
            made_by = json.loads(newer).get("run_id", "?") if newer else "?"
            why = f"it was superseded by plan {pending.decode()} (pending, made by run {made_by})"
        else:
            why = "it was dropped (a reset, or the plan store was cleared) and nothing is pending"
        raise PlanNotPendingError(f"plan {plan_id} of flow {self.flow} is not pending: {why}; "
                                  "nothing was done", committed_by=by)

    def pending(self) -> Plan | None:
        entries = self.topic.read()
        plan_id = entries.get(PENDING_KEY)
        if plan_id is None:
            return None
        text = entries.get(b"plan/" + plan_id)
        if text is None:
            log.warning("%s: pending plan %s has no record; planning anew",
                        self.topic.topic, plan_id.decode())
            return None
        return self._parse(plan_id.decode(), text)

    def _parse(self, plan_id: str, text: bytes) -> Plan:
        """A stored plan; a malformed one is an error naming it, not a traceback: which
        records its attempt wrote is unknown, so planning anew could write them twice."""
        try:
            return Plan.from_json(text)
        except (ValueError, KeyError, TypeError) as exc:
            raise PlanError(
                f"plan {plan_id!r} in {self.topic.topic} on cluster "
                f"{self.topic.cluster.alias!r} is malformed ({type(exc).__name__}: {exc}); "
                f"check the remote topics against the source, then reset the flow's "
                f"positions (mirrorflow reset) to continue") from None

    def save(self, plan: Plan) -> None:
        """Store the plan and mark it pending, in that order."""
        check_held()
        self.topic.write([(b"plan/" + plan.plan_id.encode(), plan.to_json().encode()),
                          (PENDING_KEY, plan.plan_id.encode())])

    def load(self, plan_id: str) -> Plan:
        text = self.topic.read().get(b"plan/" + plan_id.encode())
        if text is None:
            raise PlanError(f"plan {plan_id!r} is not in {self.topic.topic} on cluster "
                            f"{self.topic.cluster.alias!r}")
        return self._parse(plan_id, text)

    def save_result(self, plan_id: str, result: dict) -> None:
        check_held()
        self.topic.write([(b"result/" + plan_id.encode(), json.dumps(result).encode())])

    def save_empty_result(self, plan_id: str) -> None:
        """The result of a plan with no ranges, stored where no Spark job runs for it."""
        self.save_result(plan_id, {"plan_id": plan_id, "ranges": []})

    def result(self, plan_id: str) -> dict | None:
        text = self.topic.read().get(b"result/" + plan_id.encode())
        return json.loads(text) if text is not None else None

    def save_validation(self, plan_id: str, validation: dict) -> None:
        self.topic.write([(b"validation/" + plan_id.encode(),
                           json.dumps(validation).encode())])

    def validation(self, plan_id: str) -> dict | None:
        text = self.topic.read().get(b"validation/" + plan_id.encode())
        return json.loads(text) if text is not None else None

    def save_mappings(self, mappings) -> None:
        """Store a schema transfer's new id mappings (:class:`~mirrorflow.schema.mapping.
        IdMapping`), before any record is written under them."""
        if mappings:
            check_held()
            self.topic.write([(m.key(), m.value()) for m in mappings])

    def save_failure(self, plan_id: str, run_id: str, error: BaseException) -> None:
        """Keep why an attempt of the plan failed (its error's type and one-line message),
        where whoever started the attempt reads it (:meth:`failure`): a spark-submit job's
        driver may run on another machine (a cluster's deploy mode), and its log is
        pages of Spark's shutdown. Best effort: the failure itself is raised anyway."""
        from mirrorflow.errors import described

        name, message = described(error)
        record = {"run_id": run_id, "error": name, "message": message,
                  "at_ms": int(time.time() * 1000)}
        try:
            self.topic.write([(b"failure/" + plan_id.encode(), json.dumps(record).encode())])
        except Exception as exc:  # the failure being recorded matters more
            log.warning("could not store the failure of plan %s: %s", plan_id, exc)

    def failure(self, plan_id: str) -> dict | None:
        """The last failure :meth:`save_failure` kept for the plan, or None."""
        text = self.topic.read().get(b"failure/" + plan_id.encode())
        return json.loads(text) if text is not None else None

    def last_synced(self, kind: str) -> int | None:
        """When metadata of ``kind`` (configs, acls) was last synced, epoch ms."""
        text = self.topic.read().get(b"synced/" + kind.encode())
        return int(text) if text is not None and text.isdigit() else None

    def mark_synced(self, kind: str, at_ms: int) -> None:
        self.topic.write([(b"synced/" + kind.encode(), str(at_ms).encode())])

    def mark_committed(self, plan: Plan, run_id: str) -> None:
        """Clear the pending mark (if it is still this plan's), record which run committed
        the plan, and drop all but the newest :data:`KEEP_PLANS` plans and their records,
        newest by when they were stored: no stored plan is parsed (the newest plans of a
        flow of 1,000 partitions are 20 documents of 1,000 ranges each, which every commit
        parsed to sort them, 20,000 ranges a run). Stored order is their offsets on the
        store's one partition; only between partitions of a topic made with more is it
        their timestamps, which a writer's clock behind the others' would misorder."""
        check_held()
        entries = self.topic.read_records()
        plans = [(r, key[len(b"plan/"):]) for key, r in entries.items()
                 if key.startswith(b"plan/")]
        spread = len({r.partition for r, _ in plans}) > 1
        stored = sorted((r.timestamp if spread else 0, r.partition, r.offset, i)
                        for r, i in plans)
        old = [i for *_, i in stored[:-KEEP_PLANS]]
        mark = entries.get(PENDING_KEY)
        pending = [(PENDING_KEY, None)] if mark is not None \
            and mark.value == plan.plan_id.encode() else []
        done = json.dumps({"run_id": run_id, "at_ms": int(time.time() * 1000)}).encode()
        self.topic.write(pending
                         + [(b"committed/" + plan.plan_id.encode(), done)]
                         + [(b"plan/" + i, None) for i in old]
                         + [(prefix + i, None) for i in old
                            for prefix in (b"result/", b"validation/", b"committed/",
                                           b"failure/")])
