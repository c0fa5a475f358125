package dev.mirrorflow.kafka.write;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import org.junit.jupiter.api.Test;

class WireIdsTest {

    private static byte[] wire(int id, int more) {
        byte[] data = new byte[5 + more];
        java.nio.ByteBuffer.wrap(data, 1, 4).putInt(id);
        return data;
    }

    @Test
    void idsInAscendingOrderAsUnsignedNumbersAndTheFirstRecordOutsideTheFormat() {
        WireIds ids = new WireIds();
        ids.add(10, wire(7, 3));
        ids.add(11, wire(3, 0));
        ids.add(12, wire(7, 1));
        ids.add(13, null);  // a tombstone, or no key: neither
        ids.add(14, new byte[] {0, 1, 2});  // too short
        ids.add(15, new byte[] {9, 0, 0, 0, 1, 2});  // a later one is not the first
        ids.add(16, wire(-1, 0));  // 0xFFFFFFFF, as Spark SQL's conv(hex(...)) reads it
        assertArrayEquals(new long[] {3, 7, 4_294_967_295L}, ids.ids());
        assertEquals(14L, ids.refusedOffset());
        assertEquals(3, ids.refusedLength());
        assertEquals(0, ids.refusedFirst());
    }

    @Test
    void anEmptyPartOrNoneOutsideTheFormat() {
        WireIds clean = new WireIds();
        clean.add(0, wire(1, 0));
        assertNull(clean.refusedOffset());
        assertNull(clean.refusedLength());
        assertNull(clean.refusedFirst());
        WireIds empty = new WireIds();
        empty.add(5, new byte[0]);
        empty.add(6, new byte[] {4, 0, 0, 0, 0});
        assertEquals(5L, empty.refusedOffset());
        assertEquals(0, empty.refusedLength());
        assertNull(empty.refusedFirst());
    }
}
