package dev.mirrorflow.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import dev.mirrorflow.digest.DigestSums;
import dev.mirrorflow.digest.PartitionDigests;
import dev.mirrorflow.kafka.read.TopicRange;
import dev.mirrorflow.kafka.write.SchemaIds;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's reader of a {@code digests} read ({@link SummaryPartitionReader}): a row per
 * partition that had records, of {@link #SCHEMA}: the proof's sums of that partition
 * ({@link PartitionDigests}).
 */
final class KafkaDigestPartitionReader extends SummaryPartitionReader {

    /** A row per partition read: {@code topic, partition, records, xor, xor_no_ts, first, last}. */
    static final StructType SCHEMA = new StructType(new StructField[] {
        DataTypes.createStructField("topic", DataTypes.StringType, false),
        DataTypes.createStructField("partition", DataTypes.IntegerType, false),
        DataTypes.createStructField("records", DataTypes.LongType, false),
        DataTypes.createStructField("xor", DataTypes.LongType, false),
        DataTypes.createStructField("xor_no_ts", DataTypes.LongType, false),
        DataTypes.createStructField("first", DataTypes.LongType, false),
        DataTypes.createStructField("last", DataTypes.LongType, false),
    });

    private final SchemaIds ids;

    KafkaDigestPartitionReader(List<TopicRange> ranges, Map<String, String> kafka, long pollTimeoutMs,
                               long timeoutMs, SchemaIds ids) {
        super(ranges, kafka, pollTimeoutMs, timeoutMs);
        this.ids = ids;
    }

    @Override
    List<InternalRow> summarize(KafkaRangePartitionReader records) {
        PartitionDigests digests = new PartitionDigests(ids);
        ConsumerRecord<byte[], byte[]> record;
        while ((record = records.nextRecord()) != null) {
            digests.add(record);
        }
        List<InternalRow> out = new ArrayList<>();
        for (Map.Entry<TopicPartition, DigestSums> entry : digests.sums().entrySet()) {
            DigestSums sums = entry.getValue();
            out.add(new GenericInternalRow(new Object[] {
                UTF8String.fromString(entry.getKey().topic()), entry.getKey().partition(), sums.records(), sums.xor(),
                sums.xorNoTs(), sums.first(), sums.last()}));
        }
        return out;
    }
}
