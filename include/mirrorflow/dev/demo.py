"""The demo: local clusters from the config, a demo topic filled with records."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from mirrorflow.config.model import MirrorConfig
from mirrorflow.config.transforms import SchemaTransfer
from mirrorflow.kafka import clients


@dataclass(frozen=True)
class DemoTopic:
    cluster: str
    topic: str
    partitions: int
    records: int


ORDER_SCHEMA = {"type": "record", "name": "Order", "namespace": "demo", "fields": [
    {"name": "order", "type": "long"}, {"name": "amount", "type": "double"}]}


def fill_demo_topic(config: MirrorConfig, topic: str, partitions: int, records: int) -> DemoTopic:
    """Create ``topic`` on the source of the first enabled flow and produce ``records``.

    Records carry a key, a value, a header and an explicit timestamp, so every field a
    mirror must preserve is exercised. Values are JSON, or Avro in Confluent's wire format
    (keys too, when the transfer moves key schemas) where the flow has a schema transfer:
    their schemas are registered in its source registry.
    """
    flows = config.enabled_flows()
    if not flows:
        raise ValueError("the config enables no flow; set SOURCE->TARGET.enabled = true")
    cluster = config.cluster(flows[0].source)
    encode = _encoder(flows[0].schema_transfer, topic)
    clients.ensure_topic(cluster, topic, partitions)
    producer = clients.producer(cluster, **{"linger.ms": 20})
    now_ms = int(time.time() * 1000)
    for i in range(records):
        key, value = encode(f"order-{i}", {"order": i, "amount": round(i * 1.5, 2)})
        producer.produce(topic, key=key, value=value,
                         headers=[("source", b"mirrorflow-demo")], timestamp=now_ms + i)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(30)
    if remaining:
        raise RuntimeError(f"{remaining} demo records were not acknowledged by {cluster.alias}")
    return DemoTopic(cluster.alias, topic, partitions, records)


def _encoder(transfer: SchemaTransfer | None, topic: str):
    """(key, value) -> their bytes: JSON, or Avro through the transfer's source registry."""
    if transfer is None:
        return lambda key, value: (key.encode(), json.dumps(value).encode())
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = SchemaRegistryClient({"url": transfer.source.url})
    values = AvroSerializer(registry, json.dumps(ORDER_SCHEMA))
    keys = AvroSerializer(registry, '"string"') if transfer.transfer_keys else None
    key_ctx = SerializationContext(topic, MessageField.KEY)
    value_ctx = SerializationContext(topic, MessageField.VALUE)
    return lambda key, value: (keys(key, key_ctx) if keys else key.encode(),
                               values(value, value_ctx))
