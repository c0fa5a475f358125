package dev.mirrorflow.kafka.read;

import java.util.Collection;
import java.util.stream.Collectors;

import org.apache.kafka.common.TopicPartition;

/**
 * Where {@link RangeReader} stands in one partition: the planned range, the consumer's last
 * known position in it, and when that position last moved (to tell a partition that waits
 * its turn from one that stalled).
 */
final class PartitionProgress {

    private static final int NAMED_AT_MOST = 10;

    final TopicRange range;
    final TopicPartition partition;
    long position;
    long lastProgressNanos;

    PartitionProgress(TopicRange range, long nowNanos) {
        this.range = range;
        this.partition = range.topicPartition();
        this.position = range.start();
        this.lastProgressNanos = nowNanos;
    }

    /** Whether {@code offset} is inside the planned range. */
    boolean covers(long offset) {
        return offset >= range.start() && offset < range.end();
    }

    /** {@code topic 't' partition 3 [10, 20) at 15}. */
    String describe() {
        return range + " at " + position;
    }

    /** The first ten partitions described, then how many more. */
    static String describeAll(Collection<PartitionProgress> partitions) {
        return partitions.stream().limit(NAMED_AT_MOST).map(PartitionProgress::describe)
                .collect(Collectors.joining(", "))
                + (partitions.size() > NAMED_AT_MOST ? " and " + (partitions.size() - NAMED_AT_MOST) + " more" : "");
    }
}
