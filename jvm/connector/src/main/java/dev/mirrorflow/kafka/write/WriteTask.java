package dev.mirrorflow.kafka.write;

import java.io.Serializable;
import java.util.Objects;

import org.apache.kafka.common.TopicPartition;

/**
 * One planned range as the writer of its write slot sees it: the fields of the Python
 * {@code mirrorflow.source.write_task.WriteTask}, with the same meanings.
 *
 * @param flow            the flow's name, {@code <source>-><target>}
 * @param planId          the plan's id: the metadata of every resume position the plan commits
 * @param topic           the source topic
 * @param partition       the partition, the same number on both sides
 * @param remoteTopic     the topic it is written to on the target
 * @param start           the range's first upstream offset
 * @param end             the offset after its last one
 * @param maxMessageBytes the remote topic's {@code max.message.bytes}; 0 when unknown
 * @param failOnDataLoss  whether records lost to retention fail the write ({@link DataLossException})
 *                        or are recorded as a gap
 * @param exactlyOnce     the flow's {@code exactly.once.support}: {@code required} fails where the
 *                        target refuses transactions, anything else falls back to at-least-once
 * @param chunkRecords    the most records one transaction holds
 * @param writtenUntil    the next upstream offset earlier attempts of the plan left (its spans)
 * @param restampMs       the plan's time: what a timestamp at or before the epoch becomes
 * @param slot            the plan's write slot for the range (fixes the transactional id)
 */
public record WriteTask(String flow, String planId, String topic, int partition, String remoteTopic, long start,
                        long end, long maxMessageBytes, boolean failOnDataLoss, String exactlyOnce,
                        int chunkRecords, long writtenUntil, long restampMs, int slot) implements Serializable {

    private static final long serialVersionUID = 1L;

    /** Checks what the writer relies on. */
    public WriteTask {
        Objects.requireNonNull(flow, "flow");
        Objects.requireNonNull(planId, "planId");
        Objects.requireNonNull(topic, "topic");
        Objects.requireNonNull(remoteTopic, "remoteTopic");
        Objects.requireNonNull(exactlyOnce, "exactlyOnce");
        if (chunkRecords <= 0) {
            throw new IllegalArgumentException("chunkRecords must be > 0, got " + chunkRecords);
        }
    }

    /** The transactional id of a flow's write slot, fixed across attempts and plans, so that a
     * new writer of a range fences every earlier one (KIP-98). */
    public static String transactionalId(String flow, int slot) {
        return "mirrorflow|" + flow + "|write-" + slot;
    }

    /** The flow's source cluster alias (before {@code ->}). */
    public String sourceAlias() {
        int arrow = flow.indexOf("->");
        return arrow < 0 ? flow : flow.substring(0, arrow);
    }

    /** The flow's target cluster alias (after {@code ->}). */
    public String targetAlias() {
        int arrow = flow.indexOf("->");
        return arrow < 0 ? flow : flow.substring(arrow + 2);
    }

    /** {@code orders[0]}. */
    public String source() {
        return topic + "[" + partition + "]";
    }

    /** {@code orders[0] -> a.orders[0]}, as messages name a range. */
    public String where() {
        return source() + " -> " + remoteTopic + "[" + partition + "]";
    }

    /** The source partition. */
    public TopicPartition sourcePartition() {
        return new TopicPartition(topic, partition);
    }

    /** The remote partition. */
    public TopicPartition remotePartition() {
        return new TopicPartition(remoteTopic, partition);
    }
}
