package dev.mirrorflow.spark;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Kafka records as Spark rows, in exactly the schema of Spark's own Kafka source with
 * headers ({@code includeHeaders=true}), so that code written against one reads the other:
 * {@code key binary, value binary, topic string, partition int, offset long,
 * timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>},
 * every field and header nullable.
 *
 * <p>Values are as Spark's KafkaRecordToRowConverter makes them: a null key or value stays
 * null, the timestamp is in microseconds (Spark's {@code TimestampType}), the timestamp type
 * is Kafka's id (-1 none, 0 create time, 1 log-append time), and a record without headers has
 * null {@code headers}, not an empty list. Rows are {@link GenericInternalRow}s built without
 * code generation: Spark's scan projects them into unsafe rows once anyway.
 */
public final class KafkaRecordRows {

    /** One header: its key and its (nullable) value. */
    public static final StructType HEADER = new StructType(new StructField[] {
        DataTypes.createStructField("key", DataTypes.StringType, true),
        DataTypes.createStructField("value", DataTypes.BinaryType, true),
    });

    /** Spark's Kafka source schema with headers. */
    public static final StructType SCHEMA = new StructType(new StructField[] {
        DataTypes.createStructField("key", DataTypes.BinaryType, true),
        DataTypes.createStructField("value", DataTypes.BinaryType, true),
        DataTypes.createStructField("topic", DataTypes.StringType, true),
        DataTypes.createStructField("partition", DataTypes.IntegerType, true),
        DataTypes.createStructField("offset", DataTypes.LongType, true),
        DataTypes.createStructField("timestamp", DataTypes.TimestampType, true),
        DataTypes.createStructField("timestampType", DataTypes.IntegerType, true),
        DataTypes.createStructField("headers", DataTypes.createArrayType(HEADER, true), true),
    });

    private String topic;
    private UTF8String topicUtf8;

    /** The row of {@code record}. */
    public InternalRow toRow(ConsumerRecord<byte[], byte[]> record) {
        return new GenericInternalRow(new Object[] {
            record.key(),
            record.value(),
            topic(record.topic()),
            record.partition(),
            record.offset(),
            record.timestamp() * 1000L,
            record.timestampType().id,
            headers(record.headers().toArray()),
        });
    }

    /** A partition's records share one topic string: encode it once. */
    private UTF8String topic(String name) {
        if (!name.equals(topic)) {
            topic = name;
            topicUtf8 = UTF8String.fromString(name);
        }
        return topicUtf8;
    }

    private static GenericArrayData headers(Header[] headers) {
        if (headers.length == 0) {
            return null;
        }
        Object[] rows = new Object[headers.length];
        for (int i = 0; i < headers.length; i++) {
            rows[i] = new GenericInternalRow(new Object[] {
                UTF8String.fromString(headers[i].key()), headers[i].value()});
        }
        return new GenericArrayData(rows);
    }
}
