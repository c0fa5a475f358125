package dev.mirrorflow.kafka.read;

import java.io.Serializable;
import java.util.Objects;

import org.apache.kafka.common.TopicPartition;

/**
 * One partition's planned offset range: records of {@code topic}'s {@code partition} from
 * {@code start} (inclusive) to {@code end} (exclusive).
 *
 * <p>The plan fixes both ends before anything is read, so a read is exact and repeatable:
 * {@link RangeReader} reads these records and no others. A range with {@code start >= end}
 * is empty. Serializable because Spark ships ranges to its executors inside its input
 * partitions.
 *
 * @param topic     the topic's name
 * @param partition the partition's number (at least 0)
 * @param start     the first offset to read (at least 0)
 * @param end       the offset after the last one to read (at least 0)
 */
public record TopicRange(String topic, int partition, long start, long end) implements Serializable {

    private static final long serialVersionUID = 1L;

    /** Checks the fields: a topic, a partition and offsets that are not negative. */
    public TopicRange {
        Objects.requireNonNull(topic, "topic");
        if (topic.isEmpty()) {
            throw new IllegalArgumentException("a range needs a topic name, got ''");
        }
        if (partition < 0 || start < 0 || end < 0) {
            throw new IllegalArgumentException("a range's partition and offsets must be >= 0, got "
                    + describe(topic, partition, start, end));
        }
    }

    /** This range's partition as the Kafka client names it. */
    public TopicPartition topicPartition() {
        return new TopicPartition(topic, partition);
    }

    /** Whether the range has no record to read ({@code start >= end}). */
    public boolean isEmpty() {
        return start >= end;
    }

    /** How messages name a range: {@code topic 't' partition 3 [10, 20)}. */
    @Override
    public String toString() {
        return describe(topic, partition, start, end);
    }

    private static String describe(String topic, int partition, long start, long end) {
        return "topic '" + topic + "' partition " + partition + " [" + start + ", " + end + ")";
    }
}
