package dev.mirrorflow.kafka.write;

import java.util.List;

import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * Reads records of the source again: a transaction aborted for a passing cause, or found
 * interleaved with another producer's records, is written again from the source rather than
 * from records the writer held (a transaction of up to 64 MiB per slot, which every young
 * collection would copy while it stays open). The Spark task reads them with a consumer of
 * its own, {@code read_committed}, as it read them the first time.
 */
@FunctionalInterface
public interface SourceRecords {

    /**
     * The records of the source's {@code topic} partition {@code partition} at offsets
     * {@code from} to {@code to} (both inclusive), in offset order; what the log does not hold
     * (compacted away, markers, aborted records) is left out.
     */
    List<ConsumerRecord<byte[], byte[]>> read(String topic, int partition, long from, long to);
}
