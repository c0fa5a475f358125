"""The bench's schema registry transfer (issue 35): the cost of rewriting schema ids on a
backlog, on the same brokers and warm Spark Connect server as the rest of the bench.

A topic of Avro values in Confluent's wire format (``--records`` of about ``--size``
bytes over ``--partitions``, four schema versions registered in a source registry, plain
keys) is mirrored by flows of their own, with the transfer (ids rewritten, a target
registry, the proof comparing with ids mapped back and checking each mapping in both
registries) and without, alternately: one untimed pair, then :data:`PAIRS` timed pairs,
whose medians are compared (one pair's figures moved by tens of percent between
sittings). Each flow first mirrors one record of each partition, untimed (a partition's
records carry one schema version, so the transferred flows have then mapped all four), and
the timed run mirrors the rest, as a flow's runs do once it has met its schemas; a flow's
first run scans its ranges for their ids (docs/schemas.md), and
``schema_transfer_first_run_overhead_pct`` compares the first runs of one pair, each
over the whole backlog.
Both registries are :mod:`mirrorflow.dev.schema_registry` stand-ins served from this
process.
"""

from __future__ import annotations

import io
import json
import statistics
import sys
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from fastavro import parse_schema, schemaless_writer

from mirrorflow.dev.schema_registry import LocalRegistry
from mirrorflow.run import run_cycle

SMT = "cricket.jmoore.kafka.connect.transforms.SchemaRegistryTransfer"
VERSIONS = 4
PAIRS = 3


def avro_values(registry: LocalRegistry, size: int) -> list[bytes]:
    """One wire-format value per schema version (each version adds a field with a
    default, so each is BACKWARD compatible with the one before)."""
    client = SchemaRegistryClient({"url": registry.url})
    out = []
    for version in range(VERSIONS):
        schema = {"type": "record", "name": "Order", "namespace": "bench", "fields": [
            {"name": "id", "type": "long"}, {"name": "note", "type": "string"},
            *[{"name": f"extra{i}", "type": "int", "default": 0} for i in range(version)]]}
        schema_id = client.register_schema("avro-value", Schema(json.dumps(schema), "AVRO"))
        body = io.BytesIO()
        schemaless_writer(body, parse_schema(schema),
                          {"id": version, "note": "x" * max(size - 16, 1),
                           **{f"extra{i}": i for i in range(version)}})
        out.append(b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue())
    return out


def fill(bootstrap: str, values: list[bytes], records: int, partitions: int,
         producer_settings: dict) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **producer_settings})
    for i in range(records):
        while True:
            try:
                producer.produce("avro", values[i % len(values)], str(i).encode(),
                                 partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(300) == 0


def measure(tmp: Path, brokers: dict[str, str], server, write_config, timed_run,
            create, records: int, size: int, partitions: int,
            producer_settings: dict) -> dict:
    with LocalRegistry(first_id=1) as east, LocalRegistry(first_id=1000) as west:
        create(brokers["src"], "avro", partitions)
        fill(brokers["src"], avro_values(east, size), records, partitions, producer_settings)
        transfer = "\n".join([
            "{alias}->dst.transforms = T", f"{{alias}}->dst.transforms.T.type = {SMT}",
            f"{{alias}}->dst.transforms.T.src.schema.registry.url = {east.url}",
            f"{{alias}}->dst.transforms.T.dest.schema.registry.url = {west.url}",
            "{alias}->dst.transforms.T.transfer.message.keys = false"])
        seconds: dict[str, list[float]] = {"plain": [], "schemas": []}
        first: dict[str, float] = {}
        for pair in range(PAIRS + 2):
            for kind in ("plain", "schemas"):
                alias = f"{kind}{pair}"
                extra = transfer.format(alias=alias) if kind == "schemas" else ""
                config = write_config(tmp / f"{alias}.properties", brokers, alias, "avro", extra)
                whole = pair == PAIRS + 1  # the first runs, over the whole backlog
                if not whole:
                    run_cycle(config, f"{alias}->dst", master=server.url, max_records=1)
                result, elapsed = timed_run(config, f"{alias}->dst", server.url)
                expected = records if whole else records - partitions
                assert result.records == expected, result.records
                assert result.validation["verified_records"] == expected
                if kind == "schemas":
                    mapped = result.validation["schemas"]
                    assert len(mapped) == VERSIONS and all(m["target_id"] >= 1000 for m in mapped)
                if whole:
                    first[kind] = elapsed
                elif pair:
                    seconds[kind].append(elapsed)
    with_s, without_s = (statistics.median(seconds[k]) for k in ("schemas", "plain"))
    overhead = with_s / without_s - 1
    pairs = [round((w / p - 1) * 100, 1)
             for w, p in zip(seconds["schemas"], seconds["plain"], strict=True)]
    print(f"  schema transfer: {with_s:.2f}s with, {without_s:.2f}s without, medians of "
          f"{PAIRS} pairs ({overhead:+.1%}; pairs {pairs})", file=sys.stderr, flush=True)
    return {"schema_transfer_s": round(with_s, 2),
            "schema_transfer_plain_s": round(without_s, 2),
            "schema_transfer_overhead_pct": round(overhead * 100, 1),
            "schema_transfer_pairs_overhead_pct": pairs,
            "schema_transfer_first_run_overhead_pct": round(
                (first["schemas"] / first["plain"] - 1) * 100, 1),
            "schema_transfer_schema_ids": VERSIONS}
