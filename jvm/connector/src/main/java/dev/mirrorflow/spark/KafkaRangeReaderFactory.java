package dev.mirrorflow.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import dev.mirrorflow.kafka.read.TopicRange;
import dev.mirrorflow.kafka.write.SchemaIds;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/**
 * Makes each task's reader on its executor. Serialized to the executors with the consumer
 * settings, as Spark's own Kafka source ships its client parameters.
 */
final class KafkaRangeReaderFactory implements PartitionReaderFactory {

    private static final long serialVersionUID = 1L;

    private final HashMap<String, String> kafka;
    private final long pollTimeoutMs;
    private final long timeoutMs;
    private final SchemaIds digests;
    private final ArrayList<String> idScan;

    /**
     * @param digests null for a read of records; for a digests read, the ids it maps
     *                ({@link SchemaIds#NONE} for none)
     * @param idScan  the parts of a schema id scan (empty for none)
     */
    KafkaRangeReaderFactory(Map<String, String> kafka, long pollTimeoutMs, long timeoutMs, SchemaIds digests,
                            List<String> idScan) {
        this.kafka = new HashMap<>(kafka);
        this.pollTimeoutMs = pollTimeoutMs;
        this.timeoutMs = timeoutMs;
        this.digests = digests;
        this.idScan = new ArrayList<>(idScan);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        List<TopicRange> ranges = ((RangeGroupPartition) partition).ranges();
        if (digests != null) {
            return new KafkaDigestPartitionReader(ranges, kafka, pollTimeoutMs, timeoutMs, digests);
        }
        return idScan.isEmpty() ? new KafkaRangePartitionReader(ranges, kafka, pollTimeoutMs, timeoutMs)
                : new KafkaIdScanPartitionReader(ranges, kafka, pollTimeoutMs, timeoutMs, idScan);
    }
}
