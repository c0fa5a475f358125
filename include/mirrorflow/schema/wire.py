"""Confluent's wire format: byte 0 is 0 (the magic byte), bytes 1-4 the schema id (big
endian), then the serialized data. The transfer rewrites bytes 1-4 and nothing else,
alike in Arrow (the writer, :func:`rewrite`) and in Spark SQL (the proof,
:func:`rewrite_sql`), without a loop over records in Python."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

HEADER = 5  # magic byte and schema id


def _layout(column):
    """(value offsets of each record and the one after, the data bytes, validity mask)."""
    import pyarrow as pa

    wide = pa.types.is_large_binary(column.type)
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)[
        column.offset:column.offset + len(column) + 1].astype(np.int64)
    data = (np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None
            else np.zeros(0, dtype=np.uint8))
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return offsets, data, valid


def schema_ids(column) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per record of an Arrow binary column: its schema id (0 where none), whether it is
    in the wire format, whether it is null."""
    offsets, data, valid = _layout(column)
    starts = offsets[:-1]
    long_enough = valid & (np.diff(offsets) >= HEADER)
    at = starts[long_enough]
    wire = long_enough.copy()
    wire[long_enough] = data[at] == 0
    ids = np.zeros(len(column), dtype=np.int64)
    at = starts[wire]
    for k in range(4):
        ids[wire] = (ids[wire] << 8) | data[at + 1 + k].astype(np.int64)
    return ids, wire, ~valid


def rewrite(column, new_ids: np.ndarray, wire: np.ndarray):
    """The column with bytes 1-4 of each ``wire`` record set to its ``new_ids`` entry;
    every other byte, and nulls, as they were."""
    import pyarrow as pa

    if not wire.any():
        return column
    offsets, data, valid = _layout(column)
    base = offsets[0]
    out = data[base:offsets[-1]].copy()
    at = offsets[:-1][wire] - base
    ids = new_ids[wire].astype(np.int64)
    for k in range(4):
        out[at + 1 + k] = (ids >> (24 - 8 * k)) & 0xFF
    kind = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    validity = None if valid.all() else pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(column.type, len(column),
                                 [validity, pa.py_buffer((offsets - base).astype(kind)),
                                  pa.py_buffer(out)], null_count=int((~valid).sum()))


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
