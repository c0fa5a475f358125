package dev.mirrorflow.kafka.write;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

class SchemaIdsTest {

    private static final WriteTask TASK = new WriteTask("a->b", "plan-1", "orders", 0, "a.orders", 0, 10, 0,
            true, "requested", 100_000, 0, 0, 0);

    private static ConsumerRecord<byte[], byte[]> record(byte[] key, byte[] value) {
        RecordHeaders headers = new RecordHeaders();
        headers.add("h", "v".getBytes(StandardCharsets.UTF_8));
        return new ConsumerRecord<>("orders", 0, 4, 1L, TimestampType.CREATE_TIME, -1, -1, key, value, headers,
                Optional.empty());
    }

    @Test
    void theIdOfAWireFormatValueIsMappedAndNothingElseChanges() {
        SchemaIds ids = SchemaIds.parse("{\"a.orders\": {\"value\": {\"7\": 1001}}}", false);
        byte[] value = {0, 0, 0, 0, 7, 42, 43};
        ConsumerRecord<byte[], byte[]> r = record(new byte[] {0, 0, 0, 0, 7}, value);
        assertSame(value, ids.value(TASK, r));  // in place: no copy of each record
        assertArrayEquals(new byte[] {0, 0, 0, 3, (byte) 0xe9, 42, 43}, value);
        assertArrayEquals(new byte[] {0, 0, 0, 0, 7}, ids.key(TASK, r));  // keys not transferred
        assertSame(r.headers(), ids.headers(r));
    }

    @Test
    void recordsOutsideTheTableAreWrittenAsTheyAre() {
        SchemaIds ids = SchemaIds.parse("{\"a.orders\": {\"value\": {\"7\": 1001}}}", true);
        byte[] plain = "text".getBytes(StandardCharsets.UTF_8);
        assertSame(plain, ids.key(TASK, record(plain, null)));  // keys not transferred
        assertNull(ids.value(TASK, record(null, null)));  // a tombstone
        assertNull(ids.headers(record(null, plain)));  // include.message.headers = false
        WriteTask heartbeats = new WriteTask("a->b", "plan-1", "heartbeats", 0, "a.heartbeats", 0, 10, 0, true,
                "requested", 100_000, 0, 0, 0);
        byte[] wire = {0, 0, 0, 0, 7};
        assertSame(wire, ids.value(heartbeats, record(null, wire)));
        assertSame(wire, SchemaIds.NONE.value(TASK, record(null, wire)));
    }

    @Test
    void theProofMapsWhatTheTableHasAndLeavesTheRestAsItIs() {
        SchemaIds back = SchemaIds.parse("{\"a.orders\": {\"value\": {\"1001\": 7}}}", false);
        byte[] mapped = new byte[] {0, 0, 0, 3, (byte) 0xe9, 42};  // id 1001
        assertSame(mapped, back.mapped("a.orders", "value", mapped));  // in place
        assertArrayEquals(new byte[] {0, 0, 0, 0, 7, 42}, mapped);
        byte[] unknown = new byte[] {0, 0, 0, 0, 9, 42};
        assertSame(unknown, back.mapped("a.orders", "value", unknown));
        assertSame(mapped, back.mapped("a.orders", "key", mapped));
        assertSame(mapped, back.mapped("b.orders", "value", mapped));
        assertNull(back.mapped("a.orders", "value", null));
    }

    @Test
    void anIdTheTableLacksOrAPartNotInTheWireFormatIsRefusedNamingTheRecord() {
        SchemaIds ids = SchemaIds.parse("{\"a.orders\": {\"value\": {\"7\": 1001}}}", false);
        WriteException unknown = assertThrows(WriteException.class,
                () -> ids.value(TASK, record(null, new byte[] {0, 0, 0, 0, 8})));
        assertEquals("source orders[0] offset 4: schema id 8 of its value is not mapped for the schema registry "
                + "transfer; nothing from it on is written", unknown.getMessage());
        WriteException plain = assertThrows(WriteException.class,
                () -> ids.value(TASK, record(null, "text".getBytes(StandardCharsets.UTF_8))));
        assertEquals("source orders[0] offset 4: its value is not in Confluent's wire format, not mapped for the "
                + "schema registry transfer; nothing from it on is written", plain.getMessage());
        // An empty table for a part: every id of it is unknown (a topic with no stored mapping).
        SchemaIds none = SchemaIds.parse("{\"a.orders\": {\"value\": {}}}", false);
        assertThrows(WriteException.class, () -> none.value(TASK, record(null, new byte[] {0, 0, 0, 0, 7})));
    }
}
