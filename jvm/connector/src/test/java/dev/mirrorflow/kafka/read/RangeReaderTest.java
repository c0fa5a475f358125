package dev.mirrorflow.kafka.read;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.LongStream;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.junit.jupiter.api.Test;

/**
 * {@link RangeReader} against Kafka's own {@link MockConsumer}: a double, because a unit test
 * has no broker; it keeps positions, pauses, beginning and end offsets and raises
 * {@code OffsetOutOfRangeException} like the real client. The Python suite reads through the
 * Spark source from real brokers.
 */
class RangeReaderTest {

    /** A poll timeout no test reaches: no stall check happens while records come. */
    private static final long NEVER_STILL_MS = 60_000;

    /** Counts the reader's end-offset requests (ListOffsets on a real consumer). */
    static final class Consumer extends MockConsumer<byte[], byte[]> {
        final List<Collection<TopicPartition>> endOffsetRequests = new ArrayList<>();

        final List<Long> pollTimeoutsMs = new ArrayList<>();

        Consumer() {
            super("none");
        }

        @Override
        public synchronized ConsumerRecords<byte[], byte[]> poll(Duration timeout) {
            pollTimeoutsMs.add(timeout.toMillis());
            return super.poll(timeout);
        }

        @Override
        public Map<TopicPartition, Long> endOffsets(Collection<TopicPartition> partitions, Duration timeout) {
            endOffsetRequests.add(List.copyOf(partitions));
            return super.endOffsets(partitions, timeout);
        }

        /** Records {@code from} to {@code until - 1} of a partition, values "topic-partition-offset". */
        void records(String topic, int partition, long from, long until) {
            for (long offset = from; offset < until; offset++) {
                addRecord(new ConsumerRecord<>(topic, partition, offset, null,
                        (topic + "-" + partition + "-" + offset).getBytes()));
            }
        }

        void partitions(String topic, int count) {
            updatePartitions(topic, IntStream.range(0, count)
                    .mapToObj(p -> new PartitionInfo(topic, p, null, null, null)).collect(Collectors.toList()));
        }
    }

    private static TopicPartition tp(String topic, int partition) {
        return new TopicPartition(topic, partition);
    }

    /** Everything the reader returns, as "topic-partition-offset" per partition, in order. */
    private static Map<String, List<Long>> readAll(RangeReader reader) {
        Map<String, List<Long>> read = new LinkedHashMap<>();
        ConsumerRecord<byte[], byte[]> record;
        while ((record = reader.next()) != null) {
            assertEquals(record.topic() + "-" + record.partition() + "-" + record.offset(), new String(record.value()));
            read.computeIfAbsent(record.topic() + "-" + record.partition(), k -> new ArrayList<>()).add(record.offset());
        }
        return read;
    }

    private static List<Long> offsets(long from, long until) {
        return LongStream.range(from, until).boxed().collect(Collectors.toList());
    }

    @Test
    void readsEachRangeOnceInOrderAndDropsRecordsPastItsEnd() {
        Consumer consumer = new Consumer();
        RangeReader reader = new RangeReader(consumer, List.of(new TopicRange("t", 0, 2, 5),
                new TopicRange("t", 1, 0, 3), new TopicRange("u", 0, 10, 12)), NEVER_STILL_MS, 10_000);
        assertEquals(Set.of(tp("t", 0), tp("t", 1), tp("u", 0)), consumer.assignment());
        consumer.records("t", 0, 0, 8);
        consumer.records("t", 1, 0, 5);
        consumer.records("u", 0, 10, 15);
        consumer.setMaxPollRecords(2);

        Map<String, List<Long>> read = readAll(reader);

        assertEquals(Map.of("t-0", List.of(2L, 3L, 4L), "t-1", List.of(0L, 1L, 2L), "u-0", List.of(10L, 11L)), read);
        assertNull(reader.next());
        assertEquals(Set.of(tp("t", 0), tp("t", 1), tp("u", 0)), consumer.paused());
        assertEquals(List.of(), consumer.endOffsetRequests);
        reader.close();
        assertTrue(consumer.closed());
    }

    @Test
    void unassignsFinishedPartitionsInBatchesAcrossManyPartitions() {
        Consumer consumer = new Consumer();
        List<TopicRange> ranges = new ArrayList<>();
        for (int p = 0; p < 500; p++) {
            ranges.add(new TopicRange("t", p, 0, 3));
        }
        RangeReader reader = new RangeReader(consumer, ranges, NEVER_STILL_MS, 10_000);
        for (int p = 0; p < 500; p++) {
            consumer.records("t", p, 0, 5);
        }
        consumer.setMaxPollRecords(100);

        Map<String, List<Long>> read = readAll(reader);

        assertEquals(500, read.size());
        read.values().forEach(offsets -> assertEquals(List.of(0L, 1L, 2L), offsets));
        assertTrue(consumer.assignment().size() < 500, "finished partitions stay assigned: " + consumer.assignment().size());
        assertEquals(List.of(), consumer.endOffsetRequests);
    }

    @Test
    void aRangeEndingOnATransactionMarkerEndsWhenThePositionPassesIt() {
        Consumer consumer = new Consumer();
        RangeReader reader = new RangeReader(consumer, List.of(new TopicRange("t", 0, 0, 5)), NEVER_STILL_MS, 10_000);
        consumer.records("t", 0, 0, 4);
        // Offset 4 is a commit marker: the real consumer's position steps over it.
        consumer.scheduleNopPollTask();
        consumer.schedulePollTask(() -> consumer.seek(tp("t", 0), 5));

        assertEquals(Map.of("t-0", offsets(0, 4)), readAll(reader));
        assertEquals(List.of(), consumer.endOffsetRequests);
    }

    @Test
    void aRangeStartingOutsideTheLogResumesAtItsStartOrEndsShort() {
        Consumer consumer = new Consumer();
        RangeReader reader = new RangeReader(consumer, List.of(new TopicRange("t", 0, 0, 10),
                new TopicRange("t", 1, 0, 3), new TopicRange("t", 2, 1, 4), new TopicRange("t", 3, 8, 12)),
                NEVER_STILL_MS, 10_000);
        consumer.updateBeginningOffsets(Map.of(tp("t", 0), 4L, tp("t", 1), 0L, tp("t", 2), 6L, tp("t", 3), 0L));
        consumer.records("t", 0, 4, 12);
        consumer.records("t", 1, 0, 3);
        consumer.records("t", 2, 6, 8);
        // What the real consumer raises (auto.offset.reset=none) when its fetch positions are
        // below the log start; raised here before MockConsumer would raise it mid-poll, where
        // (unlike the real consumer) it would drop the records it already took for t-1.
        consumer.setPollException(new OffsetOutOfRangeException("out of range",
                Map.of(tp("t", 0), 0L, tp("t", 2), 1L, tp("t", 3), 8L)));

        Map<String, List<Long>> read = readAll(reader);

        // t-2's range [1, 4) is wholly below its log start 6: done, with no record. t-3's start
        // 8 is past its log's end (the log was truncated): it ends short, with no record.
        assertEquals(Map.of("t-0", offsets(4, 10), "t-1", offsets(0, 3)), read);
    }

    @Test
    void aRangeEndingShortEndsAfterOneEndOffsetsRequestOnceStill() {
        Consumer consumer = new Consumer();
        consumer.partitions("t", 2);
        RangeReader reader = new RangeReader(consumer, List.of(new TopicRange("t", 0, 0, 10),
                new TopicRange("t", 1, 0, 2)), 50, 10_000);
        consumer.records("t", 0, 0, 7);
        consumer.records("t", 1, 0, 2);
        consumer.updateEndOffsets(Map.of(tp("t", 0), 7L, tp("t", 1), 2L));
        long start = System.nanoTime();

        assertEquals(Map.of("t-0", offsets(0, 7), "t-1", offsets(0, 2)), readAll(reader));

        assertTrue(System.nanoTime() - start >= Duration.ofMillis(50).toNanos(), "asked before the partition was still");
        assertEquals(List.of(List.of(tp("t", 0))), consumer.endOffsetRequests);
    }

    @Test
    void pollsStartShortAfterProgressAndDoubleWhileNothingMoves() {
        Consumer consumer = new Consumer();
        consumer.partitions("t", 1);
        RangeReader reader = new RangeReader(consumer, List.of(new TopicRange("t", 0, 0, 10)), 80, 10_000);
        consumer.records("t", 0, 0, 3);
        consumer.updateEndOffsets(Map.of(tp("t", 0), 3L));

        assertEquals(Map.of("t-0", offsets(0, 3)), readAll(reader));

        // A poll that brings no record waits its whole timeout even when the position moves
        // (past a transaction marker): short polls after progress notice it early.
        assertEquals(List.of(10L, 10L, 20L, 40L, 80L), consumer.pollTimeoutsMs.subList(0, 5));
        assertTrue(consumer.pollTimeoutsMs.stream().allMatch(ms -> ms <= 80), consumer.pollTimeoutsMs.toString());
    }

    @Test
    void emptyRangesAreDoneWithoutSeekingOrPolling() {
        Consumer consumer = new Consumer();
        RangeReader reader = new RangeReader(consumer, List.of(new TopicRange("t", 0, 5, 5),
                new TopicRange("t", 1, 7, 3)), NEVER_STILL_MS, 10_000);

        assertNull(reader.next());
        assertEquals(Set.of(), consumer.assignment());
        assertNull(consumer.lastPollTimeout());
    }

    @Test
    void twoRangesOfOnePartitionAreRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new RangeReader(new Consumer(),
                List.of(new TopicRange("t", 0, 0, 5), new TopicRange("t", 1, 0, 5), new TopicRange("t", 0, 5, 9)),
                NEVER_STILL_MS, 10_000));
        assertEquals("two ranges for topic 't' partition 0: [0, 5) and [5, 9); a read takes one range per partition",
                e.getMessage());
    }

    @Test
    void aTimeoutNamesTheUnfinishedPartitions() {
        Consumer consumer = new Consumer();
        consumer.partitions("t", 2);
        RangeReader reader = new RangeReader(consumer, List.of(new TopicRange("t", 0, 0, 10),
                new TopicRange("t", 1, 0, 1)), 20, 200);
        consumer.records("t", 0, 0, 5);
        consumer.records("t", 1, 0, 1);
        consumer.updateEndOffsets(Map.of(tp("t", 0), 10L));

        RangeReadException e = assertThrows(RangeReadException.class, () -> readAll(reader));

        assertTrue(e.getMessage().matches("no progress for 2\\d\\d ms \\(timeoutMs\\) with 1 of 2 ranges unfinished: "
                + "topic 't' partition 0 \\[0, 10\\) at 5"), e.getMessage());
    }

    @Test
    void aPartitionThatNoLongerExistsFails() {
        Consumer consumer = new Consumer();
        consumer.partitions("t", 1);
        RangeReader reader = new RangeReader(consumer, List.of(new TopicRange("t", 0, 0, 2),
                new TopicRange("t", 3, 0, 10), new TopicRange("gone", 0, 0, 10)), 20, 10_000);
        consumer.records("t", 0, 0, 2);

        RangeReadException e = assertThrows(RangeReadException.class, () -> readAll(reader));

        assertEquals("source topic 't' partition 3 no longer exists (reading topic 't' partition 3 [0, 10) at 0)",
                e.getMessage());
    }

    @Test
    void aClientErrorIsOneLineThatPythonFindsInSparksFailureText() {
        Consumer consumer = new Consumer();
        RangeReader reader = new RangeReader(consumer, List.of(new TopicRange("t", 0, 3, 10)), NEVER_STILL_MS, 10_000);
        consumer.setPollException(new TopicAuthorizationException(Set.of("t")));

        RangeReadException e = assertThrows(RangeReadException.class, reader::next);

        assertEquals("reading topic 't' partition 0 [3, 10) at 3 failed: "
                + "org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access topics: [t]",
                e.getMessage());
        String sparkText = "Lost task 0.0 in stage 1.0 (TID 1) (host executor driver): " + e + "\n\tat x.y(Z.java:1)";
        Matcher m = Pattern.compile("dev\\.mirrorflow\\.[\\w.]*\\.(\\w+Exception): (.+)").matcher(sparkText);
        assertTrue(m.find());
        assertEquals("RangeReadException", m.group(1));
        assertEquals(e.getMessage(), m.group(2));
    }

    @Test
    void messagesAreFoldedIntoOneLine() {
        assertEquals("a b c", new RangeReadException("a\n  b\r\nc\n").getMessage());
    }

    @Test
    void aFetchWaitGivenByTheCallerIsKept() {
        assertEquals("0", RangeConsumers.settings(Map.of("fetch.max.wait.ms", "0")).get("fetch.max.wait.ms"));
    }

    @Test
    void theConsumerSettingsOfARangeReadWin() {
        Map<String, Object> settings = RangeConsumers.settings(Map.of("bootstrap.servers", "b:9092",
                "group.id", "g", "group.instance.id", "i", "enable.auto.commit", "true",
                "auto.offset.reset", "earliest", "isolation.level", "read_committed"));
        assertEquals(Map.of("bootstrap.servers", "b:9092", "enable.auto.commit", "false", "auto.offset.reset", "none",
                "allow.auto.create.topics", "false", "isolation.level", "read_committed", "fetch.max.wait.ms", "10",
                "key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer",
                "value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer"), settings);
    }
}
