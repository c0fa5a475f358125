package dev.mirrorflow.digest;

import java.util.Map;

import dev.mirrorflow.kafka.read.PerPartition;
import dev.mirrorflow.kafka.write.SchemaIds;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * The proof's sums ({@link DigestSums}) of the records one task reads, per partition, at the
 * offsets they sit at (Python {@code quality.compare}'s target side, where every record of the
 * region is taken as the flow's own): the same sums Spark SQL makes of the rows of
 * {@code mirrorflow-kafka} ({@link RecordDigest} computes each digest as that SQL does), without
 * a row per record or a shuffle to sum them.
 */
public final class PartitionDigests {

    private final PerPartition<DigestSums> sums = new PerPartition<>(DigestSums::new);
    private final SchemaIds ids;

    /**
     * @param ids a schema registry transfer's ids mapped back to the source's before each record
     *            is digested ({@link SchemaIds#mapped}; {@link SchemaIds#NONE} for none)
     */
    public PartitionDigests(SchemaIds ids) {
        this.ids = ids;
    }

    /** Adds a record as read: its key, value (ids mapped back), headers, timestamp and offset. */
    public void add(ConsumerRecord<byte[], byte[]> record) {
        long digest = RecordDigest.withoutTimestamp(ids.mapped(record.topic(), "key", record.key()),
                ids.mapped(record.topic(), "value", record.value()), RecordDigest.headers(record), true);
        sums.of(record).add(digest, record.timestamp() * 1000L, record.offset());
    }

    /** Each partition that had a record, with its sums, in the order first seen. */
    public Map<TopicPartition, DigestSums> sums() {
        return sums.all();
    }
}
