"""The demo: local clusters from the config, a demo topic filled with records."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from mirrorflow.config.model import MirrorConfig
from mirrorflow.kafka import clients


@dataclass(frozen=True)
class DemoTopic:
    cluster: str
    topic: str
    partitions: int
    records: int


def fill_demo_topic(config: MirrorConfig, topic: str, partitions: int, records: int) -> DemoTopic:
    """Create ``topic`` on the source of the first enabled flow and produce ``records``.

    Records carry a key, a JSON value, a header and an explicit timestamp, so every field
    a mirror must preserve is exercised.
    """
    flows = config.enabled_flows()
    if not flows:
        raise ValueError("the config enables no flow; set SOURCE->TARGET.enabled = true")
    cluster = config.cluster(flows[0].source)
    clients.ensure_topic(cluster, topic, partitions)
    producer = clients.producer(cluster, **{"linger.ms": 20})
    now_ms = int(time.time() * 1000)
    for i in range(records):
        value = json.dumps({"order": i, "amount": round(i * 1.5, 2)}).encode()
        producer.produce(topic, key=f"order-{i}".encode(), value=value,
                         headers=[("source", b"mirrorflow-demo")], timestamp=now_ms + i)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(30)
    if remaining:
        raise RuntimeError(f"{remaining} demo records were not acknowledged by {cluster.alias}")
    return DemoTopic(cluster.alias, topic, partitions, records)
