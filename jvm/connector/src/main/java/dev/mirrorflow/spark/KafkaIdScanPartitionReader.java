package dev.mirrorflow.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import dev.mirrorflow.kafka.read.PerPartition;
import dev.mirrorflow.kafka.read.TopicRange;
import dev.mirrorflow.kafka.write.WireIds;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's reader of a {@code schemaIdScan} read ({@link SummaryPartitionReader}): a row per
 * partition that had records and per part scanned, of {@link #SCHEMA}: the schema ids found and
 * the first record not in the wire format ({@link WireIds}). A row per partition, no row per
 * record: the driver's scan of a schema transfer's ranges costs a read, not a read and a Spark
 * SQL aggregation of every record.
 */
final class KafkaIdScanPartitionReader extends SummaryPartitionReader {

    /** {@code topic, partition, part, ids, refused_offset, refused_length, refused_first}. */
    static final StructType SCHEMA = new StructType(new StructField[] {
        DataTypes.createStructField("topic", DataTypes.StringType, false),
        DataTypes.createStructField("partition", DataTypes.IntegerType, false),
        DataTypes.createStructField("part", DataTypes.StringType, false),
        DataTypes.createStructField("ids", DataTypes.createArrayType(DataTypes.LongType, false), false),
        DataTypes.createStructField("refused_offset", DataTypes.LongType, true),
        DataTypes.createStructField("refused_length", DataTypes.IntegerType, true),
        DataTypes.createStructField("refused_first", DataTypes.IntegerType, true),
    });

    private final List<String> parts;

    KafkaIdScanPartitionReader(List<TopicRange> ranges, Map<String, String> kafka, long pollTimeoutMs,
                               long timeoutMs, List<String> parts) {
        super(ranges, kafka, pollTimeoutMs, timeoutMs);
        this.parts = parts;
    }

    @Override
    List<InternalRow> summarize(KafkaRangePartitionReader records) {
        boolean keys = parts.contains("key");
        boolean values = parts.contains("value");
        PerPartition<WireIds[]> found = new PerPartition<>(() -> new WireIds[] {new WireIds(), new WireIds()});
        ConsumerRecord<byte[], byte[]> record;
        while ((record = records.nextRecord()) != null) {
            WireIds[] ids = found.of(record);
            if (keys) {
                ids[0].add(record.offset(), record.key());
            }
            if (values) {
                ids[1].add(record.offset(), record.value());
            }
        }
        List<InternalRow> out = new ArrayList<>();
        for (Map.Entry<TopicPartition, WireIds[]> entry : found.all().entrySet()) {
            for (String part : parts) {
                WireIds ids = entry.getValue()["key".equals(part) ? 0 : 1];
                out.add(new GenericInternalRow(new Object[] {
                    UTF8String.fromString(entry.getKey().topic()), entry.getKey().partition(),
                    UTF8String.fromString(part), new GenericArrayData(ids.ids()), ids.refusedOffset(),
                    ids.refusedLength(), ids.refusedFirst()}));
            }
        }
        return out;
    }
}
