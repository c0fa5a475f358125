package dev.mirrorflow.spark;

import java.util.List;

import dev.mirrorflow.kafka.read.TopicRange;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One group of ranges, read by one task with one consumer (at most one range per
 * partition). Serialized into the task.
 *
 * @param ranges the group's ranges
 */
record RangeGroupPartition(List<TopicRange> ranges) implements InputPartition {

    private static final long serialVersionUID = 1L;
}
