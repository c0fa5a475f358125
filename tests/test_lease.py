"""One run of a flow at a time: the lease's replay rule, and two contenders on a broker."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from helpers.kafka import config_file
from mirrorflow.config import load_config
from mirrorflow.lease import FlowLease, LeaseHeldError, LeaseRecord, holder


def rec(owner: str, op: str, at: int, ttl: int = 100) -> LeaseRecord:
    return LeaseRecord("a->b", owner, op, at, ttl)


def test_first_live_claim_wins_until_released_or_lapsed() -> None:
    assert holder([rec("x", "acquire", 0), rec("y", "acquire", 10)]).owner == "x"
    assert holder([rec("x", "acquire", 0), rec("y", "acquire", 10),
                   rec("x", "renew", 90), rec("y", "acquire", 150)]).owner == "x"
    assert holder([rec("x", "acquire", 0), rec("y", "acquire", 101)]).owner == "y"  # lapsed
    assert holder([rec("x", "acquire", 0), rec("x", "release", 5),
                   rec("y", "acquire", 6)]).owner == "y"
    assert holder([rec("x", "acquire", 0), rec("y", "release", 5)]).owner == "x"  # not y's
    assert holder([rec("x", "acquire", 0), rec("x", "release", 5)]) is None


@pytest.mark.broker
def test_second_contender_waits_then_fails_naming_the_holder(two_clusters: dict[str, str],
                                                             tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true",
                                     "mirrorflow.lease.timeout.seconds = 3\n"))
    flow = config.flow("a->b")
    with FlowLease(config, flow, "run-1") as first:
        with pytest.raises(LeaseHeldError, match=r"flow a->b is being run by run-1 .*run-2 "
                                                 r"waited 2s"):
            FlowLease(config, flow, "run-2", wait_s=2).__enter__()
        with FlowLease(config, flow, "run-1"):  # its own job joins
            pass
        time.sleep(4)  # longer than the timeout: renewals keep it
        assert first.current().owner == "run-1" and not first.lost.is_set()
    assert FlowLease(config, flow, "x").current() is None  # released

    # A waiting contender gets the flow once the holder is done.
    order: list[str] = []
    holding = threading.Event()

    def hold() -> None:
        with FlowLease(config, flow, "run-3"):
            holding.set()
            time.sleep(2)
            order.append("run-3 done")

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(30)
    with FlowLease(config, flow, "run-4", wait_s=30):
        order.append("run-4 in")
    thread.join()
    assert order == ["run-3 done", "run-4 in"]


@pytest.mark.broker
def test_a_release_landing_after_a_waiters_claim_makes_it_claim_again(
        two_clusters: dict[str, str], tmp_path: Path) -> None:
    """The holder's release can land between a waiter's claim and its read: the replay
    then has no holder (the waiter's claim was void when made), and the waiter claims
    again instead of failing (seen in CI as an AttributeError on ``None.owner``)."""
    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    flow = config.flow("a->b")
    first = FlowLease(config, flow, "first").__enter__()

    class Racing(FlowLease):
        def _append(self, op: str) -> LeaseRecord:
            record = super()._append(op)
            if first._renewer.is_alive():
                first.__exit__(None, None, None)  # lands after this claim, before the read
            return record

    with Racing(config, flow, "second", wait_s=0) as second:
        assert second.current().owner == "second"
    assert [(r.owner, r.op) for r in second.records()] == [
        ("first", "acquire"), ("second", "acquire"), ("first", "release"),
        ("second", "acquire"), ("second", "release")]
