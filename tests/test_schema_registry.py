"""The stand-in schema registry (mirrorflow.dev.schema_registry) through the client users
have, confluent-kafka's SchemaRegistryClient and Avro serializers: what the schema
transfer and a consumer on either side ask of a registry, with Confluent's answers."""

from __future__ import annotations

import json
import struct

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from mirrorflow.dev.schema_registry import LocalRegistry

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
# A field with a default: BACKWARD compatible with v1.
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"],
                                   {"name": "qty", "type": "int", "default": 1}]}
# A new field without one: a v3 reader cannot read v2's records.
ORDER_V3 = {**ORDER_V1, "fields": [*ORDER_V2["fields"], {"name": "note", "type": "string"}]}


@pytest.fixture
def registries():
    """Two registries handing out different ids: east's from 1, west's from 1000."""
    with LocalRegistry(first_id=1) as east, LocalRegistry(first_id=1000) as west:
        yield east, west


def client(registry: LocalRegistry) -> SchemaRegistryClient:
    """A client of its own (the client caches what it registered and fetched)."""
    return SchemaRegistryClient({"url": registry.url})


def avro(schema: dict) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def error_of(call) -> tuple[int, int, str]:
    with pytest.raises(SchemaRegistryError) as caught:
        call()
    return caught.value.http_status_code, caught.value.error_code, caught.value.error_message


def test_ids_versions_and_lookups_as_confluents_registry_answers(registries) -> None:
    east, west = (client(r) for r in registries)
    context = SerializationContext("orders", MessageField.VALUE)
    first = AvroSerializer(east, json.dumps(ORDER_V1))({"id": 1, "item": "pen"}, context)
    second = AvroSerializer(east, json.dumps(ORDER_V2))({"id": 2, "item": "ink", "qty": 3},
                                                        context)
    # Confluent's wire format: magic byte 0, the schema id (big-endian int32), the body.
    assert (first[0], struct.unpack(">I", first[1:5])[0]) == (0, 1)
    assert struct.unpack(">I", second[1:5])[0] == 2
    assert json.loads(east.get_schema(2).schema_str) == ORDER_V2
    assert east.get_versions("orders-value") == [1, 2]
    latest = east.get_latest_version("orders-value")
    assert (latest.schema_id, latest.version, latest.subject) == (2, 2, "orders-value")
    assert east.get_version("orders-value", 1).schema_id == 1
    assert east.lookup_schema("orders-value", avro(ORDER_V1)).version == 1
    assert east.get_subjects() == ["orders-value"]

    # Registered again on the other side: its own ids; the same schema keeps its id under
    # its subject and gets the same one under another.
    assert west.register_schema("east.orders-value", avro(ORDER_V1)) == 1000
    assert west.register_schema("east.orders-value", avro(ORDER_V2)) == 1001
    fresh = client(registries[1])
    assert fresh.register_schema("east.orders-value", avro(ORDER_V1)) == 1000
    assert fresh.register_schema("other-value", avro(ORDER_V2)) == 1001
    # A record whose id is rewritten decodes with the other side's registry.
    moved = second[:1] + struct.pack(">I", 1001) + second[5:]
    decoded = AvroDeserializer(fresh)(moved, SerializationContext("east.orders",
                                                                  MessageField.VALUE))
    assert decoded == {"id": 2, "item": "ink", "qty": 3}

    # Compatibility levels, global and per subject.
    assert east.get_compatibility() == "BACKWARD"
    assert east.set_compatibility("orders-value", "full") == {"compatibility": "FULL"}
    assert east.get_compatibility("orders-value") == "FULL"


def test_refusals_carry_confluents_status_and_error_codes(registries) -> None:
    east = client(registries[0])
    east.register_schema("orders-value", avro(ORDER_V2))
    assert error_of(lambda: east.get_schema(999)) == (404, 40403, "Schema 999 not found")
    assert error_of(lambda: east.get_versions("nothing-value")) == (
        404, 40401, "Subject 'nothing-value' not found.")
    assert error_of(lambda: east.get_version("orders-value", 7)) == (
        404, 40402, "Version 7 not found.")
    assert error_of(lambda: east.get_version("orders-value", "first")) == (
        422, 42202, "The specified version 'first' is not a valid version id.")
    assert error_of(lambda: east.lookup_schema("orders-value", avro(ORDER_V1))) == (
        404, 40403, "Schema not found")
    assert error_of(lambda: east.register_schema("orders-value", avro(ORDER_V3))) == (
        409, 409, 'Schema being registered is incompatible with an earlier schema for '
                  'subject "orders-value"')
    bad = {**ORDER_V2, "fields": [{"name": "id", "type": "lnog"}]}
    assert error_of(lambda: east.register_schema("orders-value", avro(bad))) == (
        422, 42201, "Invalid schema: shop.lnog")
    assert error_of(lambda: east.get_compatibility("orders-value")) == (
        404, 40408, "Subject 'orders-value' does not have subject-level compatibility "
                    "configured")
    assert error_of(lambda: east.set_compatibility("orders-value", "SOMETIMES")) == (
        422, 42203, "Invalid compatibility level 'SOMETIMES'")
    # NONE lets the incompatible schema in, as a new version with a new id.
    east.set_compatibility("orders-value", "NONE")
    assert east.register_schema("orders-value", avro(ORDER_V3)) == 2
    assert east.get_versions("orders-value") == [1, 2]
