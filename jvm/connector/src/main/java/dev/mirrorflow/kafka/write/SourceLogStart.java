package dev.mirrorflow.kafka.write;

/**
 * Asks the source cluster where a partition's log starts now (its log start offset): the
 * writer tells records removed by retention (log start past the expected offset) from records
 * compacted away or transaction markers (log start at or before it). The Spark task asks
 * through the consumer that reads the ranges ({@code beginningOffsets}).
 */
@FunctionalInterface
public interface SourceLogStart {

    /** The log start offset of the source's {@code topic} partition {@code partition}. */
    long of(String topic, int partition);
}
