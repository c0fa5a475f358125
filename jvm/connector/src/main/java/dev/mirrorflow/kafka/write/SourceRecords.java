package dev.mirrorflow.kafka.write;

import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * Reads records of the source again: a transaction aborted for a passing cause, or found
 * interleaved with another producer's records, is written again from the source rather than
 * from records the writer held (a transaction of up to 64 MiB per slot, which every young
 * collection would copy while it stays open). The Spark task reads them with one consumer of
 * their own, at the source's isolation level, as it read them the first time.
 */
@FunctionalInterface
public interface SourceRecords {

    /**
     * The records of each source partition of {@code spans} at offsets {@code span[0]} to
     * {@code span[1]} (both inclusive), in offset order; what the log does not hold (compacted
     * away, markers, aborted records) is left out.
     */
    Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> read(Map<TopicPartition, long[]> spans);
}
