package dev.mirrorflow.kafka.write;

import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InterruptException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A range's first record beyond where its writing was to start: retention, or compaction?
 * The source's log start tells them apart. At or before the expected offset, the missing
 * offsets were compacted away or held transaction markers: nothing was lost. Past it,
 * retention removed records before they were mirrored: with {@code failOnDataLoss} the write
 * fails naming them ({@link DataLossException}, worded as the Python writer words it), else the
 * range's result records the gap.
 */
final class Retention {

    private static final Logger LOG = LoggerFactory.getLogger(Retention.class);

    private Retention() {
    }

    static void check(RangeState state, long firstOffset, SourceLogStart logStart) {
        if (firstOffset <= state.next) {
            return;
        }
        WriteTask task = state.task;
        long start;
        try {
            start = logStart.of(task.topic(), task.partition());
        } catch (InterruptException e) {
            throw e;
        } catch (KafkaException e) {
            throw new WriteException("source " + task.source() + ": records from offset " + state.next
                    + " on are missing and the log start cannot be read: " + Failures.describe(e), e);
        }
        if (start <= state.next) {
            return;
        }
        long gapEnd = Math.min(start, firstOffset);
        if (task.failOnDataLoss()) {
            throw new DataLossException("source " + task.source() + ": offsets " + state.next + ".." + (gapEnd - 1)
                    + " of the planned range " + task.start() + ".." + (task.end() - 1) + " were removed by retention"
                    + " before they were mirrored; nothing after them was written. Set " + task.flow()
                    + ".failOnDataLoss = false to skip them");
        }
        LOG.warn("data loss on {}: offsets {}..{} skipped", task.where(), state.next, gapEnd - 1);
        state.result.gaps.add(new long[] {state.next, gapEnd});
    }
}
