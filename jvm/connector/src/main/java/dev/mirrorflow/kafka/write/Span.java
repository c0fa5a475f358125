package dev.mirrorflow.kafka.write;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * One writer transaction's records of one range, as the ledger's span record holds them
 * (Python {@code mirrorflow.source.ledger.Span}): contiguous remote offsets
 * {@code [downstreamFirst, downstreamLast]} holding {@code records} records whose upstream
 * offsets run from {@code upstreamFirst} to {@code upstreamLast}; {@code syncs} are the
 * (upstream, downstream) pairs where the distance between them changes, the first record's pair
 * included.
 *
 * <p>Its key and JSON are byte for byte those of the Python writer (compact separators, the
 * field order of {@code Span.value()}, non-ASCII escaped as {@code json.dumps} does, so the JSON
 * is ASCII): the driver, the proof and the offset syncs read them ({@link SpanRecords}),
 * whichever writer wrote them.
 *
 * @param planId          the plan that wrote it
 * @param topic           the source topic
 * @param partition       the partition
 * @param remoteTopic     the remote topic
 * @param upstreamFirst   the first upstream offset
 * @param upstreamLast    the last upstream offset
 * @param downstreamFirst the first remote offset
 * @param downstreamLast  the last remote offset
 * @param records         how many records
 * @param syncs           the (upstream, downstream) pairs where the distance changes
 */
public record Span(String planId, String topic, int partition, String remoteTopic, long upstreamFirst,
                   long upstreamLast, long downstreamFirst, long downstreamLast, long records, List<Sync> syncs) {

    /** An upstream offset and the remote offset its record was written at. */
    public record Sync(long upstream, long downstream) {
    }

    /**
     * The span of records {@code from} (inclusive) to {@code to} (exclusive) of {@code upstream}
     * and {@code downstream}, whose remote offsets are contiguous.
     */
    public static Span of(WriteTask task, long[] upstream, long[] downstream, int from, int to) {
        List<Sync> syncs = new ArrayList<>();
        long delta = 0;
        for (int i = from; i < to; i++) {
            long d = downstream[i] - upstream[i];
            if (i == from || d != delta) {
                syncs.add(new Sync(upstream[i], downstream[i]));
                delta = d;
            }
        }
        return new Span(task.planId(), task.topic(), task.partition(), task.remoteTopic(), upstream[from],
                upstream[to - 1], downstream[from], downstream[to - 1], to - from, List.copyOf(syncs));
    }

    /** Unique per span, across attempts too: no two spans share a remote offset. */
    public byte[] key() {
        return (planId + "/" + topic + "/" + partition + "/" + remoteTopic + "/" + downstreamFirst)
                .getBytes(StandardCharsets.UTF_8);
    }

    /** {@code {"plan":...,"topic":...,"partition":0,"remote":...,"u":[a,b],"d":[c,d],"n":n,"syncs":[[u,d],...]}}. */
    public String json() {
        StringBuilder out = new StringBuilder(96 + 24 * syncs.size());
        out.append("{\"plan\":");
        PyJson.string(out, planId);
        out.append(",\"topic\":");
        PyJson.string(out, topic);
        out.append(",\"partition\":").append(partition).append(",\"remote\":");
        PyJson.string(out, remoteTopic);
        out.append(",\"u\":[").append(upstreamFirst).append(',').append(upstreamLast)
                .append("],\"d\":[").append(downstreamFirst).append(',').append(downstreamLast)
                .append("],\"n\":").append(records).append(",\"syncs\":[");
        for (int i = 0; i < syncs.size(); i++) {
            if (i > 0) {
                out.append(',');
            }
            out.append('[').append(syncs.get(i).upstream()).append(',').append(syncs.get(i).downstream()).append(']');
        }
        return out.append("]}").toString();
    }

    /**
     * Where piecewise-shift {@code syncs} (sorted by upstream offset) put {@code upstream}: the
     * Python {@code sync_check.shift}; {@code Long.MIN_VALUE} before the first sync.
     */
    public static long shift(List<Sync> syncs, long upstream) {
        int lo = 0;
        int hi = syncs.size();
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (syncs.get(mid).upstream() <= upstream) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if (lo == 0) {
            return Long.MIN_VALUE;
        }
        Sync at = syncs.get(lo - 1);
        return upstream + at.downstream() - at.upstream();
    }
}
