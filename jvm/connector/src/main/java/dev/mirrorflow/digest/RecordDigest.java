package dev.mirrorflow.digest;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.unsafe.Platform;

/**
 * The completeness proof's per-record digest, computed in the JVM bit for bit as Spark SQL
 * computes it (Python {@code quality.digests.record_digest}):
 * {@code xxhash64(key, value, to_json(headers), key IS NULL, value IS NULL, headers IS NULL[, timestamp])}.
 *
 * <p>Spark's {@code xxhash64} starts from seed 42 and hashes each argument with the previous
 * hash as its seed, skipping nulls: binary with {@code XXH64.hashUnsafeBytes}, a string as its
 * UTF-8 bytes the same way, a boolean as {@code hashInt(1 or 0)}, a timestamp as
 * {@code hashLong(microseconds)}. Spark's own {@link XXH64} class does the hashing here, so the
 * writer's digests and the proof's Spark SQL ones cannot disagree. The timestamp comes last, so
 * the digest with it is {@code hashLong(micros, digest without it)}.
 *
 * <p>Headers are Spark's value of the column: {@code null} for no headers (Spark's Kafka source,
 * and {@code mirrorflow-kafka}, give a record without headers a null array), an array otherwise.
 */
public final class RecordDigest {

    /** Spark's seed for {@code xxhash64}. */
    public static final long SEED = 42L;

    private RecordDigest() {
    }

    /**
     * The digest without the timestamp ({@code record_digest(F, F.lit(False), headers=withHeaders)}).
     *
     * @param headers     the headers column's value: null, or an array (possibly empty)
     * @param withHeaders false where the schema transfer drops headers: the record is then hashed
     *                    as if it had none
     */
    public static long withoutTimestamp(byte[] key, byte[] value, Header[] headers, boolean withHeaders) {
        long hash = SEED;
        if (key != null) {
            hash = bytes(key, hash);
        }
        if (value != null) {
            hash = bytes(value, hash);
        }
        boolean noHeaders = !withHeaders || headers == null;
        if (!noHeaders) {
            hash = bytes(HeadersJson.utf8(headers), hash);
        }
        hash = XXH64.hashInt(key == null ? 1 : 0, hash);
        hash = XXH64.hashInt(value == null ? 1 : 0, hash);
        return XXH64.hashInt(noHeaders ? 1 : 0, hash);
    }

    /** A record's headers as the headers column holds them: null for none, as Spark's Kafka source gives them. */
    public static Header[] headers(ConsumerRecord<?, ?> record) {
        Header[] headers = record.headers().toArray();
        return headers.length == 0 ? null : headers;
    }

    /** The digest with the timestamp, from the one without it. */
    public static long withTimestamp(long digestWithoutTimestamp, long timestampMicros) {
        return XXH64.hashLong(timestampMicros, digestWithoutTimestamp);
    }

    /** The placement hash {@code xxhash64(digest, remoteOffset)} the proof XORs per range. */
    public static long placement(long digest, long remoteOffset) {
        return XXH64.hashLong(remoteOffset, XXH64.hashLong(digest, SEED));
    }

    private static long bytes(byte[] data, long seed) {
        return XXH64.hashUnsafeBytes(data, Platform.BYTE_ARRAY_OFFSET, data.length, seed);
    }
}
