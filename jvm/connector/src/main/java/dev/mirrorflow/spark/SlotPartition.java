package dev.mirrorflow.spark;

import java.util.List;
import java.util.stream.IntStream;

import dev.mirrorflow.kafka.read.TopicRange;
import dev.mirrorflow.kafka.write.WriteTask;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One write slot of a mirror read: its ranges, each read from its {@code readStarts} entry to
 * its end and written by one slot writer, in one task. Serialized into the task.
 *
 * @param slot       the slot's number
 * @param tasks      its ranges
 * @param readStarts where each range's read starts (the driver's look at the resume positions)
 */
public record SlotPartition(int slot, List<WriteTask> tasks, List<Long> readStarts) implements InputPartition {

    private static final long serialVersionUID = 1L;

    /** The source ranges to read, one per task. */
    public List<TopicRange> readRanges() {
        return IntStream.range(0, tasks.size())
                .mapToObj(i -> new TopicRange(tasks.get(i).topic(), tasks.get(i).partition(), readStarts.get(i),
                        tasks.get(i).end()))
                .toList();
    }
}
