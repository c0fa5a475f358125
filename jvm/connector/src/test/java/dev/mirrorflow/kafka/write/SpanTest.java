package dev.mirrorflow.kafka.write;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.List;

import org.junit.jupiter.api.Test;

class SpanTest {

    private static WriteTask task(String planId) {
        return new WriteTask("a->b", planId, "orders", 3, "a.orders", 0, 1000, 0, true, "requested", 100_000, 0, 0, 0);
    }

    @Test
    void aSyncWhereverTheDistanceChanges() {
        // Upstream 0, 2, 4 (a compacted source), then 5, 6 written after another producer's record.
        long[] up = {0, 2, 4, 5, 6};
        long[] down = {0, 1, 2, 4, 5};
        Span span = Span.of(task("p"), up, down, 0, 5);
        assertEquals(List.of(new Span.Sync(0, 0), new Span.Sync(2, 1), new Span.Sync(4, 2), new Span.Sync(5, 4)),
                span.syncs());
        assertEquals(5, span.records());
        assertEquals(0, span.upstreamFirst());
        assertEquals(6, span.upstreamLast());
        assertEquals(0, span.downstreamFirst());
        assertEquals(5, span.downstreamLast());
        Span tail = Span.of(task("p"), up, down, 3, 5);
        assertEquals(List.of(new Span.Sync(5, 4)), tail.syncs());
    }

    /** Byte for byte what Python's {@code ledger.Span.key()} and {@code value()} give (computed once), as
     * {@link SpanRecords} encodes them. */
    @Test
    void keyAndValueAreThePythonWritersBytes() {
        Span span = new Span("plan-\u00e9\"1", "orders", 3, "a.orders", 0, 549, 0, 299, 300,
                List.of(new Span.Sync(0, 0), new Span.Sync(2, 1), new Span.Sync(500, 250)));
        assertArrayEquals("plan-\u00e9\"1/orders/3/a.orders/0".getBytes(StandardCharsets.UTF_8), span.key());
        assertEquals("{\"plan\":\"plan-\\u00e9\\\"1\",\"topic\":\"orders\",\"partition\":3,\"remote\":\"a.orders\","
                + "\"u\":[0,549],\"d\":[0,299],\"n\":300,\"syncs\":[[0,0],[2,1],[500,250]]}",
                new String(span.json().getBytes(StandardCharsets.UTF_8), StandardCharsets.US_ASCII));
    }

    @Test
    void aTransactionsSpansArePackedIntoRecordsOfAtMostTheLimit() {
        List<Span> spans = new java.util.ArrayList<>();
        for (int p = 0; p < 5; p++) {
            spans.add(new Span("plan-1", "orders", p, "a.orders", 10, 12, 20, 22, 3, List.of(new Span.Sync(10, 20))));
        }
        int one = spans.get(0).json().length();
        assertEquals(1, SpanRecords.pack(spans, SpanRecords.MAX_BYTES).size());
        List<SpanRecords> records = SpanRecords.pack(spans, "{\"spans\":[]}".length() + 2 * one + 1);
        assertEquals(3, records.size());  // 2 + 2 + 1
        assertArrayEquals("plan-1/orders/2/a.orders/20".getBytes(StandardCharsets.UTF_8), records.get(1).key());
        assertEquals("{\"spans\":[" + spans.get(2).json() + "," + spans.get(3).json() + "]}",
                new String(records.get(1).value(), StandardCharsets.UTF_8));
        // A span larger than the limit goes alone.
        assertEquals(5, SpanRecords.pack(spans, 10).size());
        assertEquals(0, SpanRecords.pack(List.of(), 10).size());
        assertEquals(SpanRecords.MAX_BYTES, SpanRecords.limit(16 * 1024 * 1024));
        assertEquals(5_000, SpanRecords.limit(10_000));
    }

    @Test
    void pythonJsonEscapes() {
        StringBuilder out = new StringBuilder();
        PyJson.string(out, "a\nb\t\u0001\u007f/\\\ud83d\ude00");
        assertEquals("\"a\\nb\\t\\u0001\\u007f/\\\\\\ud83d\\ude00\"", out.toString());
    }

    @Test
    void shiftIsPiecewise() {
        List<Span.Sync> syncs = List.of(new Span.Sync(10, 0), new Span.Sync(20, 15));
        assertEquals(Long.MIN_VALUE, Span.shift(syncs, 9));
        assertEquals(0, Span.shift(syncs, 10));
        assertEquals(9, Span.shift(syncs, 19));
        assertEquals(15, Span.shift(syncs, 20));
        assertEquals(115, Span.shift(syncs, 120));
    }
}
