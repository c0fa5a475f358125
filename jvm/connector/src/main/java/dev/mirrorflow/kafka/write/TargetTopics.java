package dev.mirrorflow.kafka.write;

import java.time.Duration;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.errors.InterruptException;

/**
 * Checks, when a slot writer opens, that the spans topic and every remote partition exist on
 * the target. The Java producer would otherwise wait for a missing topic's metadata for
 * {@code max.block.ms} at each record (and its metadata requests may create topics on a broker
 * with {@code auto.create.topics.enable}); the progress consumer asks without creating anything.
 * The driver creates the spans topic, and topic sync the remote topics, before the write.
 *
 * <p>One metadata request answers for every topic of the slot ({@code listTopics}): asked topic
 * by topic, a slot of 2,500 remote topics spent a round trip on each.
 */
final class TargetTopics {

    private static final Duration TIMEOUT = Duration.ofSeconds(30);

    private TargetTopics() {
    }

    /** Checks the slot's topics; returns them: the spans topic, then each remote topic once. */
    static Set<String> check(Consumer<byte[], byte[]> consumer, WriterConfig config, List<WriteTask> tasks, String where) {
        Set<String> topics = new LinkedHashSet<>();
        topics.add(config.spansTopic());
        tasks.forEach(t -> topics.add(t.remoteTopic()));
        Map<String, List<PartitionInfo>> known;
        try {
            known = consumer.listTopics(TIMEOUT);
        } catch (InterruptException e) {
            throw e;
        } catch (KafkaException e) {
            throw new WriteException("cluster " + config.cluster() + ", writing " + where + ": cannot look up topic "
                    + topics.iterator().next() + " and " + (topics.size() - 1) + " more: " + Failures.describe(e), e);
        }
        List<PartitionInfo> spans = known.get(config.spansTopic());
        if (spans == null || spans.isEmpty()) {
            throw new WriteException("writing " + where + ": cannot write its span records to " + config.spansTopic()
                    + " on cluster " + config.cluster() + ": Unknown topic or partition (the topic does not exist)"
                    + "; nothing of the transaction was committed");
        }
        for (WriteTask t : tasks) {
            List<PartitionInfo> partitions = known.get(t.remoteTopic());
            int count = partitions == null ? 0 : partitions.size();
            if (t.partition() >= count) {
                throw new WriteException("cannot write " + t.source() + " to " + t.remoteTopic() + ": cluster "
                        + config.cluster() + (count == 0 ? " has no topic " + t.remoteTopic()
                        : " has only " + count + " partitions of " + t.remoteTopic()));
            }
        }
        return topics;
    }
}
