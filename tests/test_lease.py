"""One run of a flow at a time: the lease's replay rule, and two contenders on a broker."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from helpers.kafka import config_file
from mirrorflow.config.loader import load_config
from mirrorflow.lease import FlowLease, LeaseHeldError, LeaseRecord, holder


def rec(owner: str, op: str, at: int, ttl: int = 100, holder_id: str = "") -> LeaseRecord:
    return LeaseRecord("a->b", owner, op, at, ttl, holder_id or f"{owner}-h")


def test_first_live_claim_wins_until_released_or_lapsed() -> None:
    assert holder([rec("x", "acquire", 0), rec("y", "acquire", 10)]).owner == "x"
    assert holder([rec("x", "acquire", 0), rec("y", "acquire", 10),
                   rec("x", "renew", 90), rec("y", "acquire", 150)]).owner == "x"
    assert holder([rec("x", "acquire", 0), rec("y", "acquire", 101)]).owner == "y"  # lapsed
    assert holder([rec("x", "acquire", 0), rec("x", "release", 5),
                   rec("y", "acquire", 6)]).owner == "y"
    assert holder([rec("x", "acquire", 0), rec("y", "release", 5)]).owner == "x"  # not y's
    assert holder([rec("x", "acquire", 0), rec("x", "release", 5)]) is None
    # A holder that lapsed and renews (a paused process waking up) gets nothing back.
    assert holder([rec("x", "acquire", 0), rec("x", "renew", 150)]) is None
    assert holder([rec("x", "acquire", 0), rec("x", "renew", 150),
                   rec("y", "acquire", 160)]).owner == "y"


def test_holders_of_one_run_never_release_each_other() -> None:
    """Two tasks of one DAG run hold the flow at once; the first to finish leaves it held
    by the other, and another run gets it only once both are done (or lapsed)."""
    both = [rec("run", "acquire", 0, holder_id="mirror"),
            rec("run", "acquire", 5, holder_id="metadata")]
    after_one = holder([*both, rec("run", "release", 20, holder_id="metadata")])
    assert after_one.owner == "run" and set(after_one.holders) == {"mirror"}
    assert holder([*both, rec("run", "release", 20, holder_id="metadata"),
                   rec("other", "acquire", 30)]).owner == "run"
    assert holder([*both, rec("run", "release", 20, holder_id="metadata"),
                   rec("run", "release", 40, holder_id="mirror"),
                   rec("other", "acquire", 50)]).owner == "other"
    # The other run's claim is void while any holder of "run" is live, not after.
    assert holder([*both, rec("run", "renew", 90, holder_id="mirror"),
                   rec("other", "acquire", 150)]).owner == "run"
    assert holder([*both, rec("other", "acquire", 200)]).owner == "other"


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
        with FlowLease(config, flow, "run-1"):  # its own job joins, as a second holder
            assert len(first.current().holders) == 2
        assert first.current().owner == "run-1"  # the job's release leaves it held
        time.sleep(4)  # longer than the timeout: renewals keep it
        assert first.current().owner == "run-1" and not first.lost.is_set()
        first.check()
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


@pytest.mark.broker
def test_a_lapsed_holder_commits_nothing(two_clusters: dict[str, str], tmp_path: Path) -> None:
    """A holder whose renewals stop (a paused process) lapses; another run takes the flow;
    the lapsed holder's next commit fails before it writes anything."""
    from mirrorflow.source.offsets import OffsetStore
    from mirrorflow.state_fence import LeaseLostError

    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true",
                                     "mirrorflow.lease.timeout.seconds = 2\n"))
    flow = config.flow("a->b")
    store = OffsetStore(config.cluster("b"), "a")
    paused = FlowLease(config, flow, "paused-run").__enter__()
    paused._stop.set()  # its renewals stop, as in a process paused for longer than 2 s
    paused._renewer.join()
    taken, done = threading.Event(), threading.Event()

    def next_run() -> None:  # another process, in effect: a context of its own
        with FlowLease(config, flow, "next-run", wait_s=30):
            taken.set()
            done.wait(30)

    thread = threading.Thread(target=next_run)
    thread.start()
    try:
        assert taken.wait(30)
        with pytest.raises(LeaseLostError, match=r"flow a->b: the lease of paused-run on "
                                                 r"cluster 'b' lapsed"):
            store.commit({("orders", 0): 99})  # the paused run wakes up and commits
    finally:
        done.set()
        thread.join()
        paused.__exit__(None, None, None)  # not this test's context's lease any more
    assert store.positions() == {}


def test_a_state_record_of_megabytes_is_written_and_one_too_large_named(
        two_clusters: dict[str, str], tmp_path: Path) -> None:
    """A plan of 12,000 ranges is over a megabyte of JSON in one state record: written through
    the lease's fence compressed (the topic keeps its 1 MiB limit). A record too large
    even compressed fails naming the topic and the cause, not as a fencing; nothing of it
    is there."""
    import json
    import os

    from mirrorflow.kafka.internal_topics import CompactedTopic, InternalTopicError

    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    store = CompactedTopic(config.cluster("b"), "mirrorflow-bigstate.internal")
    store.ensure()
    plan = json.dumps([{"topic": f"t{i // 4}", "partition": i % 4, "start": 0, "end": 1,
                        "remote_topic": f"a.t{i // 4}", "slot": i % 8}
                       for i in range(12_000)]).encode()
    assert len(plan) > 1_000_000
    with FlowLease(config, config.flow("a->b"), "big-run"):
        store.write([(b"plan/big", plan)])
        with pytest.raises(InternalTopicError,
                           match=r"flow a->b: writing mirrorflow-bigstate.internal on cluster "
                                 r"'b' failed: .*(too large|TOO_LARGE).*; nothing of it was "
                                 r"written"):
            store.write([(b"plan/random", os.urandom(2_000_000))])
    assert store.read() == {b"plan/big": plan}


def test_a_state_write_fenced_by_a_sibling_fences_again_and_logs_no_error(
        two_clusters: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Another process of the run takes the flow's state id (a DAG run's next task, the
    Spark job's driver): the holder's next state write is fenced, fences again and is
    written. librdkafka's error lines about it are logged at INFO: an operator's log
    shows no error where mirrorflow raised none."""
    import logging

    from confluent_kafka import Producer

    from mirrorflow.kafka.internal_topics import CompactedTopic
    from mirrorflow.state_fence import state_transactional_id

    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    store = CompactedTopic(config.cluster("b"), "mirrorflow-sibling.internal")
    store.ensure()
    caplog.set_level(logging.INFO, logger="mirrorflow")
    with FlowLease(config, config.flow("a->b"), "one-run"):
        store.write([(b"k1", b"before")])
        sibling = Producer({"bootstrap.servers": two_clusters["b"],
                            "transactional.id": state_transactional_id("a->b")})
        sibling.init_transactions(30)  # fences the holder's producer
        store.write([(b"k2", b"after")])
    assert store.read() == {b"k1": b"before", b"k2": b"after"}
    fenced = [r for r in caplog.records if r.name == "mirrorflow.librdkafka.state"
              and "fenced by a newer instance" in r.getMessage()]
    assert fenced and {r.levelno for r in fenced} == {logging.INFO}
    assert [r.getMessage() for r in caplog.records if r.name.startswith("mirrorflow")
            and r.levelno >= logging.WARNING and "fenced" in r.getMessage()] == []


def test_a_fenced_write_is_readable_when_it_returns(two_clusters: dict[str, str],
                                                     tmp_path: Path) -> None:
    """The coordinator answers a commit before it writes the transaction's markers, so a
    read_committed read right after could stop short of it (an operator's reset dropped a
    plan that the same task then read back as pending). Each write, read at once: always
    there, in every partition it touched."""
    from mirrorflow.kafka.internal_topics import CompactedTopic

    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    store = CompactedTopic(config.cluster("b"), "mirrorflow-visible.internal", partitions=4)
    store.ensure()
    short = []
    with FlowLease(config, config.flow("a->b"), "one-run"):
        for i in range(100):
            records = [(f"key-{i}-{k}".encode(), b"v") for k in range(8)]
            store.write(records)
            seen = store.read()
            if any(key not in seen for key, _ in records):
                short.append(i)
    assert short == []
    assert len(store.read()) == 800


def test_writes_within_one_transaction_land_together_or_not_at_all(
        two_clusters: dict[str, str], tmp_path: Path) -> None:
    """A run's commit holds its state writes (history, positions, plan mark) back and
    writes them in one transaction of the flow's state producer: readable together when
    the block ends; none of them when something inside it fails."""
    from mirrorflow.kafka.internal_topics import CompactedTopic, one_transaction

    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    first = CompactedTopic(config.cluster("b"), "mirrorflow-together-1.internal", partitions=3)
    second = CompactedTopic(config.cluster("b"), "mirrorflow-together-2.internal")
    with FlowLease(config, config.flow("a->b"), "one-run"):
        with pytest.raises(RuntimeError, match=r"^midway$"), one_transaction():
            first.write([(b"dropped", b"1")])
            second.write([(b"dropped", b"2")])
            raise RuntimeError("midway")
        assert (first.read(), second.read()) == ({}, {})
        with one_transaction():
            first.write([(b"k1", b"a"), (b"k2", b"b")])
            second.write([(b"k3", b"c")])
            assert (first.read(), second.read()) == ({}, {})  # held until the block ends
        assert (first.read(), second.read()) == ({b"k1": b"a", b"k2": b"b"}, {b"k3": b"c"})


def test_a_fencing_met_at_a_produce_call_fences_again(two_clusters: dict[str, str],
                                                      tmp_path: Path, monkeypatch) -> None:
    """A write of many records learns of its fencing while it still produces: librdkafka
    then refuses each further record with only "Local: Fatal error". That is the fencing
    too (the producer's fatal error names it): the holder fences again and writes, where
    it failed the commit with the generic error."""
    from confluent_kafka import KafkaError, Producer

    from mirrorflow.kafka.internal_topics import CompactedTopic
    from mirrorflow.state_fence import StateFence, state_transactional_id

    met: list[int] = []
    cause = StateFence._cause

    def recorded(self, error):
        met.append(error.code())
        return cause(self, error)

    monkeypatch.setattr(StateFence, "_cause", recorded)

    config = load_config(config_file(tmp_path / "mm2.properties", two_clusters,
                                     "a->b.enabled = true"))
    store = CompactedTopic(config.cluster("b"), "mirrorflow-bigfenced.internal", partitions=4)
    store.ensure()
    records = [(f"key-{i}".encode(), b"v" * 20) for i in range(100_000)]
    with FlowLease(config, config.flow("a->b"), "one-run"):
        store.write([(b"k1", b"before")])
        sibling = Producer({"bootstrap.servers": two_clusters["b"],
                            "transactional.id": state_transactional_id("a->b")})
        sibling.init_transactions(30)  # fences the holder's producer
        store.write(records)
    assert store.read() == {b"k1": b"before", **dict(records)}
    assert KafkaError._FATAL in met  # met at a produce call, not only at the commit
