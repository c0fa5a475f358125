package dev.mirrorflow.spark;

import java.util.HashMap;
import java.util.Map;

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

    KafkaRangeReaderFactory(Map<String, String> kafka, long pollTimeoutMs, long timeoutMs) {
        this.kafka = new HashMap<>(kafka);
        this.pollTimeoutMs = pollTimeoutMs;
        this.timeoutMs = timeoutMs;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        return new KafkaRangePartitionReader(((RangeGroupPartition) partition).ranges(), kafka, pollTimeoutMs,
                timeoutMs);
    }
}
