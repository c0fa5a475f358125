package dev.mirrorflow.spark;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import dev.mirrorflow.digest.RangeDigest;
import dev.mirrorflow.kafka.read.RangeConsumers;
import dev.mirrorflow.kafka.read.RangeReadException;
import dev.mirrorflow.kafka.read.RangeReader;
import dev.mirrorflow.kafka.read.TopicRange;
import dev.mirrorflow.kafka.write.RangeResult;
import dev.mirrorflow.kafka.write.SlotWriter;
import dev.mirrorflow.kafka.write.SourceLogStart;
import dev.mirrorflow.kafka.write.WriteClients;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One write slot's task: reads the slot's ranges with one consumer ({@link RangeReader}) and
 * hands each record straight to the slot's writer ({@link SlotWriter}), which opens at the first
 * record (as the Python task opens its writer at the first batch: a slot with nothing to read
 * fences nobody and writes nothing), then commits and yields one row per range written.
 *
 * <p>The whole write runs in the first {@link #next()}. On a failure the open transaction is
 * aborted (best effort, bounded: the target may be down), every client is closed without a
 * long wait, and the failure is thrown as it is ({@code WriteException},
 * {@code DataLossException}, {@code RangeReadException}, ...), for the Python side to raise
 * again by name.
 */
final class MirrorPartitionReader implements PartitionReader<InternalRow> {

    private static final Logger LOG = LoggerFactory.getLogger(MirrorPartitionReader.class);
    private static final Duration LOG_START_TIMEOUT = Duration.ofSeconds(30);

    private final SlotPartition slot;
    private final MirrorOptions options;
    private List<InternalRow> rows;
    private int at = -1;

    MirrorPartitionReader(SlotPartition slot, MirrorOptions options) {
        this.slot = slot;
        this.options = options;
    }

    @Override
    public boolean next() {
        if (rows == null) {
            rows = new ArrayList<>();
            for (RangeResult result : run()) {
                rows.add(new GenericInternalRow(new Object[] {UTF8String.fromString(result.toJson())}));
            }
        }
        return ++at < rows.size();
    }

    @Override
    public InternalRow get() {
        return rows.get(at);
    }

    @Override
    public void close() {
        // run() closes everything it opens
    }

    private List<RangeResult> run() {
        List<TopicRange> ranges = slot.readRanges();
        if (ranges.stream().allMatch(TopicRange::isEmpty)) {
            return List.of();
        }
        KafkaConsumer<byte[], byte[]> consumer = consumer();
        RangeReader reader = reader(consumer, ranges);
        SourceLogStart logStart = (topic, partition) -> {
            TopicPartition tp = new TopicPartition(topic, partition);
            Long start = consumer.beginningOffsets(List.of(tp), LOG_START_TIMEOUT).get(tp);
            if (start == null) {
                throw new RangeReadException("source topic '" + topic + "' partition " + partition
                        + " no longer exists (asking its log start for write slot " + slot.slot() + ")");
            }
            return start;
        };
        boolean digestHeaders = options.digestHeaders();
        SlotWriter writer = new SlotWriter(slot.tasks(), options.writer(), options.target(),
                WriteClients.kafka(options.target()), logStart, this::readAgain,
                task -> new RangeDigest(task.start(), digestHeaders));
        long began = System.nanoTime();
        long reading = 0;
        long records = 0;
        try {
            while (true) {
                long before = System.nanoTime();
                ConsumerRecord<byte[], byte[]> record = reader.next();
                reading += System.nanoTime() - before;
                if (record == null) {
                    break;
                }
                if (!writer.isOpen()) {
                    writer.open();
                }
                writer.write(record);
                records++;
            }
            long closing = System.nanoTime();
            List<RangeResult> results = writer.isOpen() ? writer.close() : List.of();
            long end = System.nanoTime();
            LOG.info("write slot {}: {} records of {} ranges in {} ms ({} ms waiting for records, {} ms the last "
                    + "commit)", slot.slot(), records, ranges.size(), (end - began) / 1_000_000, reading / 1_000_000,
                    (end - closing) / 1_000_000);
            return results;
        } catch (RuntimeException | Error e) {
            try {
                writer.abort();
            } catch (RuntimeException suppressed) {
                e.addSuppressed(suppressed);
            }
            throw e;
        } finally {
            try {
                writer.release();
            } finally {
                reader.close();
            }
        }
    }

    /** A new consumer of the source. */
    private KafkaConsumer<byte[], byte[]> consumer() {
        try {
            return RangeConsumers.open(options.source());
        } catch (KafkaException e) {
            throw new RangeReadException("opening a consumer for write slot " + slot.slot() + " failed: "
                    + e.getClass().getName() + ": " + e.getMessage()
                    + (e.getCause() == null ? "" : " (" + e.getCause() + ")"), e);
        }
    }

    /** A reader of {@code ranges} with {@code consumer}, which it closes (at once when it cannot start). */
    private RangeReader reader(KafkaConsumer<byte[], byte[]> consumer, List<TopicRange> ranges) {
        try {
            return new RangeReader(consumer, ranges, options.pollTimeoutMs(), options.timeoutMs());
        } catch (RuntimeException e) {
            consumer.close(CloseOptions.timeout(Duration.ZERO));
            throw e;
        }
    }

    /** Records of source partitions read again, with one consumer of their own, for a transaction written again. */
    private Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> readAgain(Map<TopicPartition, long[]> spans) {
        List<TopicRange> ranges = new ArrayList<>();
        spans.forEach((tp, span) -> ranges.add(new TopicRange(tp.topic(), tp.partition(), span[0], span[1] + 1)));
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> out = new HashMap<>();
        try (RangeReader again = reader(consumer(), ranges)) {
            for (ConsumerRecord<byte[], byte[]> record = again.next(); record != null; record = again.next()) {
                out.computeIfAbsent(new TopicPartition(record.topic(), record.partition()), tp -> new ArrayList<>())
                        .add(record);
            }
        }
        return out;
    }
}
