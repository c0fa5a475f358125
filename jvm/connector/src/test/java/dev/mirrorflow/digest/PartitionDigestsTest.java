package dev.mirrorflow.digest;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

class PartitionDigestsTest {

    private static ConsumerRecord<byte[], byte[]> record(String topic, int partition, long offset, long timestamp,
                                                         byte[] key, byte[] value, Header... headers) {
        return new ConsumerRecord<>(topic, partition, offset, timestamp, TimestampType.CREATE_TIME, -1, -1, key,
                value, new RecordHeaders(headers), Optional.empty());
    }

    @Test
    void sumsEachPartitionAtTheOffsetsItsRecordsSitAt() {
        List<ConsumerRecord<byte[], byte[]>> records = List.of(
                record("a.orders", 0, 7, 1_000, "k".getBytes(), "v".getBytes()),
                record("a.orders", 1, 3, 2_000, null, "w".getBytes(), new RecordHeader("h", "x".getBytes())),
                record("a.orders", 0, 9, 3_000, "k".getBytes(), null));
        PartitionDigests digests = new PartitionDigests(dev.mirrorflow.kafka.write.SchemaIds.NONE);
        records.forEach(digests::add);

        long xor = 0;
        long xorNoTs = 0;
        for (ConsumerRecord<byte[], byte[]> r : List.of(records.get(0), records.get(2))) {
            long noTs = RecordDigest.withoutTimestamp(r.key(), r.value(), null, true);
            xor ^= RecordDigest.placement(RecordDigest.withTimestamp(noTs, r.timestamp() * 1000), r.offset());
            xorNoTs ^= RecordDigest.placement(noTs, r.offset());
        }
        DigestSums first = digests.sums().get(new TopicPartition("a.orders", 0));
        assertEquals(List.of(2L, xor, xorNoTs, 7L, 9L),
                List.of(first.records(), first.xor(), first.xorNoTs(), first.first(), first.last()));

        ConsumerRecord<byte[], byte[]> r = records.get(1);
        long noTs = RecordDigest.withoutTimestamp(null, r.value(), r.headers().toArray(), true);
        DigestSums second = digests.sums().get(new TopicPartition("a.orders", 1));
        assertEquals(List.of(1L, RecordDigest.placement(RecordDigest.withTimestamp(noTs, 2_000_000), 3),
                        RecordDigest.placement(noTs, 3), 3L, 3L),
                List.of(second.records(), second.xor(), second.xorNoTs(), second.first(), second.last()));
        assertEquals(List.of(new TopicPartition("a.orders", 0), new TopicPartition("a.orders", 1)),
                List.copyOf(digests.sums().keySet()));
    }
}
