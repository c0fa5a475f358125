package dev.mirrorflow.spark;

import java.util.Iterator;
import java.util.List;
import java.util.Map;

import dev.mirrorflow.kafka.read.TopicRange;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/**
 * One task's reader of a summarising read (the proof's {@code digests}, the
 * {@code schemaIdScan}): it reads its whole group of ranges with one consumer, as
 * {@link KafkaRangePartitionReader} does, folds the records in the JVM, and gives the few rows
 * {@link #summarize} makes of them, none per record.
 */
abstract class SummaryPartitionReader implements PartitionReader<InternalRow> {

    private final KafkaRangePartitionReader records;
    private Iterator<InternalRow> rows;
    private InternalRow row;

    SummaryPartitionReader(List<TopicRange> ranges, Map<String, String> kafka, long pollTimeoutMs, long timeoutMs) {
        records = new KafkaRangePartitionReader(ranges, kafka, pollTimeoutMs, timeoutMs);
    }

    /** The rows of the whole group's records, read through {@code records} to their end. */
    abstract List<InternalRow> summarize(KafkaRangePartitionReader records);

    @Override
    public final boolean next() {
        if (rows == null) {
            rows = summarize(records).iterator();
        }
        if (!rows.hasNext()) {
            return false;
        }
        row = rows.next();
        return true;
    }

    @Override
    public final InternalRow get() {
        return row;
    }

    @Override
    public final void close() {
        records.close();
    }
}
