package dev.mirrorflow.kafka.write;

import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The completeness proof's source-side aggregates of one range: the writer hashes each record
 * as it sends it ({@link #hash}) and adds the hash once the record is committed, at the remote
 * offset its span's syncs give it ({@link #add}; see {@code docs/architecture.md}, "The
 * completeness proof"). Hashing at the send lets the writer keep a transaction's records as a
 * few numbers each instead of the records themselves. An interface so that this package stays
 * free of Spark: the aggregates hash records with Spark's own XXH64
 * ({@code dev.mirrorflow.digest.RangeDigest}).
 */
public interface SourceDigest {

    /** Whether records added now still count (the upstream offsets ran contiguous so far). */
    boolean usable();

    /** The record's digest without its timestamp, as {@link #add} takes it. */
    long hash(ConsumerRecord<byte[], byte[]> record);

    /**
     * A committed record: its upstream offset, the remote offset it was written at, its
     * {@link #hash} and the timestamp it was written with, in microseconds.
     */
    void add(long upstream, long downstream, long hash, long timestampMicros);

    /** {@code {records, xor, xor_no_ts, first, last}} when every offset up to {@code end} was added; else null. */
    Map<String, Long> summary(long end);

    /** No aggregates: {@code source_digest} stays null. */
    SourceDigest NONE = new SourceDigest() {
        @Override
        public boolean usable() {
            return false;
        }

        @Override
        public long hash(ConsumerRecord<byte[], byte[]> record) {
            return 0;
        }

        @Override
        public void add(long upstream, long downstream, long hash, long timestampMicros) {
        }

        @Override
        public Map<String, Long> summary(long end) {
            return null;
        }
    };
}
