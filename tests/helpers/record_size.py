"""A record's size as the target broker measures it against a topic's ``max.message.bytes``
(the JVM writer's ``RecordSize`` checks it; the tests build records of exact sizes with it).

The broker refuses a record *batch* larger than the topic's ``max.message.bytes``
(Kafka's ``UnifiedLog`` checks ``RecordBatch.sizeInBytes()``), not a record. A record
written alone in its batch takes the batch's fixed 61 bytes
(``DefaultRecordBatch.RECORD_BATCH_OVERHEAD``) and its own encoding
(``DefaultRecord.writeTo``: zigzag varints for the lengths, the offset and timestamp
deltas, 0 for the first record of a batch). The writer keeps batches of several records
below the smallest limit of its slot's topics, so a record fits exactly when this size is
at most its own topic's limit; compression only makes a batch smaller (librdkafka sends a
batch uncompressed where compressing it would not)."""

from __future__ import annotations

BATCH_OVERHEAD = 61  # DefaultRecordBatch.RECORD_BATCH_OVERHEAD
# Attributes, timestamp delta, offset delta (one byte each for a batch's first record).
_RECORD_FIXED = 3


def varint_size(value: int) -> int:
    """Bytes of Kafka's zigzag varint of a 32-bit ``value`` (ByteUtils.sizeOfVarint)."""
    zigzag = (value << 1) ^ (value >> 31)
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def _bytes_size(data: bytes | None) -> int:
    return varint_size(-1) if data is None else varint_size(len(data)) + len(data)


def batch_size(key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes | None]] | None) -> int:
    """The size of a record batch holding only this record, uncompressed."""
    body = _RECORD_FIXED + _bytes_size(key) + _bytes_size(value)
    body += varint_size(len(headers or []))
    for name, data in headers or []:
        body += _bytes_size(name.encode()) + _bytes_size(data)
    return BATCH_OVERHEAD + varint_size(body) + body
