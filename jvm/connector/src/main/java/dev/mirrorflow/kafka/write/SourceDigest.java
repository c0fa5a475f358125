package dev.mirrorflow.kafka.write;

import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The completeness proof's source-side aggregates of one range, fed by the writer with each
 * committed record at the remote offset its span's syncs give it (see
 * {@code docs/architecture.md}, "The completeness proof"). An interface so that this package
 * stays free of Spark: the aggregates hash records with Spark's own XXH64
 * ({@code dev.mirrorflow.digest.RangeDigest}).
 */
public interface SourceDigest {

    /** Whether records added now still count (the upstream offsets ran contiguous so far). */
    boolean usable();

    /** A committed record, written at {@code downstream} with timestamp {@code timestampMs}. */
    void add(ConsumerRecord<byte[], byte[]> record, long downstream, long timestampMs);

    /** {@code {records, xor, xor_no_ts, first, last}} when every offset up to {@code end} was added; else null. */
    Map<String, Long> summary(long end);

    /** No aggregates: {@code source_digest} stays null. */
    SourceDigest NONE = new SourceDigest() {
        @Override
        public boolean usable() {
            return false;
        }

        @Override
        public void add(ConsumerRecord<byte[], byte[]> record, long downstream, long timestampMs) {
        }

        @Override
        public Map<String, Long> summary(long end) {
            return null;
        }
    };
}
