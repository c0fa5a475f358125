package dev.mirrorflow.kafka.write;

import java.time.Duration;
import java.util.LinkedHashSet;
import java.util.List;
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
 */
final class TargetTopics {

    private static final Duration TIMEOUT = Duration.ofSeconds(30);

    private TargetTopics() {
    }

    static void check(Consumer<byte[], byte[]> consumer, WriterConfig config, List<WriteTask> tasks, String where) {
        Set<String> topics = new LinkedHashSet<>();
        topics.add(config.spansTopic());
        tasks.forEach(t -> topics.add(t.remoteTopic()));
        for (String topic : topics) {
            List<PartitionInfo> partitions;
            try {
                partitions = consumer.partitionsFor(topic, TIMEOUT);
            } catch (InterruptException e) {
                throw e;
            } catch (KafkaException e) {
                throw new WriteException("cluster " + config.cluster() + ", writing " + where + ": cannot look up topic "
                        + topic + ": " + Failures.describe(e), e);
            }
            int count = partitions == null ? 0 : partitions.size();
            if (topic.equals(config.spansTopic()) && count == 0) {
                throw new WriteException("writing " + where + ": cannot write its span records to " + topic
                        + " on cluster " + config.cluster() + ": Unknown topic or partition (the topic does not exist)"
                        + "; nothing of the transaction was committed");
            }
            for (WriteTask t : tasks) {
                if (t.remoteTopic().equals(topic) && t.partition() >= count) {
                    throw new WriteException("cannot write " + t.source() + " to " + t.remoteTopic() + ": cluster "
                            + config.cluster() + (count == 0 ? " has no topic " + topic
                            : " has only " + count + " partitions of " + topic));
                }
            }
        }
    }
}
