package dev.mirrorflow.kafka.read;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.Supplier;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * A value per partition of the records one task reads, in the order the partitions were first
 * seen: what a summarising read (the proof's sums, the schema id scan) keeps. A read gives a
 * partition's records in runs, so the last partition's value is kept at hand and a record of
 * the same partition costs no map lookup. Not thread-safe.
 *
 * @param <V> the value kept per partition
 */
public final class PerPartition<V> {

    private final Map<TopicPartition, V> values = new LinkedHashMap<>();
    private final Supplier<V> empty;
    private TopicPartition last;
    private V lastValue;

    /** @param empty makes a partition's value when its first record comes */
    public PerPartition(Supplier<V> empty) {
        this.empty = empty;
    }

    /** The value of {@code record}'s partition, made at its first record. */
    public V of(ConsumerRecord<?, ?> record) {
        if (last == null || last.partition() != record.partition() || !last.topic().equals(record.topic())) {
            last = new TopicPartition(record.topic(), record.partition());
            lastValue = values.computeIfAbsent(last, tp -> empty.get());
        }
        return lastValue;
    }

    /** Each partition that had a record, with its value, in the order first seen. */
    public Map<TopicPartition, V> all() {
        return values;
    }
}
