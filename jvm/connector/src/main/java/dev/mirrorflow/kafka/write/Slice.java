package dev.mirrorflow.kafka.write;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.RecordMetadata;

/**
 * Records of one range produced one after another inside one transaction, waiting for their
 * remote offsets.
 *
 * <p>Each record's send carries a {@link Delivery} callback, which keeps the first failure of
 * the slice with its upstream offset. Only the first and last record's remote offsets are kept,
 * unless the slice is <em>careful</em>: one producer's records of one partition land in the order
 * sent and, within a transaction, next to each other, unless another producer's batch lands in
 * between (a second flow writing the same remote partition, or anything else). So the ends
 * give every offset when {@code last - first == n - 1}; otherwise {@link #downstream()} says it
 * cannot tell, and the writer writes the transaction again keeping every record's offset.
 *
 * <p>Of each record the slice keeps three numbers until the transaction commits, not the
 * record: its upstream offset, its digest ({@link SourceDigest#hash}) and the timestamp it was
 * sent with. A transaction written again reads its records from the source again
 * ({@link SourceRecords}). Callbacks run on the producer's I/O thread and write only their own
 * {@link Delivery}; the writer reads them after {@code flush()}, which returns once every
 * callback has run.
 */
final class Slice {

    final RangeState range;
    final boolean careful;
    private long[] upstream = new long[16];
    private long[] hashes = new long[16];
    private long[] stamps = new long[16];
    private int size;
    private final List<Delivery> deliveries;
    private Delivery first;
    private Delivery last;
    /** Key and value bytes of the records (what MM2's byte-count metric counts). */
    long bytes;
    private String error;
    private Exception cause;

    Slice(RangeState range, boolean careful) {
        this.range = range;
        this.careful = careful;
        this.deliveries = careful ? new ArrayList<>() : null;
    }

    /**
     * Adds a record about to be sent with timestamp {@code stamp}, its digest {@code hash};
     * returns the callback its send carries.
     */
    Callback add(ConsumerRecord<byte[], byte[]> record, long stamp, long hash) {
        if (size == upstream.length) {
            upstream = Arrays.copyOf(upstream, size * 2);
            hashes = Arrays.copyOf(hashes, size * 2);
            stamps = Arrays.copyOf(stamps, size * 2);
        }
        upstream[size] = record.offset();
        hashes[size] = hash;
        stamps[size] = stamp;
        size++;
        bytes += (record.key() == null ? 0 : record.key().length) + (record.value() == null ? 0 : record.value().length);
        Delivery delivery = new Delivery(this, record.offset());
        if (careful) {
            deliveries.add(delivery);
        } else if (first == null) {
            first = delivery;
        }
        last = delivery;
        return delivery;
    }

    int size() {
        return size;
    }

    /** The upstream offset of its {@code i}th record. */
    long upstream(int i) {
        return upstream[i];
    }

    /** The digest of its {@code i}th record. */
    long hash(int i) {
        return hashes[i];
    }

    /** The timestamp its {@code i}th record was sent with. */
    long stamp(int i) {
        return stamps[i];
    }

    long firstUpstream() {
        return upstream[0];
    }

    long lastUpstream() {
        return upstream[size - 1];
    }

    /** {@code offset N: <error>} of the first failed record, or null. */
    synchronized String error() {
        return error;
    }

    /** The first failed record's exception, or null. */
    synchronized Exception cause() {
        return cause;
    }

    private synchronized void failed(long upstream, Exception e) {
        if (error == null) {
            error = "offset " + upstream + ": " + Failures.describe(e);
            cause = e;
        }
    }

    /** Every record's remote offset, or null when the ends alone cannot tell them. */
    long[] downstream() {
        int n = size;
        long[] out = new long[n];
        if (careful) {
            for (int i = 0; i < n; i++) {
                out[i] = deliveries.get(i).offset;
            }
            return out;
        }
        long from = first.offset;
        if (last.offset - from != n - 1 || from < 0) {
            return null;
        }
        for (int i = 0; i < n; i++) {
            out[i] = from + i;
        }
        return out;
    }

    /** One record's delivery: its remote offset, or the slice's failure. */
    static final class Delivery implements Callback {

        private final Slice slice;
        private final long upstream;
        long offset = -1;

        Delivery(Slice slice, long upstream) {
            this.slice = slice;
            this.upstream = upstream;
        }

        @Override
        public void onCompletion(RecordMetadata metadata, Exception exception) {
            if (exception != null) {
                slice.failed(upstream, exception);
            } else {
                offset = metadata.offset();
            }
        }
    }
}
