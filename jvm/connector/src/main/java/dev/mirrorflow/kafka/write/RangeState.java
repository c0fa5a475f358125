package dev.mirrorflow.kafka.write;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * One range's state inside a {@link SlotWriter} (Python {@code transaction.RangeState}): the
 * next upstream offset to write, its slices in the open transaction, and what the result
 * reports.
 */
final class RangeState {

    final WriteTask task;
    final RangeResult result;
    /** The next upstream offset to write. */
    long next;
    boolean startChecked;
    /** Records of it reached the writer. */
    boolean seen;
    /** Its slices in the open transaction, in order. */
    final List<Slice> txn = new ArrayList<>();
    final AgeStats age = new AgeStats();
    final AgeStats latency = new AgeStats();
    AgeStats.Timestamps uncommitted = new AgeStats.Timestamps();
    final SourceDigest digest;

    RangeState(WriteTask task, Function<WriteTask, SourceDigest> digests) {
        this.task = task;
        this.result = new RangeResult(task);
        this.next = task.start();
        this.digest = digests.apply(task);
    }

    /** The timestamp {@code record} is written with: its own, or the plan's time for one at or
     * before the epoch (or none), which the proof expects the same way. */
    long stamp(ConsumerRecord<byte[], byte[]> record) {
        long ts = record.timestamp();
        return ts <= 0 ? task.restampMs() : ts;
    }

    /**
     * Accounts its part of a committed transaction: {@code mine} are its spans in it, {@code atMs}
     * the commit's time. The proof's digests place each record where its span's syncs say, so
     * that a wrong sync fails the proof instead of sending a consumer astray after failover.
     */
    void committed(List<Span> mine, double atMs) {
        List<Span.Sync> syncs = new ArrayList<>();
        for (Span span : mine) {
            syncs.addAll(span.syncs());
        }
        syncs.sort((a, b) -> Long.compare(a.upstream(), b.upstream()));
        for (Slice slice : txn) {
            addDigests(slice, syncs);
            result.bytesWritten += slice.bytes;
        }
        for (Span span : mine) {
            result.spans.add(span.json());
            result.recordsWritten += span.records();
            if (result.firstDownstream == null) {
                result.firstDownstream = span.downstreamFirst();
            }
            result.lastDownstream = span.downstreamLast();
        }
        // Records received but not yet committed are measured at the commit that takes them.
        latency.add(atMs, uncommitted);
        uncommitted = new AgeStats.Timestamps();
        txn.clear();
    }

    /**
     * Its spans in the open transaction, once delivered: runs of contiguous remote offsets;
     * null when a slice with only its ends' offsets kept was interleaved by another producer.
     */
    List<Span> spans() {
        int n = 0;
        for (Slice slice : txn) {
            n += slice.size();
        }
        long[] upstream = new long[n];
        long[] downstream = new long[n];
        int at = 0;
        for (Slice slice : txn) {
            long[] offsets = slice.downstream();
            if (offsets == null) {
                return null;
            }
            for (int i = 0; i < offsets.length; i++, at++) {
                upstream[at] = slice.upstream(i);
                downstream[at] = offsets[i];
            }
        }
        List<Span> spans = new ArrayList<>();
        int from = 0;
        for (int i = 1; i <= n; i++) {
            if (i == n || downstream[i] != downstream[i - 1] + 1) {
                spans.add(Span.of(task, upstream, downstream, from, i));
                from = i;
            }
        }
        return spans;
    }

    /** Feeds a committed slice to the proof's aggregates, each record where {@code syncs} put it. */
    private void addDigests(Slice slice, List<Span.Sync> syncs) {
        for (int i = 0; i < slice.size() && digest.usable(); i++) {
            long upstream = slice.upstream(i);
            digest.add(upstream, Span.shift(syncs, upstream), slice.hash(i), slice.stamp(i) * 1000);
        }
    }

    /** The last upstream offset of its records in the open transaction. */
    long lastUpstream() {
        return txn.get(txn.size() - 1).lastUpstream();
    }
}
