package dev.mirrorflow.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.junit.jupiter.api.Test;

/** Rows checked field by field, as Spark's Kafka source fills them. */
class KafkaRecordRowsTest {

    private static ConsumerRecord<byte[], byte[]> record(byte[] key, byte[] value, long timestamp, TimestampType type,
                                                         RecordHeaders headers) {
        return new ConsumerRecord<>("orders", 7, 42L, timestamp, type, -1, -1, key, value, headers, Optional.empty());
    }

    @Test
    void theSchemaIsSparksKafkaSchemaWithHeaders() {
        String[] names = {"key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"};
        Object[] types = {DataTypes.BinaryType, DataTypes.BinaryType, DataTypes.StringType, DataTypes.IntegerType,
            DataTypes.LongType, DataTypes.TimestampType, DataTypes.IntegerType,
            DataTypes.createArrayType(DataTypes.createStructType(new StructField[] {
                DataTypes.createStructField("key", DataTypes.StringType, true),
                DataTypes.createStructField("value", DataTypes.BinaryType, true)}), true)};
        StructField[] fields = KafkaRecordRows.SCHEMA.fields();
        assertEquals(names.length, fields.length);
        for (int i = 0; i < fields.length; i++) {
            assertEquals(names[i], fields[i].name());
            assertEquals(types[i], fields[i].dataType());
            assertTrue(fields[i].nullable(), names[i]);
        }
        assertTrue(((ArrayType) fields[7].dataType()).containsNull());
    }

    @Test
    void aRecordWithNullKeyAndValueAndNoHeaders() {
        InternalRow row = new KafkaRecordRows().toRow(record(null, null, 1_700_000_000_123L,
                TimestampType.CREATE_TIME, new RecordHeaders()));

        assertEquals(8, row.numFields());
        assertTrue(row.isNullAt(0));
        assertTrue(row.isNullAt(1));
        assertEquals("orders", row.getUTF8String(2).toString());
        assertEquals(7, row.getInt(3));
        assertEquals(42L, row.getLong(4));
        assertEquals(1_700_000_000_123_000L, row.getLong(5));
        assertEquals(0, row.getInt(6));
        assertTrue(row.isNullAt(7), "no headers must be null, as in Spark's Kafka source");
    }

    @Test
    void aRecordWithHeadersOneOfThemWithoutValue() {
        RecordHeaders headers = new RecordHeaders();
        headers.add(new RecordHeader("trace", new byte[] {1, 2}));
        headers.add(new RecordHeader("empty", null));
        headers.add(new RecordHeader("trace", new byte[] {3}));
        InternalRow row = new KafkaRecordRows().toRow(record(new byte[] {9}, new byte[] {8, 7}, 5L,
                TimestampType.LOG_APPEND_TIME, headers));

        assertArrayEquals(new byte[] {9}, row.getBinary(0));
        assertArrayEquals(new byte[] {8, 7}, row.getBinary(1));
        assertEquals(5_000L, row.getLong(5));
        assertEquals(1, row.getInt(6));
        assertFalse(row.isNullAt(7));
        ArrayData array = row.getArray(7);
        assertEquals(3, array.numElements());
        assertEquals("trace", array.getStruct(0, 2).getUTF8String(0).toString());
        assertArrayEquals(new byte[] {1, 2}, array.getStruct(0, 2).getBinary(1));
        assertEquals("empty", array.getStruct(1, 2).getUTF8String(0).toString());
        assertTrue(array.getStruct(1, 2).isNullAt(1));
        assertEquals("trace", array.getStruct(2, 2).getUTF8String(0).toString());
        assertArrayEquals(new byte[] {3}, array.getStruct(2, 2).getBinary(1));
    }

    @Test
    void aRecordWithoutTimestamp() {
        InternalRow row = new KafkaRecordRows().toRow(record(null, new byte[0], -1L,
                TimestampType.NO_TIMESTAMP_TYPE, new RecordHeaders()));

        assertEquals(-1_000L, row.getLong(5));
        assertEquals(-1, row.getInt(6));
        assertArrayEquals(new byte[0], row.getBinary(1));
    }

    @Test
    void rowsOfSeveralTopicsKeepTheirOwnTopic() {
        KafkaRecordRows rows = new KafkaRecordRows();
        InternalRow a = rows.toRow(new ConsumerRecord<>("a", 0, 0L, null, null));
        InternalRow b = rows.toRow(new ConsumerRecord<>("b", 0, 0L, null, null));
        InternalRow a2 = rows.toRow(new ConsumerRecord<>("a", 1, 0L, null, null));

        assertEquals("a", a.getUTF8String(2).toString());
        assertEquals("b", b.getUTF8String(2).toString());
        assertEquals("a", a2.getUTF8String(2).toString());
    }
}
