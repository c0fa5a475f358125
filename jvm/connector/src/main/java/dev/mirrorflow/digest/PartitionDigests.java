package dev.mirrorflow.digest;

import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;

/**
 * The proof's aggregates of the records one task reads, per partition, at the offsets they sit
 * at (Python {@code quality.compare}'s target side, where every record of the region is taken as
 * the flow's own): the count, the XOR of the placement hashes
 * {@code xxhash64(digest, offset)} with and without the timestamp, the first and last offsets.
 * The same sums Spark SQL makes of the rows of {@code mirrorflow-kafka} ({@link RecordDigest}
 * computes each digest as that SQL does), without a row per record or a shuffle to sum them.
 */
public final class PartitionDigests {

    /** One partition's sums. */
    public static final class Sums {
        private long records;
        private long xor;
        private long xorNoTs;
        private long first = Long.MAX_VALUE;
        private long last = Long.MIN_VALUE;

        /** Records added. */
        public long records() {
            return records;
        }

        /** XOR of {@code xxhash64(digest with the timestamp, offset)}. */
        public long xor() {
            return xor;
        }

        /** XOR of {@code xxhash64(digest without the timestamp, offset)}. */
        public long xorNoTs() {
            return xorNoTs;
        }

        /** The lowest offset added. */
        public long first() {
            return first;
        }

        /** The highest offset added. */
        public long last() {
            return last;
        }
    }

    private final Map<TopicPartition, Sums> sums = new LinkedHashMap<>();
    private TopicPartition lastPartition;
    private Sums lastSums;

    /** Adds a record as read: its key, value, headers (none: a null headers column), timestamp and offset. */
    public void add(ConsumerRecord<byte[], byte[]> record) {
        Sums of = of(record.topic(), record.partition());
        Header[] headers = record.headers().toArray();
        long digest = RecordDigest.withoutTimestamp(record.key(), record.value(),
                headers.length == 0 ? null : headers, true);
        long offset = record.offset();
        of.records++;
        of.xor ^= RecordDigest.placement(RecordDigest.withTimestamp(digest, record.timestamp() * 1000L), offset);
        of.xorNoTs ^= RecordDigest.placement(digest, offset);
        of.first = Math.min(of.first, offset);
        of.last = Math.max(of.last, offset);
    }

    /** Each partition that had a record, with its sums, in the order first seen. */
    public Map<TopicPartition, Sums> sums() {
        return sums;
    }

    private Sums of(String topic, int partition) {
        if (lastPartition == null || lastPartition.partition() != partition || !lastPartition.topic().equals(topic)) {
            lastPartition = new TopicPartition(topic, partition);
            lastSums = sums.computeIfAbsent(lastPartition, tp -> new Sums());
        }
        return lastSums;
    }
}
