"""Test helpers: produce varied records and read partitions back, with real clients."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from mirrorflow.kafka.clients import cluster_metadata

Record = tuple[bytes | None, bytes | None, list | None, int]

# The tests' JVMs (brokers, MM2) move a few thousand records: compiled with C1 only, they
# start sooner and idle cheaper on 2 cores (a broker: 3.5 CPU-seconds to start instead of
# 5.5, 1.4 a minute idle instead of 2.4). A long-running broker or MM2 wants the tiered
# compiler (the bench's and the soak's).
QUICK_START = ("-XX:TieredStopAtLevel=1",)


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(10)


def alter_topic(bootstrap: str, topic: str, configs: dict[str, str | None]) -> None:
    """Set each config of ``configs`` on ``topic`` (incrementally), or remove it where the
    value is None."""
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None
                    else AlterConfigOpType.DELETE)
        for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept while its futures run
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


def varied_records(n: int, start: int = 0) -> list[tuple[bytes | None, bytes | None, list | None,
                                                          int]]:
    """Null keys, tombstones, no/one/many headers, explicit timestamps, 1 KiB-ish values."""
    out = []
    for i in range(start, start + n):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 0 else (f"value-{i}-".encode() * (1 + i % 40))
        if i % 5 == 0:
            headers = None
        elif i % 5 == 1:
            headers = [("trace", f"t{i}".encode())]
        else:
            headers = [(f"h{j}", None if j == 2 else f"{i}-{j}".encode())
                       for j in range(i % 6)] or None
        out.append((key, value, headers, 1_700_000_000_000 + i))
    return out


def produce(bootstrap: str, topic: str, records: list, partitions: int, **conf) -> None:
    """Produce with ordinary batching; record i goes to partition i % partitions. Every
    record must be acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **conf})
    errors: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            errors.append(err.str())

    for i, (key, value, headers, ts) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts,
                                 partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[0]


def produce_in_transactions(bootstrap: str, topic: str, records: list, partitions: int,
                            per_txn: int) -> None:
    """Every committed transaction leaves a marker: the partition's offsets get gaps.
    Returns once every marker is written (:func:`settle`): a plan made next ends at the
    last stable offset, which the last commit's markers move a moment after it returns
    (a plan of the first transaction only made a test flaky)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"gaps-{topic}"})
    producer.init_transactions(30)
    for start in range(0, len(records), per_txn):
        producer.begin_transaction()
        for i in range(start, min(start + per_txn, len(records))):
            key, value, headers, ts = records[i]
            producer.produce(topic, value, key, partition=i % partitions, headers=headers,
                             timestamp=ts)
        producer.commit_transaction(30)
    for partition in range(partitions):
        settle(bootstrap, topic, partition, timeout=10.0)


def settle(bootstrap: str, topic: str, partition: int, timeout: float = 3.0) -> None:
    """Wait (up to ``timeout``) until the partition's last stable offset reaches its end: a
    transaction's markers land a moment after its commit returns, and a read_committed
    reader stops at the LSO. A transaction left open on purpose only costs the wait."""
    import time

    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    admin = fresh_admin(bootstrap)
    tp = TopicPartition(topic, partition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ends = [admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp]
                    .result(10).offset for level in (IsolationLevel.READ_COMMITTED,
                                                     IsolationLevel.READ_UNCOMMITTED)]
        except KafkaException as exc:  # a topic just created: its leader not known yet
            if exc.args[0].code() not in (KafkaError.NOT_LEADER_FOR_PARTITION,
                                          KafkaError.LEADER_NOT_AVAILABLE):
                raise
            ends = [0, 1]
        if ends[0] == ends[1]:
            return
        time.sleep(0.05)


def read_partition(bootstrap: str, topic: str, partition: int, start: int = 0,
                   with_offsets: bool = False) -> list:
    """Every record of a partition from ``start`` to its end, as (key, value, headers, ts),
    as a read_committed consumer sees it once committed transactions have settled."""
    settle(bootstrap, topic, partition)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader",
                         "enable.partition.eof": True, "enable.auto.commit": False,
                         "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, partition, start)])
    out = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, f"timed out reading {topic}[{partition}]"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            headers = msg.headers() or None
            item = (msg.key(), msg.value(), headers, msg.timestamp()[1])
            out.append((msg.offset(), *item) if with_offsets else item)
    finally:
        consumer.close()


def read_as_group(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, list]:
    """What an application restarted in ``group`` reads of ``topic`` on this cluster, from
    its committed offsets to the end, per partition, as :func:`read_partition` gives
    records. A partition the group has no offset for fails (``auto.offset.reset`` error)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "error",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    out: dict[int, list] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    try:
        while len(ended) < partitions:
            msg = consumer.poll(10)
            assert msg is not None, f"{group} read nothing of {topic} on {bootstrap}"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                ended.add(msg.partition())
                continue
            out[msg.partition()].append((msg.key(), msg.value(), msg.headers() or None,
                                         msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


def fresh_admin(bootstrap: str) -> AdminClient:
    """A new admin client that holds the cluster's metadata: librdkafka's ListOffsets and
    DeleteRecords on a client whose metadata lacks the leaders race its own thread and can
    crash the process (see mirrorflow.kafka.watermarks)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cluster_metadata(admin, 10)
    return admin


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    """Retention by hand: DeleteRecords moves the partition's log start to ``before``."""
    tp = TopicPartition(topic, partition, before)
    admin = fresh_admin(bootstrap)  # alive until the answer comes
    admin.delete_records([tp])[tp].result(10)


def recorded_creates(monkeypatch) -> list[list[str]]:
    """The topics of every CreateTopics request any admin client sends from now on, each
    request's names sorted (and still sent)."""
    create = AdminClient.create_topics
    requests: list[list[str]] = []

    def recording(admin, new_topics, **kwargs):
        requests.append(sorted(t.topic for t in new_topics))
        return create(admin, new_topics, **kwargs)

    monkeypatch.setattr(AdminClient, "create_topics", recording)
    return requests


def topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def topic_partitions(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return len(metadata.topics[topic].partitions)


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit ``group``'s offsets of ``topic`` (partition -> offset)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    commit_offsets(consumer, [TopicPartition(topic, p, o) for p, o in offsets.items()])
    consumer.close()


def commit_offsets(consumer: Consumer, offsets: list[TopicPartition]) -> None:
    """Commit these offsets with ``consumer``'s group, retried while a fresh broker's group
    coordinator is still loading or not yet elected: librdkafka hands a synchronous
    commit's COORDINATOR_LOAD_IN_PROGRESS back instead of retrying it."""
    import time

    settling = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)
    deadline = time.monotonic() + 30
    while True:
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as exc:
            if exc.args[0].code() not in settling or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def config_file(path: Path, bootstraps: dict[str, str], flows: str, extra: str = "") -> Path:
    lines = [f"clusters = {', '.join(bootstraps)}"]
    lines += [f"{alias}.bootstrap.servers = {b}" for alias, b in bootstraps.items()]
    # Single-broker clusters: every topic mirrorflow (or MM2) creates has one replica.
    lines += ["replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
              "checkpoints.topic.replication.factor = 1",
              "heartbeats.topic.replication.factor = 1", flows, extra]
    path.write_text("\n".join(lines) + "\n")
    return path


KAFKA_OWN_TOPICS = {"__consumer_offsets", "__transaction_state", "__share_group_state"}


# Per broker: how far __transaction_state was read, and each transactional id's status.
_TRANSACTIONS: dict[str, tuple[dict[int, int], dict[str, int]]] = {}
_ONGOING = 1  # TransactionState.ONGOING in TransactionLogValue.TransactionStatus


def open_transactions(bootstrap: str) -> list[str]:
    """The transactional ids whose transaction is open, from __transaction_state (read on
    from where the last call stopped). TransactionLogKey: version int16, id (int16 length,
    UTF-8); TransactionLogValue: version int16, producer id int64, epoch int16, timeout
    int32, status int8 (tagged fields come last), as Kafka's TransactionLogValue.json."""
    import struct

    from mirrorflow.kafka.clients import take

    offsets, status = _TRANSACTIONS.setdefault(bootstrap, ({}, {}))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics("__transaction_state", timeout=10).topics.get("__transaction_state")
    if topic is None or topic.error is not None:
        return []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wipe",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 10})
    parts = sorted(topic.partitions)
    consumer.assign([TopicPartition("__transaction_state", p, offsets.get(p, -2)) for p in parts])
    pending = set(parts)
    while pending:
        for msg in take(consumer, 1):  # consume(n, 1) would wait out its second each call
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                    continue
                raise KafkaException(msg.error())
            offsets[msg.partition()] = msg.offset() + 1
            key, value = msg.key(), msg.value()
            (length,) = struct.unpack_from(">h", key, 2)
            txn_id = key[4:4 + length].decode()
            status[txn_id] = value[16] if value else -1
    consumer.close()
    return sorted(t for t, s in status.items() if s == _ONGOING)


def finish_open_transactions(bootstrap: str) -> None:
    """Fence every open transaction, so the coordinator aborts it now: left to time out, it
    would write its abort markers into a later topic of the same name (a coordinator
    knows a transaction's partitions by name), shifting that topic's offsets by one."""
    for txn_id in open_transactions(bootstrap):
        Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id}
                 ).init_transactions(30)


def wipe(bootstrap: str, timeout: float = 30.0) -> None:
    """Finish every open transaction, then delete every topic but Kafka's own, every
    consumer group and every ACL."""
    import time

    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    finish_open_transactions(bootstrap)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    every_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
    for future in admin.delete_acls([every_acl], request_timeout=timeout).values():
        future.result(timeout)
    names = [t for t in admin.list_topics(timeout=timeout).topics if t not in KAFKA_OWN_TOPICS]
    if names:
        for future in admin.delete_topics(names, operation_timeout=timeout).values():
            future.result(timeout)
    deadline = time.monotonic() + timeout
    while left := set(admin.list_topics(timeout=timeout).topics) - KAFKA_OWN_TOPICS:
        assert time.monotonic() < deadline, f"topics of {bootstrap} not deleted: {left}"
        time.sleep(0.05)
    groups = [g.group_id for g in admin.list_consumer_groups().result(timeout).valid]
    if groups:
        for future in admin.delete_consumer_groups(groups, request_timeout=timeout).values():
            try:
                future.result(timeout)
            except KafkaException as exc:  # a member still joined: the test left it open
                if exc.args[0].code() != KafkaError.NON_EMPTY_GROUP:
                    raise


@contextlib.contextmanager
def mm2_jvm() -> Iterator:
    """A py4j gateway to a JVM with jvm/pom.xml's MM2 classpath (MM2 and Kafka's clients)."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    from mirrorflow import jvm

    gateway = launch_gateway(SparkConf().set("spark.driver.extraClassPath",
                                             ":".join(jvm.jars("mm2"))))
    try:
        yield gateway
    finally:
        gateway.shutdown()  # closes the connection; the JVM would live on until pytest exits
        gateway.proc.terminate()
        gateway.proc.wait(30)


def produce_with_java(bootstrap: str, topic: str,
                      records: list[tuple[bytes, bytes, int]]) -> None:
    """Produce ``(key, value, timestamp)`` records to partition 0 with Apache Kafka's Java
    producer: librdkafka cannot write a CreateTime of 0, which it takes for "now"; the
    Java producer writes it as it is."""
    with mm2_jvm() as gateway:
        java, kafka = gateway.jvm.java, gateway.jvm.org.apache.kafka
        props = java.util.Properties()
        props.put("bootstrap.servers", bootstrap)
        serializer = kafka.common.serialization.ByteArraySerializer
        producer = kafka.clients.producer.KafkaProducer(props, serializer(), serializer())
        try:
            for key, value, ts in records:
                producer.send(kafka.clients.producer.ProducerRecord(
                    topic, 0, java.lang.Long.valueOf(ts), key, value)).get()
        finally:
            producer.close()


def resume_position(bootstrap: str, source_alias: str, topic: str,
                    partition: int) -> tuple[str, int] | None:
    """A remote partition's resume position in the progress group, as the JVM writer
    committed it: (plan id, next upstream offset), or None."""
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"__mirrorflow.{source_alias}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        (found,) = consumer.committed([TopicPartition(topic, partition)], timeout=30)
    finally:
        consumer.close()
    return (found.metadata or "", found.offset) if found.offset >= 0 else None
