"""The schema registry transfer without Kafka: its configuration as MM2 users write it, the
wire-format rewrite (Arrow and Spark SQL alike), and the id mapping against two stand-in
registries (mirrorflow.dev.schema_registry) for Avro, Protobuf and JSON Schema, with
references, subject-name strategies and compatibility levels."""

from __future__ import annotations

import json
import struct

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

from mirrorflow.config.errors import ConfigError
from mirrorflow.config.loader import parse_config
from mirrorflow.dev.schema_registry import LocalRegistry
from mirrorflow.schema import wire
from mirrorflow.schema.ids_in_ranges import FoundIds, refuse, rewrite_table
from mirrorflow.schema.mapping import IdMapping, ProofView
from mirrorflow.schema.registries import RegistryRefusedError, SchemaTransferError
from mirrorflow.schema.transfer import IdMapper

SMT = "cricket.jmoore.kafka.connect.transforms.SchemaRegistryTransfer"
ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "id", "type": "long"}]}


def config_text(lines: str, top: str = "") -> str:
    return ("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\n"
            "b.bootstrap.servers = 127.0.0.1:2\na->b.enabled = true\n" + top + lines)


def transfer_lines(src: str, dest: str, extra: str = "", flow: str = "a->b.") -> str:
    return (f"{flow}transforms = T\n{flow}transforms.T.type = {SMT}\n"
            f"{flow}transforms.T.src.schema.registry.url = {src}\n"
            f"{flow}transforms.T.dest.schema.registry.url = {dest}\n" + extra)


def test_the_smts_settings_as_mm2_users_write_them() -> None:
    flow = parse_config(config_text(transfer_lines(
        "http://east:8081", "http://west:8081,http://west2:8081",
        "a->b.transforms.T.transfer.message.keys = false\n"
        "a->b.transforms.T.include.message.headers = false\n"
        "a->b.transforms.T.schema.capacity = 7\n"
        "a->b.transforms.T.dest.basic.auth.credentials.source = USER_INFO\n"
        "a->b.transforms.T.dest.basic.auth.user.info = bob:pw-9f3\n"
        "a->b.transforms.T.value.subject.name.strategy = "
        "io.confluent.kafka.serializers.subject.RecordNameStrategy\n"))).flow("a->b")
    t = flow.schema_transfer
    assert (t.name, t.source.urls, t.target.urls) == (
        "T", ("http://east:8081",), ("http://west:8081", "http://west2:8081"))
    assert (t.transfer_keys, t.include_headers, t.capacity) == (False, False, 7)
    assert (t.fields, t.key_strategy, t.value_strategy) == (
        ("value",), "TopicNameStrategy", "RecordNameStrategy")
    assert (t.target.credentials_source, t.target.user_info) == ("USER_INFO", "bob:pw-9f3")
    assert "pw-9f3" not in repr(t)  # a secret: never in a repr, a log line or a message
    # Top-level transforms are every flow's defaults; a flow's own win key by key.
    both = parse_config(config_text(
        "b->a.enabled = true\n" + transfer_lines("http://east", "http://west", flow="")
        + "b->a.transforms.T.src.schema.registry.url = http://west\n"
        "b->a.transforms.T.dest.schema.registry.url = http://east\n"))
    assert both.flow("a->b").schema_transfer.source.urls == ("http://east",)
    assert both.flow("b->a").schema_transfer.source.urls == ("http://west",)
    assert parse_config(config_text("")).flow("a->b").schema_transfer is None


@pytest.mark.parametrize(("lines", "prop", "fragment"), [
    ("a->b.transforms = R\na->b.transforms.R.type = "
     "org.apache.kafka.connect.transforms.RegexRouter\n", "a->b.transforms.R.type",
     "transform 'R' is org.apache.kafka.connect.transforms.RegexRouter: mirrorflow runs "
     "only the schema registry transfer"),
    ("a->b.transforms = R\n", "a->b.transforms", "transform 'R' is no type"),
    (transfer_lines("http://e", "http://w") + "a->b.transforms = T, U\n", "a->b.transforms",
     "lists 2 transforms"),
    (transfer_lines("http://e", "http://w", "a->b.transforms.T.transfer.message.key = no\n"),
     "a->b.transforms.T.transfer.message.key",
     "has no option 'transfer.message.key' (did you mean 'transfer.message.keys'?)"),
    (transfer_lines("http://e", "", ""), "a->b.transforms.T.dest.schema.registry.url",
     "needs the target registry's address"),
    (transfer_lines("http://e", "http://w", "a->b.transforms.T.key.subject.name.strategy = "
                    "Mine\n"), "a->b.transforms.T.key.subject.name.strategy",
     "expected one of TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy"),
    (transfer_lines("http://e", "http://w", "a->b.transforms.T.predicate = IsHeartbeat\n"
                    "a->b.predicates = IsHeartbeat\n"), "a->b.predicates",
     "mirrorflow does not evaluate them"),
    ("a->b.transforms.X.type = " + SMT + "\n", "a->b.transforms.X.type",
     "transform 'X' is not in the flow's 'transforms' list"),
])
def test_a_chain_mirrorflow_cannot_run_is_refused_by_name(lines: str, prop: str,
                                                          fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(config_text(lines))
    assert f"property '{prop}'" in str(caught.value)
    assert fragment in str(caught.value)


def wire_record(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + body


def test_the_proofs_rewrite_changes_bytes_1_to_4_only_in_spark_sql(spark) -> None:
    """The proof's view of a transfer (the writers' rewrite is the JVM's SchemaIds)."""
    values = [wire_record(1, b"abc"), None, wire_record(2, b""), wire_record(1, b"\x00" * 9)]
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([("t", v) for v in values] + [("u", wire_record(1, b"z"))],
                                  "topic string, value binary")
    rows = frame.select(wire.rewrite_sql(F, "value", "topic", {("t", 1): 1001, ("t", 2): 1002})
                        .alias("v")).collect()
    assert [r["v"] and bytes(r["v"]) for r in rows] == [
        wire_record(1001, b"abc"), None, wire_record(1002, b""), wire_record(1001, b"\x00" * 9),
        wire_record(1, b"z")]


def test_two_source_ids_with_one_target_id_stand_for_each_other_in_the_proof() -> None:
    view = ProofView.of({m.ident: m for m in [
        IdMapping("a.t", "value", 1, 1000, "a.t-value", 1),
        IdMapping("a.t", "value", 5, 1000, "a.t-value", 1),
        IdMapping("a.t", "key", 2, 1001, "a.t-key", 1)]})
    assert view.back == {"key": {("a.t", 1001): 2}, "value": {("a.t", 1000): 1}}
    assert view.same == {"key": {}, "value": {("a.t", 5): 1}}
    assert view.ambiguous == {"a.t"}


@pytest.fixture
def registries():
    with LocalRegistry(first_id=1) as east, LocalRegistry(first_id=1000) as west:
        yield east, west


def mapper(east: LocalRegistry, west: LocalRegistry, extra: str = "",
           known: dict | None = None) -> IdMapper:
    config = parse_config(config_text(transfer_lines(east.url, west.url, extra)))
    flow = config.flow("a->b")
    return IdMapper(flow.schema_transfer, flow.name, config.cluster("a"), config.cluster("b"),
                    known or {}, flow.policy().is_heartbeats_topic)


def apply(m: IdMapper, records: pa.RecordBatch, topic: str, remote: str):
    """What a write of ``records`` (of source ``topic``) does with the driver's mappings:
    the ids found (:class:`FoundIds`, as the pass in Spark finds them), a record not in the
    wire format refused, each id mapped, and bytes 1-4 rewritten as the JVM writer's
    ``SchemaIds`` does (its own JUnit tests pin that); returns (records written, used)."""
    if m.exempt(topic):
        return records, set()
    found = FoundIds()
    for part in m.transfer.fields:
        found.ids[part] = set()
        for offset, data in zip(records.column("offset").to_pylist(),
                                records.column(part).to_pylist(), strict=True):
            if data is None:
                continue
            if len(data) >= wire.HEADER and data[0] == 0:
                found.ids[part].add(struct.unpack(">I", data[1:5])[0])
            elif part not in found.refused:
                found.refused[part] = (offset, len(data), data[0] if data else None)
    refuse({(topic, 0): found}, m.transfer, m.flow_name)
    table = rewrite_table(m, {(topic, 0): found}, {topic: remote})
    columns = {}
    for part, ids in table.get(remote, {}).items():
        columns[part] = pa.array([data if data is None or len(data) < wire.HEADER or data[0]
                                  else data[:1] + struct.pack(">I", ids[str(
                                      struct.unpack(">I", data[1:5])[0])]) + data[5:]
                                  for data in records.column(part).to_pylist()], pa.binary())
    out = pa.RecordBatch.from_arrays([columns.get(n, records.column(n))
                                      for n in records.schema.names], schema=records.schema)
    return out, {(part, i) for part, ids in found.ids.items() for i in ids}


def batch(keys: list, values: list, topic: str = "orders") -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
        "topic": [topic] * n, "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(40, 40 + n), pa.int64())})


def test_protobuf_json_and_references_are_registered_under_the_remote_topics_subjects(
        registries) -> None:
    east, west = registries
    src = SchemaRegistryClient({"url": east.url})
    common = src.register_schema("common.proto", Schema(
        'syntax = "proto3";\npackage shop;\nmessage Money { int64 cents = 1; }\n', "PROTOBUF"))
    src.set_compatibility("orders-value", "FULL")
    price = src.register_schema("orders-value", Schema(
        'syntax = "proto3";\npackage shop;\nimport "common.proto";\n'
        "message Price { shop.Money amount = 1; }\n", "PROTOBUF",
        [SchemaReference("common.proto", "common.proto", 1)]))
    key = src.register_schema("orders-key", Schema(json.dumps(
        {"title": "OrderKey", "type": "object", "properties": {"id": {"type": "integer"}}}),
        "JSON"))
    m = mapper(east, west)
    out, used = apply(m, batch([wire_record(key, b"{}"), None],
                              [wire_record(price, b"\x08\x01"), wire_record(price, b"")]),
                        "orders", "a.orders")
    dest = SchemaRegistryClient({"url": west.url})
    # The reference first, under its own subject; then the schema, pointing at its copy.
    assert dest.get_versions("common.proto") == [1]
    copied = dest.get_schema(out.column("value")[0].as_py()[1:5] and
                             struct.unpack(">I", out.column("value")[0].as_py()[1:5])[0])
    assert copied.schema_type == "PROTOBUF"
    assert [(r.name, r.subject, r.version) for r in copied.references] == [
        ("common.proto", "common.proto", 1)]
    assert sorted(dest.get_subjects()) == ["a.orders-key", "a.orders-value", "common.proto"]
    assert dest.get_compatibility("a.orders-value") == "FULL"  # the source subject's level
    assert [(x.part, x.source_id, x.subject, x.version, x.schema_type) for x in m.uncommitted] \
        == [("key", key, "a.orders-key", 1, "JSON"),
            ("value", price, "a.orders-value", 1, "PROTOBUF")]
    assert used == {("key", key), ("value", price)}
    assert all(x.target_id >= 1000 for x in m.uncommitted) and common < 1000
    assert out.column("value")[1].as_py() == wire_record(m.uncommitted[1].target_id, b"")
    assert out.column("key")[1].as_py() is None


def test_record_name_strategies_and_ids_mapped_once(registries) -> None:
    east, west = registries
    src = SchemaRegistryClient({"url": east.url})
    v1 = src.register_schema("orders-value", Schema(json.dumps(ORDER), "AVRO"))
    m = mapper(east, west, "a->b.transforms.T.transfer.message.keys = false\n"
                           "a->b.transforms.T.value.subject.name.strategy = "
                           "TopicRecordNameStrategy\n")
    west.registry.requests.clear()
    east.registry.requests.clear()
    for _ in range(3):  # the same id again: no registry call after the first
        apply(m, batch([b"k"], [wire_record(v1, b"\x02")] * 1), "orders", "a.orders")
    assert [x.subject for x in m.uncommitted] == ["a.orders-shop.Order"]
    assert east.registry.requests == ["GET /schemas/ids/1", "GET /config/orders-shop.Order"]
    assert len(west.registry.requests) == 3  # has the subject? register, look up
    # A mapping the flow stored is used without asking the registries at all.
    stored = mapper(east, west, "a->b.transforms.T.transfer.message.keys = false\n",
                    known={("a.orders", "value", v1): IdMapping("a.orders", "value", v1, 4242,
                                                                "a.orders-value", 3)})
    out, _ = apply(stored, batch([b"k"], [wire_record(v1, b"\x02")]), "orders", "a.orders")
    assert out.column("value")[0].as_py() == wire_record(4242, b"\x02")
    assert len(east.registry.requests) == 2 and stored.uncommitted == []


def test_bad_records_and_refusals_name_their_offset_subject_and_registry(registries) -> None:
    east, west = registries
    src = SchemaRegistryClient({"url": east.url})
    v1 = src.register_schema("orders-value", Schema(json.dumps(ORDER), "AVRO"))
    with pytest.raises(SchemaTransferError) as caught:
        apply(mapper(east, west), batch([b"plain-key"], [wire_record(v1, b"")]), "orders",
                                 "a.orders")
    assert str(caught.value).startswith(
        "source orders[0] offset 40: the record's key is not in Confluent's wire format (its "
        "first byte is 112, not 0), so the schema registry transfer 'T' of flow a->b")
    assert "set transfer.message.keys = false" in str(caught.value)
    with pytest.raises(SchemaTransferError, match=r"offset 41: the record's value is not in "
                                                  r"Confluent's wire format \(3 bytes\)"):
        apply(mapper(east, west), batch([None, None], [wire_record(v1, b""), b"\x00\x00\x01"]),
                                 "orders", "a.orders")
    # The target subject holds a schema the source's is not compatible with (BACKWARD).
    dest = SchemaRegistryClient({"url": west.url})
    dest.register_schema("a.orders-value", Schema(json.dumps(
        {**ORDER, "fields": [{"name": "sku", "type": "string"}]}), "AVRO"))
    with pytest.raises(RegistryRefusedError) as refused:
        apply(mapper(east, west), batch([None], [wire_record(v1, b"")]), "orders", "a.orders")
    assert str(refused.value).startswith(
        f"the target schema registry at {west.url} refused the schema of source id {v1} "
        "under subject 'a.orders-value': ")
    assert "(HTTP 409, error 409)" in str(refused.value)
    gone = west.url
    west.stop()
    with pytest.raises(SchemaTransferError) as silent:
        apply(mapper(east, west), batch([None], [wire_record(v1, b"")]), "orders", "b.orders")
    message = str(silent.value)
    assert message.startswith(f"the target schema registry at {gone} does not answer ")
    assert "\n" not in message


def test_user_info_is_a_secret_resolved_by_its_provider_and_never_shown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEST_AUTH", "bob:pw-9f3")
    with LocalRegistry(first_id=1) as east, \
            LocalRegistry(first_id=1000, user_info="bob:pw-9f3") as west:
        v1 = SchemaRegistryClient({"url": east.url}).register_schema(
            "orders-value", Schema(json.dumps(ORDER), "AVRO"))
        providers = ("config.providers = env\nconfig.providers.env.class = "
                     "org.apache.kafka.common.config.provider.EnvVarConfigProvider\n")
        auth = ("a->b.transforms.T.dest.basic.auth.credentials.source = USER_INFO\n"
                "a->b.transforms.T.dest.basic.auth.user.info = ${env:WEST_AUTH}\n")
        config = parse_config(config_text(transfer_lines(east.url, west.url, auth), providers))
        flow = config.flow("a->b")
        m = IdMapper(flow.schema_transfer, flow.name, config.cluster("a"), config.cluster("b"),
                     {}, flow.policy().is_heartbeats_topic)
        out, _ = apply(m, batch([None], [wire_record(v1, b"")]), "orders", "a.orders")
        assert out.column("value")[0].as_py() == wire_record(1000, b"")
        # A wrong password is refused (401), and the message shows none of it.
        monkeypatch.setenv("WEST_AUTH", "bob:wrong-77")
        with pytest.raises(RegistryRefusedError) as refused:
            apply(IdMapper(flow.schema_transfer, flow.name, config.cluster("a"),
                           config.cluster("b"), {}, flow.policy().is_heartbeats_topic),
                  batch([None], [wire_record(v1, b"")]), "orders", "a.orders")
        assert str(refused.value) == (
            f"the target schema registry at {west.url} refused the versions of subject "
            "'a.orders-value': Unauthorized (HTTP 401, error 40101)")
        # Credentials in the URL (credentials source URL) are left out of every message.
        port = west.port
    with pytest.raises(SchemaTransferError) as silent:
        mapper_at = parse_config(config_text(transfer_lines(
            "http://alice:pw-1c2@127.0.0.1:1", f"http://127.0.0.1:{port}"))).flow("a->b")
        apply(IdMapper(mapper_at.schema_transfer, "a->b", config.cluster("a"),
                       config.cluster("b"), {}, lambda topic: False),
              batch([None], [wire_record(v1, b"")]), "orders", "a.orders")
    assert str(silent.value).startswith("the source schema registry at http://127.0.0.1:1 "
                                        "does not answer (schema id 1): ")
    assert "pw-1c2" not in str(silent.value) and "alice" not in str(silent.value)


def test_sasl_inherit_logs_in_to_the_registry_as_the_clusters_sasl_user() -> None:
    """``SASL_INHERIT``: the registry's basic auth is the cluster's SASL login (here from
    a JAAS line, as MM2 files carry it); ``schema.capacity`` sizes the client's cache."""
    with LocalRegistry(first_id=1, user_info="mirror:jaas-pw-5") as east, \
            LocalRegistry(first_id=1000) as west:
        v1 = SchemaRegistryClient({"url": east.url, "basic.auth.user.info": "mirror:jaas-pw-5"}
                                  ).register_schema("orders-value", Schema(json.dumps(ORDER),
                                                                           "AVRO"))
        sasl = ("a.security.protocol = SASL_PLAINTEXT\na.sasl.mechanism = PLAIN\n"
                "a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule "
                'required username="mirror" password="jaas-pw-5";\n')
        config = parse_config(config_text(transfer_lines(
            east.url, west.url, "a->b.transforms.T.src.basic.auth.credentials.source = "
                                "SASL_INHERIT\na->b.transforms.T.schema.capacity = 7\n"), sasl))
        flow = config.flow("a->b")
        m = IdMapper(flow.schema_transfer, flow.name, config.cluster("a"), config.cluster("b"),
                     {}, flow.policy().is_heartbeats_topic)
        assert m.source._conf["cache.capacity"] == 7
        out, _ = apply(m, batch([None], [wire_record(v1, b"")]), "orders", "a.orders")
        assert out.column("value")[0].as_py() == wire_record(1000, b"")
        # Every request carried the cluster's login: a 401 would have failed the mapping.
        assert east.registry.requests[-2:] == [f"GET /schemas/ids/{v1}",
                                               "GET /config/orders-value"]
