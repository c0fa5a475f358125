package dev.mirrorflow.kafka.write;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

class RecordSizeTest {

    /** The sizes Python's {@code record_size.batch_size} gives for the same records (computed once). */
    @Test
    void batchSizesAsThePythonWriterMeasuresThem() {
        assertEquals(68, RecordSize.batchSize(null, null, null));
        assertEquals(70, RecordSize.batchSize(bytes("k"), bytes("v"), null));
        assertEquals(50082, RecordSize.batchSize(new byte[10], new byte[50_000], null));
        assertEquals(384, RecordSize.batchSize(bytes("key"), new byte[300], new Header[] {
            new RecordHeader("h", bytes("1")), new RecordHeader("\u00e9t\u00e9", null)}));
        assertEquals(20072, RecordSize.batchSize(null, new byte[20_000], new Header[0]));
    }

    @Test
    void zigzagVarints() {
        assertEquals(1, RecordSize.varintSize(0));
        assertEquals(1, RecordSize.varintSize(-1));
        assertEquals(1, RecordSize.varintSize(63));
        assertEquals(2, RecordSize.varintSize(64));
        assertEquals(3, RecordSize.varintSize(50_000));
        assertEquals(5, RecordSize.varintSize(Integer.MAX_VALUE));
        assertEquals(5, RecordSize.varintSize(Integer.MIN_VALUE));
    }

    @Test
    void aRecordLargerThanItsTopicsLimitIsNamed() {
        WriteTask task = new WriteTask("a->b", "p", "orders", 0, "a.orders", 0, 100, 20_000, true, "requested",
                100, 0, 0, 0);
        ConsumerRecord<byte[], byte[]> record = new ConsumerRecord<>("orders", 0, 17, 1L, TimestampType.CREATE_TIME,
                10, 50_000, new byte[10], new byte[50_000], new RecordHeaders(), Optional.empty());
        WriteException e = assertThrows(WriteException.class, () -> RecordSize.check(task, record, "'b'"));
        assertEquals("cannot write orders[0] offset 17 to a.orders: the record is 50082 bytes as a record batch, "
                + "larger than a.orders's max.message.bytes = 20000 on cluster 'b'; raise it there (config sync "
                + "copies the source topic's), then rerun", e.getMessage());
        ConsumerRecord<byte[], byte[]> fits = new ConsumerRecord<>("orders", 0, 18, 1L, TimestampType.CREATE_TIME,
                0, 19_000, null, new byte[19_000], new RecordHeaders(), Optional.empty());
        assertDoesNotThrow(() -> RecordSize.check(task, fits, "'b'"));
    }

    private static byte[] bytes(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }
}
