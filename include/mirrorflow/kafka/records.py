"""MM2's internal record formats, byte for byte.

MirrorMaker 2 serialises its internal records with Kafka's protocol ``Schema`` types
(``org.apache.kafka.common.protocol.types``): STRING is an INT16 length and UTF-8 bytes,
INT16/INT32/INT64 are big-endian. The layouts, from ``OffsetSync``, ``Checkpoint`` and
``Heartbeat`` in Apache Kafka's ``connect/mirror`` and ``connect/mirror-client``:

===========  ==============================================  ================================
record       key                                             value
===========  ==============================================  ================================
OffsetSync   topic STRING, partition INT32                   upstreamOffset INT64, offset INT64
Checkpoint   group STRING, topic STRING, partition INT32     version INT16 (0), upstreamOffset
                                                             INT64, offset INT64, metadata
                                                             STRING
Heartbeat    sourceClusterAlias STRING,                      version INT16 (0), timestamp INT64
             targetClusterAlias STRING
===========  ==============================================  ================================

So MM2's own formatters (``OffsetSyncFormatter``, ``CheckpointFormatter``,
``HeartbeatFormatter``, KIP-597) read what mirrorflow writes, and the other way round.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mirrorflow.errors import MirrorflowError

VERSION = 0


class RecordFormatError(MirrorflowError):
    """Bytes that are not an MM2 record of the expected kind."""


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise RecordFormatError(f"record too short: {len(self.data)} bytes")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        length = self.take(">h")
        if length < 0 or self.pos + length > len(self.data):
            raise RecordFormatError(f"bad string length {length}")
        text = self.data[self.pos:self.pos + length].decode("utf-8")
        self.pos += length
        return text

    def done(self) -> None:
        if self.pos != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.pos} unexpected trailing bytes")


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def _version(reader: _Reader) -> None:
    version = reader.take(">h")
    if version != VERSION:
        raise RecordFormatError(f"unsupported record version {version}")


@dataclass(frozen=True)
class OffsetSync:
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">qq", self.upstream_offset, self.downstream_offset)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        k, v = _Reader(key), _Reader(value)
        sync = cls(k.string(), k.take(">i"), v.take(">q"), v.take(">q"))
        k.done()
        v.done()
        return sync


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return (struct.pack(">hqq", VERSION, self.upstream_offset, self.downstream_offset)
                + _string(self.metadata))

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        k, v = _Reader(key), _Reader(value)
        group, topic, partition = k.string(), k.string(), k.take(">i")
        _version(v)
        checkpoint = cls(group, topic, partition, v.take(">q"), v.take(">q"), v.string())
        k.done()
        v.done()
        return checkpoint


@dataclass(frozen=True)
class Heartbeat:
    source_cluster_alias: str
    target_cluster_alias: str
    timestamp: int

    def key(self) -> bytes:
        return _string(self.source_cluster_alias) + _string(self.target_cluster_alias)

    def value(self) -> bytes:
        return struct.pack(">hq", VERSION, self.timestamp)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        k, v = _Reader(key), _Reader(value)
        source, target = k.string(), k.string()
        _version(v)
        heartbeat = cls(source, target, v.take(">q"))
        k.done()
        v.done()
        return heartbeat
