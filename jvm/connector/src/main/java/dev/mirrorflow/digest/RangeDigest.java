package dev.mirrorflow.digest;

import java.util.LinkedHashMap;
import java.util.Map;

import dev.mirrorflow.kafka.write.SourceDigest;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The proof's source-side aggregates of one range, from the records as written (Python
 * {@code quality.digests.RangeDigest}): the count, the XOR of the placement hashes with and
 * without timestamps, the first and last remote offsets. Usable only while the upstream offsets
 * run contiguous from the range's start: otherwise nothing can be told of records the read may
 * have missed, and the proof reads the source again. {@link #summary} gives them only when this
 * attempt wrote the whole range.
 */
public final class RangeDigest implements SourceDigest {

    private final long start;
    private final boolean withHeaders;
    private final DigestSums sums = new DigestSums();
    private long nextUpstream;
    private boolean usable = true;

    /**
     * The aggregates of a range starting at upstream offset {@code start}.
     *
     * @param withHeaders false where the schema transfer drops headers: records are hashed as if
     *                    they had none ({@link RecordDigest#withoutTimestamp})
     */
    public RangeDigest(long start, boolean withHeaders) {
        this.start = start;
        this.withHeaders = withHeaders;
        this.nextUpstream = start;
    }

    /** Whether records added now still count. */
    @Override
    public boolean usable() {
        return usable;
    }

    /** Gives up: a record was not where contiguous offsets from the start would put it. */
    public void unusable() {
        usable = false;
    }

    /**
     * A record's digest without its timestamp, of its key, value and headers (a record without
     * headers has a null headers column, as Spark's Kafka source gives it).
     */
    @Override
    public long hash(ConsumerRecord<byte[], byte[]> record) {
        return RecordDigest.withoutTimestamp(record.key(), record.value(), RecordDigest.headers(record), withHeaders);
    }

    /**
     * One committed record: its upstream offset, its remote offset (where its span's syncs put
     * it), its digest without the timestamp and its timestamp as written, in microseconds.
     */
    @Override
    public void add(long upstream, long downstream, long digestNoTs, long timestampMicros) {
        if (!usable) {
            return;
        }
        if (upstream != nextUpstream) {
            usable = false;
            return;
        }
        sums.add(digestNoTs, timestampMicros, downstream);
        nextUpstream = upstream + 1;
    }

    /** {@code {records, xor, xor_no_ts, first, last}} when every offset of {@code [start, end)} was added; else null. */
    @Override
    public Map<String, Long> summary(long end) {
        if (!usable || nextUpstream != end || sums.records() == 0) {
            return null;
        }
        Map<String, Long> out = new LinkedHashMap<>();
        out.put("records", sums.records());
        out.put("xor", sums.xor());
        out.put("xor_no_ts", sums.xorNoTs());
        out.put("first", sums.first());
        out.put("last", sums.last());
        return out;
    }

    /** The range's start. */
    public long start() {
        return start;
    }
}
