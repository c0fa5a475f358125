package dev.mirrorflow.digest;

/**
 * The proof's sums of a set of records at their places: the count, the XOR of the placement
 * hashes {@code xxhash64(digest, offset)} with and without the timestamp
 * ({@link RecordDigest#placement}), the first and last offsets. Python's
 * {@code quality.compare} sums the same in Spark SQL ({@code count}, {@code bit_xor},
 * {@code min}, {@code max}).
 */
public final class DigestSums {

    private long records;
    private long xor;
    private long xorNoTs;
    private long first = Long.MAX_VALUE;
    private long last = Long.MIN_VALUE;

    /** Adds a record: its digest without the timestamp, its timestamp in microseconds, its offset. */
    public void add(long digestNoTs, long timestampMicros, long offset) {
        records++;
        xor ^= RecordDigest.placement(RecordDigest.withTimestamp(digestNoTs, timestampMicros), offset);
        xorNoTs ^= RecordDigest.placement(digestNoTs, offset);
        first = Math.min(first, offset);
        last = Math.max(last, offset);
    }

    /** Records added. */
    public long records() {
        return records;
    }

    /** XOR of {@code xxhash64(digest with the timestamp, offset)}. */
    public long xor() {
        return xor;
    }

    /** XOR of {@code xxhash64(digest without the timestamp, offset)}. */
    public long xorNoTs() {
        return xorNoTs;
    }

    /** The lowest offset added. */
    public long first() {
        return first;
    }

    /** The highest offset added. */
    public long last() {
        return last;
    }
}
