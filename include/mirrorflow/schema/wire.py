"""Confluent's wire format: byte 0 is 0 (the magic byte), bytes 1-4 the schema id (big
endian), then the serialized data. The transfer rewrites bytes 1-4 and nothing else, in
the JVM writers (``dev.mirrorflow.kafka.write.SchemaIds``) and in Spark SQL for the proof
(:func:`rewrite_sql`)."""

from __future__ import annotations

from collections.abc import Mapping

HEADER = 5  # magic byte and schema id


def rewrite_sql(F, column: str, topic_column: str, mapping: Mapping[tuple[str, int], int]):
    """Spark SQL: ``column`` with the schema id of each wire-format record of a topic
    replaced by ``mapping[(topic, id)]`` where the mapping has one; else as it is."""
    col = F.col(column)
    if not mapping:
        return col
    table = F.create_map(*[F.lit(x) for (topic, old), new in sorted(mapping.items())
                           for x in (f"{topic}\x00{old}", new)])
    old_id = F.conv(F.hex(F.substring(col, 2, 4)), 16, 10)
    new_id = table[F.concat(F.col(topic_column), F.lit("\x00"), old_id)]
    wire = (F.length(col) >= HEADER) & (F.substring(col, 1, 1) == F.lit(bytearray(1)))
    rewritten = F.concat(F.lit(bytearray(1)), F.unhex(F.lpad(F.hex(new_id), 8, "0")),
                         F.substring(col, HEADER + 1, 2**31 - 1))
    return F.when(wire & new_id.isNotNull(), rewritten).otherwise(col)
