package dev.mirrorflow.kafka.write;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The span records of one writer transaction: its spans packed into as few records as fit, each
 * {@code {"spans":[<span>,...]}} (each {@code <span>} is {@link Span#json()}), keyed by its first
 * span's {@link Span#key()} (unique, and starting with the plan's id, by which a committed plan's
 * records are tombstoned). Python's {@code ledger.decode_spans} reads them, and the single-span
 * records earlier versions wrote.
 *
 * <p>One record per transaction rather than one per range: a slot's transaction touches every range
 * of the slot, and each record of the compacted spans topic is tombstoned at the plan's commit and
 * kept as a tombstone for the topic's {@code delete.retention.ms} (a day by default), read by every
 * later read of the topic. A record per range kept a flow of 1,000 partitions on a one-minute
 * schedule at some 1,440,000 tombstones, read from the log start several times a run.
 *
 * @param key   the record's key
 * @param value the record's value
 */
record SpanRecords(byte[] key, byte[] value) {

    /** The most JSON one record carries, unless its one span is larger. */
    static final int MAX_BYTES = 64 * 1024;

    /**
     * The bytes a record may carry under a producer whose {@code max.request.size} is
     * {@code maxRequestSize}: {@link #MAX_BYTES}, or half that bound where it is smaller (a
     * slot whose remote topics all take small records).
     */
    static int limit(long maxRequestSize) {
        return (int) Math.max(1, Math.min(MAX_BYTES, maxRequestSize / 2));
    }

    /** {@code spans} in order, packed into records of at most {@code maxBytes} bytes each. */
    static List<SpanRecords> pack(List<Span> spans, int maxBytes) {
        List<SpanRecords> out = new ArrayList<>();
        StringBuilder value = new StringBuilder();
        Span first = null;
        for (Span span : spans) {
            String json = span.json();
            if (first != null && value.length() + 1 + json.length() + 2 > maxBytes) {
                out.add(record(first, value));
                first = null;
            }
            if (first == null) {
                first = span;
                value.setLength(0);
                value.append("{\"spans\":[");
            } else {
                value.append(',');
            }
            value.append(json);
        }
        if (first != null) {
            out.add(record(first, value));
        }
        return out;
    }

    private static SpanRecords record(Span first, StringBuilder value) {
        return new SpanRecords(first.key(), value.append("]}").toString().getBytes(StandardCharsets.UTF_8));
    }
}
