"""The schema registry transfer end to end, on Apache Kafka and Spark: a flow configured
with MM2's Schema Registry Transfer SMT mirrors Avro records between two registries that
hand out different ids (east from 1, west from 1000), the proof proves them, and a group
failed over decodes every record with the target's registry. Faults (a record not in the
wire format, an incompatible target subject, a registry that does not answer) fail the
run naming what is at fault and commit nothing; the retry finishes the same plan."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from helpers.kafka import (
    commit,
    commit_offsets,
    config_file,
    create_topic,
    produce,
    read_as_group,
    read_partition,
)
from mirrorflow.checkpoint.remote import translate_offsets
from mirrorflow.config.loader import load_config
from mirrorflow.dev.schema_registry import LocalRegistry
from mirrorflow.operations import reset_positions
from mirrorflow.quality import reports
from mirrorflow.run import run_cycle
from mirrorflow.schema import mapping
from mirrorflow.schema.registries import RegistryRefusedError, SchemaTransferError
from mirrorflow.source.offsets import OffsetStore
from mirrorflow.source.plan_store import PlanStore

pytestmark = [pytest.mark.broker, pytest.mark.spark]

SMT = "cricket.jmoore.kafka.connect.transforms.SchemaRegistryTransfer"
ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"],
                                   {"name": "qty", "type": "int", "default": 1}]}


@pytest.fixture
def registries():
    with LocalRegistry(first_id=1) as east, LocalRegistry(first_id=1000) as west:
        yield east, west


def flow_config(tmp_path: Path, clusters: dict[str, str], east: str, west: str,
                extra: str = "") -> Path:
    return config_file(tmp_path / "mm2.properties", clusters, (
        "a->b.enabled = true\n"
        "a->b.transforms = AvroSchemaTransfer\n"
        f"a->b.transforms.AvroSchemaTransfer.type = {SMT}\n"
        f"a->b.transforms.AvroSchemaTransfer.src.schema.registry.url = {east}\n"
        f"a->b.transforms.AvroSchemaTransfer.dest.schema.registry.url = {west}\n" + extra),
        "sync.group.offsets.enabled = true\n")


def avro_records(east: LocalRegistry, start: int, count: int) -> list:
    """(key, value, headers, timestamp): string keys and Order values in Avro, the first
    half under v1, the rest under v2, every third with a header."""
    client = SchemaRegistryClient({"url": east.url})
    keys = AvroSerializer(client, '"string"')
    v1, v2 = (AvroSerializer(client, json.dumps(s)) for s in (ORDER_V1, ORDER_V2))
    out = []
    for i in range(start, start + count):
        value_ctx = SerializationContext("orders", MessageField.VALUE)
        order = {"id": i, "item": f"item-{i}"}
        value = v1(order, value_ctx) if i - start < count // 2 else \
            v2({**order, "qty": i % 7}, value_ctx)
        key = keys(f"k{i}", SerializationContext("orders", MessageField.KEY))
        out.append((key, value, [("trace", f"t{i}".encode())] if i % 3 == 0 else None,
                    1_700_000_000_000 + i))
    return out


def id_of(data: bytes) -> int:
    return struct.unpack(">I", data[1:5])[0]


def test_avro_records_move_between_registries_and_decode_after_failover(
        spark, two_clusters: dict[str, str], registries, tmp_path: Path) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    east, west = registries
    create_topic(a, "orders", 2)
    produce(a, "orders", avro_records(east, 0, 300), 2)
    commit(a, "app", "orders", {0: 100, 1: 100})
    path = flow_config(tmp_path, two_clusters, east.url, west.url)
    result = run_cycle(path, "a->b", spark=spark)
    assert result.records == 300 + 1  # and the run's heartbeat, not transferred

    # West gave the key schema and both value versions ids of its own, under the remote
    # topic's subjects; the records carry them, every other byte as it was.
    dest = SchemaRegistryClient({"url": west.url})
    assert sorted(dest.get_subjects()) == ["a.orders-key", "a.orders-value"]
    assert dest.get_versions("a.orders-value") == [1, 2]
    src = SchemaRegistryClient({"url": east.url})
    versions = [("orders-key", 1), ("orders-value", 1), ("orders-value", 2)]
    ids = {src.get_version(subject, v).schema_id: dest.get_version(f"a.{subject}", v).schema_id
           for subject, v in versions}
    key_id, v1_id, v2_id = (src.get_version(subject, v).schema_id for subject, v in versions)
    assert sorted(ids) == [1, 2, 3] and sorted(ids.values()) == [1000, 1001, 1002]
    for p in range(2):
        source, target = read_partition(a, "orders", p), read_partition(b, "a.orders", p)
        assert len(target) == len(source) == 150
        for (sk, sv, sh, st), (tk, tv, th, tt) in zip(source, target, strict=True):
            assert (id_of(tk), id_of(tv)) == (ids[id_of(sk)], ids[id_of(sv)])
            assert (tk[0], tk[5:], tv[0], tv[5:], th, tt) == (0, sk[5:], 0, sv[5:], sh, st)

    # The proof proved every record; the report lists the mappings.
    summary = reports.read("a->b", result.run_id)
    assert summary["validation"]["success"] is True
    assert summary["validation"]["verified_records"] == 301
    assert summary["validation"]["schemas"] == [
        {"remote_topic": "a.orders", "part": part, "source_id": source, "target_id": ids[source],
         "subject": f"a.orders-{part}", "version": version, "schema_type": "AVRO"}
        for part, source, version in sorted([("key", key_id, 1), ("value", v1_id, 1),
                                             ("value", v2_id, 2)])]
    assert f"schema a.orders value: source id {v2_id} -> target id {ids[v2_id]} " \
           "(a.orders-value v2, AVRO)" in reports.render(summary)
    config = load_config(path)
    flow = config.flow("a->b")
    stored = mapping.stored(PlanStore(config, flow).topic.read())
    assert {k: m.target_id for k, m in stored.items()} == {
        ("a.orders", "key", key_id): ids[key_id], ("a.orders", "value", v1_id): ids[v1_id],
        ("a.orders", "value", v2_id): ids[v2_id]}

    # Failover: the group, moved with the translated offsets, decodes every record on the
    # target with west's registry, as the source's records decode with east's.
    offsets = translate_offsets(config.cluster("b"), "a", "app")
    moved = Consumer({"bootstrap.servers": b, "group.id": "app"})
    commit_offsets(moved, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
    moved.close()
    values = AvroDeserializer(dest)
    source_values = AvroDeserializer(SchemaRegistryClient({"url": east.url}))
    resumed = read_as_group(b, "app", "a.orders", 2)
    for p in range(2):
        expected = [source_values(v, SerializationContext("orders", MessageField.VALUE))
                    for _, v, _, _ in read_partition(a, "orders", p)[100:]]
        assert [values(v, SerializationContext("a.orders", MessageField.VALUE))
                for _, v, _, _ in resumed[p]] == expected
        assert len(expected) == 50

    # A later run reuses the stored mappings: no registry call but the proof's two
    # lookups of each mapping its records use.
    produce(a, "orders", avro_records(east, 300, 20), 2)
    east.registry.requests.clear()
    west.registry.requests.clear()
    again = run_cycle(path, "a->b", spark=spark)
    assert again.records == 20 + 1
    assert sorted(east.registry.requests) == ["GET /schemas/ids/1", "GET /schemas/ids/2",
                                              "GET /schemas/ids/3"]
    assert sorted(west.registry.requests) == [f"GET /schemas/ids/{i}" for i in (1000, 1001, 1002)]


def test_later_runs_write_with_the_stored_mappings_and_a_new_version_is_mapped_when_met(
        spark, two_clusters: dict[str, str], registries, tmp_path: Path, monkeypatch,
        caplog) -> None:
    """A run whose topics all have stored mappings writes with them, its ranges not
    scanned; a record whose id they lack (a schema version new to the flow) is refused by
    its writer, and the driver then scans the ranges, maps the new id and writes the plan
    again: every record once, in order, proven."""
    from mirrorflow.spark import mirror as spark_mirror

    a, b = two_clusters["a"], two_clusters["b"]
    east, west = registries
    create_topic(a, "orders", 1)
    produce(a, "orders", avro_records(east, 0, 10), 1)
    # Transactions of 2 records: those before the new version's record are committed when
    # its writer refuses it, the one open then is fenced and written again.
    path = flow_config(tmp_path, two_clusters, east.url, west.url,
                       "a->b.mirrorflow.transaction.records = 2\n")
    scans: list[int] = []
    scan = spark_mirror.find_ids
    monkeypatch.setattr(spark_mirror, "find_ids",
                        lambda *args, **kwargs: scans.append(1) or scan(*args, **kwargs))
    run_cycle(path, "a->b", spark=spark)
    produce(a, "orders", avro_records(east, 10, 10), 1)
    assert run_cycle(path, "a->b", spark=spark).records == 10 + 1
    assert len(scans) == 1  # the first run only: the second had every id stored

    v3 = AvroSerializer(SchemaRegistryClient({"url": east.url}), json.dumps(
        {**ORDER_V2, "fields": [*ORDER_V2["fields"],
                                {"name": "note", "type": "string", "default": ""}]}))
    new = v3({"id": 99, "item": "new", "qty": 3, "note": "v3"},
             SerializationContext("orders", MessageField.VALUE))
    known = avro_records(east, 20, 10)
    produce(a, "orders", [*known[:5], (known[5][0], new, None, known[5][3]), *known[6:]], 1)
    with caplog.at_level("INFO", logger="mirrorflow.spark.mirror"):
        third = run_cycle(path, "a->b", spark=spark)
    assert (third.records + third.already_there, third.already_there, len(scans)) == (
        10 + 1, 4, 2)
    assert ["source orders[0] offset 25: schema id 4 of its value is not mapped for the "
            "schema registry transfer" in m and m.endswith(
                "; scanning the planned ranges for their schema ids")
            for m in caplog.messages if "scanning" in m] == [True]
    assert reports.read("a->b", third.run_id)["validation"]["success"] is True
    config = load_config(path)
    stored = mapping.stored(PlanStore(config, config.flow("a->b")).topic.read())
    assert stored[("a.orders", "value", 4)].target_id == 1003
    source, target = read_partition(a, "orders", 0), read_partition(b, "a.orders", 0)
    assert len(target) == len(source) == 30
    ids = {m.source_id: m.target_id for m in stored.values() if m.part == "value"}
    assert [id_of(v) for _, v, _, _ in target] == [ids[id_of(v)] for _, v, _, _ in source]
    assert [v[5:] for _, v, _, _ in target] == [v[5:] for _, v, _, _ in source]


def test_faults_fail_the_run_naming_them_and_the_retry_finishes_the_plan(
        spark, two_clusters: dict[str, str], registries, tmp_path: Path) -> None:
    a, b = two_clusters["a"], two_clusters["b"]
    east, west = registries
    create_topic(a, "orders", 1)
    produce(a, "orders", avro_records(east, 0, 40), 1)
    path = flow_config(tmp_path, two_clusters, east.url, west.url)
    config = load_config(path)
    positions = OffsetStore(config.cluster("b"), "a", 1)

    # The target registry does not answer: one line naming it; nothing committed.
    west.stop()
    with pytest.raises(SchemaTransferError) as silent:
        run_cycle(path, "a->b", spark=spark)
    assert str(silent.value).startswith(
        f"the target schema registry at {west.url} does not answer (the versions of "
        "subject 'a.orders-key'): ")
    assert "\n" not in str(silent.value)
    assert positions.positions() == {}
    assert read_partition(b, "a.orders", 0) == []  # read_committed: nothing

    # The target subject holds a schema the source's cannot follow (BACKWARD): HTTP 409,
    # naming the subject, the source id and the registry's message.
    west.start()
    SchemaRegistryClient({"url": west.url}).register_schema("a.orders-value", Schema(
        json.dumps({**ORDER_V1, "fields": [{"name": "sku", "type": "string"}]}), "AVRO"))
    with pytest.raises(RegistryRefusedError) as refused:
        run_cycle(path, "a->b", spark=spark)
    v1_id = SchemaRegistryClient({"url": east.url}).get_version("orders-value", 1).schema_id
    assert str(refused.value).startswith(
        f"the target schema registry at {west.url} refused the schema of source id {v1_id} "
        "under subject 'a.orders-value': Schema being registered is incompatible")
    assert str(refused.value).endswith("(HTTP 409, error 409)")
    assert positions.positions() == {}
    west.registry.set_compatibility("a.orders-value", {"compatibility": "NONE"})

    # Retried, the same plan finishes: every record once.
    pending = PlanStore(config, config.flow("a->b")).pending()
    done = run_cycle(path, "a->b", spark=spark)
    assert (done.resumed, done.plan_id) == (True, pending.plan_id)
    assert len(read_partition(b, "a.orders", 0)) == 40

    # A record not in the wire format fails the next run at its offset.
    produce(a, "orders", [(None, b"plain text", None, 1_700_000_000_000)], 1)
    with pytest.raises(SchemaTransferError) as bad:
        run_cycle(path, "a->b", spark=spark)
    assert str(bad.value).startswith(
        "source orders[0] offset 40: the record's value is not in Confluent's wire format "
        "(its first byte is 112, not 0), so the schema registry transfer "
        "'AvroSchemaTransfer' of flow a->b cannot map its schema id")
    assert positions.positions()[("orders", 0)] == 39
    assert len(read_partition(b, "a.orders", 0)) == 40


def test_headers_dropped_keys_kept_and_a_mapping_that_no_longer_holds_is_caught(
        spark, two_clusters: dict[str, str], registries, tmp_path: Path) -> None:
    """``include.message.headers = false`` writes records without headers and the proof
    compares them so; ``transfer.message.keys = false`` copies plain keys as they are. A
    stored mapping whose target id no longer names the source's schema (a target
    registry replaced under the flow) fails the proof, naming the ids, before anything
    is committed; a reset repairs it."""
    a, b = two_clusters["a"], two_clusters["b"]
    east, west = registries
    create_topic(a, "orders", 1)
    records = [(f"plain-{i}".encode(), v, [("trace", b"x")], ts)
               for i, (_, v, _, ts) in enumerate(avro_records(east, 0, 30))]
    produce(a, "orders", records, 1)
    path = flow_config(tmp_path, two_clusters, east.url, west.url,
                       "a->b.transforms.AvroSchemaTransfer.include.message.headers = false\n"
                       "a->b.transforms.AvroSchemaTransfer.transfer.message.keys = false\n")
    result = run_cycle(path, "a->b", spark=spark)
    assert reports.read("a->b", result.run_id)["validation"]["verified_records"] == 31
    target = read_partition(b, "a.orders", 0)
    assert [(k, h, t) for k, _, h, t in target] == [(k, None, t) for k, _, _, t in records]
    assert [v[5:] for _, v, _, _ in target] == [v[5:] for _, v, _, _ in records]

    config = load_config(path)
    store = PlanStore(config, config.flow("a->b"))
    stored = mapping.stored(store.topic.read())
    v2 = max(stored.values(), key=lambda m: m.source_id)
    v1 = min(stored.values(), key=lambda m: m.source_id)
    # West's id of v1 now stands for v2's records: they decode wrongly on the target.
    wrong = mapping.IdMapping(v2.remote_topic, v2.part, v2.source_id, v1.target_id,
                              v2.subject, v2.version)
    store.topic.write([(wrong.key(), wrong.value())])
    produce(a, "orders", records[20:], 1)
    from mirrorflow.quality.verdicts import ValidationError

    with pytest.raises(ValidationError) as caught:
        run_cycle(path, "a->b", spark=spark)
    assert (f"a.orders's values: the target registry's schema id {v1.target_id} (subject "
            f"'a.orders-value') is not the source registry's schema id {v2.source_id}: the "
            "stored mapping no longer holds") in str(caught.value)
    assert OffsetStore(config.cluster("b"), "a", 1).positions()[("orders", 0)] == 29

    # The documented repair: a reset forgets the stored mappings; the next run registers
    # its schemas again and proves its records.
    reset_positions(config, config.flow("a->b"), "latest", run_id="operator")
    assert mapping.stored(store.topic.read()) == {}
    produce(a, "orders", records[25:], 1)
    repaired = run_cycle(path, "a->b", spark=spark)
    assert reports.read("a->b", repaired.run_id)["validation"]["success"] is True
    assert mapping.stored(store.topic.read())[v2.ident].target_id == v2.target_id


def test_the_schemas_demo_config_runs_with_its_local_registries(
        spark, two_clusters: dict[str, str], repo: Path, tmp_path: Path) -> None:
    """include/config/mm2-schemas.properties on the test brokers and free ports: `local up`'s
    registries (processes that keep their schemas across a restart), the demo's Avro
    topic, one run, and every record decoding on the target."""
    from mirrorflow.dev import local_registries
    from mirrorflow.dev.demo import fill_demo_topic
    from mirrorflow.dev.localcluster import free_port

    ports = {"18081": str(free_port()), "28081": str(free_port())}
    text = (repo / "include" / "config" / "mm2-schemas.properties").read_text()
    text = text.replace("127.0.0.1:19192", two_clusters["a"]).replace(
        "127.0.0.1:29192", two_clusters["b"])
    for old, new in ports.items():
        text = text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    text = text.replace("east->west.mirrorflow.spark.master = sc://127.0.0.1:15002\n", "")
    path = tmp_path / "mm2-schemas.properties"
    path.write_text(text)
    config = load_config(path)
    registries = local_registries.local_registries(config, tmp_path / "state")
    assert [(r.url, r.first_id) for r in registries] == [
        (f"http://127.0.0.1:{ports['18081']}", 1), (f"http://127.0.0.1:{ports['28081']}", 1001)]
    try:
        for registry in registries:
            local_registries.start(registry)
        demo = fill_demo_topic(config, "orders", 2, 200)
        east = SchemaRegistryClient({"url": registries[0].url})
        assert sorted(east.get_subjects()) == ["orders-key", "orders-value"]
        # Restarted, a registry still has what it was given.
        assert local_registries.stop(registries[0]) is True
        local_registries.start(registries[0])
        assert sorted(SchemaRegistryClient({"url": registries[0].url}).get_subjects()) == [
            "orders-key", "orders-value"]
        result = run_cycle(path, "east->west", spark=spark)
        assert result.records == demo.records + 1
        west = SchemaRegistryClient({"url": registries[1].url})
        values = AvroDeserializer(west)
        decoded = [values(v, SerializationContext("east.orders", MessageField.VALUE))
                   for p in range(2) for _, v, _, _ in read_partition(two_clusters["b"],
                                                                      "east.orders", p)]
        assert sorted(d["order"] for d in decoded) == list(range(200))
        assert {id_of(v) for p in range(2)
                for _, v, _, _ in read_partition(two_clusters["b"], "east.orders", p)} == \
            {west.get_latest_version("east.orders-value").schema_id}
    finally:
        for registry in registries:
            local_registries.stop(registry)
    assert not any(r.answering() for r in registries)
