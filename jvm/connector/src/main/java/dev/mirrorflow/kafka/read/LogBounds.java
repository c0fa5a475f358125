package dev.mirrorflow.kafka.read;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

/**
 * What {@link RangeReader} asks the cluster about partitions' logs, and only when a range
 * cannot go on by itself: the log start of a partition whose position fell out of its log,
 * and the log end of a partition that stalled (one ListOffsets request per broker for all of
 * them). A partition missing from the cluster's metadata fails the read: waiting would never
 * bring its records. The consumer's metadata of an assigned topic serves the existence check
 * without a request while the topic exists.
 */
final class LogBounds {

    private final Consumer<byte[], byte[]> consumer;
    private final Duration timeout;

    LogBounds(Consumer<byte[], byte[]> consumer, Duration timeout) {
        this.consumer = consumer;
        this.timeout = timeout;
    }

    /** The log starts of {@code partitions}. */
    Map<TopicPartition, Long> starts(List<TopicPartition> partitions) {
        return consumer.beginningOffsets(partitions, timeout);
    }

    /**
     * The log ends (at the consumer's isolation level) of {@code stalled}.
     *
     * @throws RangeReadException when one of the partitions no longer exists
     */
    Map<TopicPartition, Long> ends(List<PartitionProgress> stalled) {
        Map<String, List<PartitionProgress>> byTopic = stalled.stream()
                .collect(Collectors.groupingBy(p -> p.range.topic(), LinkedHashMap::new, Collectors.toList()));
        for (Map.Entry<String, List<PartitionProgress>> topic : byTopic.entrySet()) {
            Set<Integer> existing = consumer.partitionsFor(topic.getKey(), timeout).stream()
                    .map(PartitionInfo::partition).collect(Collectors.toSet());
            for (PartitionProgress p : topic.getValue()) {
                if (!existing.contains(p.range.partition())) {
                    throw gone(p);
                }
            }
        }
        return consumer.endOffsets(stalled.stream().map(p -> p.partition).collect(Collectors.toList()), timeout);
    }

    /** The failure of a read whose partition the cluster no longer has. */
    static RangeReadException gone(PartitionProgress p) {
        return new RangeReadException("source topic '" + p.range.topic() + "' partition " + p.range.partition()
                + " no longer exists (reading " + p.describe() + ")");
    }
}
