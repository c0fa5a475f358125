"""MM2 record layouts, checked against bytes built by hand from MM2's schemas."""

from __future__ import annotations

import struct

import pytest

from mirrorflow.kafka.records import Checkpoint, Heartbeat, OffsetSync, RecordFormatError


def s(text: str) -> bytes:  # Kafka protocol STRING: INT16 length + UTF-8
    return struct.pack(">h", len(text.encode())) + text.encode()


def test_offset_sync_layout() -> None:
    sync = OffsetSync("orders", 3, 1234, 567)
    assert sync.key() == b"\x00\x06orders" + b"\x00\x00\x00\x03"
    assert sync.value() == struct.pack(">q", 1234) + struct.pack(">q", 567)
    assert OffsetSync.decode(sync.key(), sync.value()) == sync


def test_checkpoint_layout() -> None:
    cp = Checkpoint("app-group", "a.orders", 1, 100, 90, "meta")
    assert cp.key() == s("app-group") + s("a.orders") + b"\x00\x00\x00\x01"
    assert cp.value() == b"\x00\x00" + struct.pack(">qq", 100, 90) + s("meta")
    assert Checkpoint.decode(cp.key(), cp.value()) == cp


def test_heartbeat_layout() -> None:
    hb = Heartbeat("us-west", "us-east", 1_700_000_000_123)
    assert hb.key() == s("us-west") + s("us-east")
    assert hb.value() == b"\x00\x00" + struct.pack(">q", 1_700_000_000_123)
    assert Heartbeat.decode(hb.key(), hb.value()) == hb


def test_utf8_names_round_trip() -> None:
    cp = Checkpoint("gruppe-ü", "a.订单", 0, 1, 1, "")
    assert Checkpoint.decode(cp.key(), cp.value()) == cp


@pytest.mark.parametrize("decode,key,value", [
    (OffsetSync.decode, b"\x00\x06ord", b""),
    (OffsetSync.decode, OffsetSync("t", 0, 1, 1).key(), b"\x00" * 15),
    (OffsetSync.decode, OffsetSync("t", 0, 1, 1).key() + b"x", OffsetSync("t", 0, 1, 1).value()),
    (Checkpoint.decode, Checkpoint("g", "t", 0, 1, 1).key(),
     b"\x00\x01" + Checkpoint("g", "t", 0, 1, 1).value()[2:]),
    (Heartbeat.decode, b"\xff\xff", b""),
])
def test_malformed_records_raise_format_error(decode, key, value) -> None:
    with pytest.raises(RecordFormatError):
        decode(key, value)
