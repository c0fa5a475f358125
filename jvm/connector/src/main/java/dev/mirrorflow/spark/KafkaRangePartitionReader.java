package dev.mirrorflow.spark;

import java.time.Duration;
import java.util.List;
import java.util.Map;

import dev.mirrorflow.kafka.read.RangeConsumers;
import dev.mirrorflow.kafka.read.RangeReadException;
import dev.mirrorflow.kafka.read.RangeReader;
import dev.mirrorflow.kafka.read.TopicRange;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/**
 * One task's reader: one consumer for its whole group of ranges ({@link RangeReader}), each
 * record turned into a row ({@link KafkaRecordRows}). A group whose ranges are all empty opens
 * no consumer. Closing the reader closes the consumer without a long wait.
 */
final class KafkaRangePartitionReader implements PartitionReader<InternalRow> {

    private final RangeReader reader;
    private final KafkaRecordRows rows = new KafkaRecordRows();
    private InternalRow row;

    KafkaRangePartitionReader(List<TopicRange> ranges, Map<String, String> kafka, long pollTimeoutMs,
                              long timeoutMs) {
        if (ranges.stream().allMatch(TopicRange::isEmpty)) {
            reader = null;
            return;
        }
        KafkaConsumer<byte[], byte[]> consumer;
        try {
            consumer = RangeConsumers.open(kafka);
        } catch (KafkaException e) {
            throw new RangeReadException("opening a consumer for " + ranges.size() + " ranges failed: "
                    + e.getClass().getName() + ": " + e.getMessage()
                    + (e.getCause() == null ? "" : " (" + e.getCause() + ")"), e);
        }
        try {
            reader = new RangeReader(consumer, ranges, pollTimeoutMs, timeoutMs);
        } catch (RuntimeException e) {
            consumer.close(CloseOptions.timeout(Duration.ZERO));
            throw e;
        }
    }

    @Override
    public boolean next() {
        ConsumerRecord<byte[], byte[]> record = nextRecord();
        if (record == null) {
            return false;
        }
        row = rows.toRow(record);
        return true;
    }

    /** The group's next record, or null when every range is read. */
    ConsumerRecord<byte[], byte[]> nextRecord() {
        return reader == null ? null : reader.next();
    }

    @Override
    public InternalRow get() {
        return row;
    }

    @Override
    public void close() {
        if (reader != null) {
            reader.close();
        }
    }
}
