package dev.mirrorflow.kafka.write;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.TimeoutException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The transactions of one write slot (Python {@code source.transaction.SlotTransactions}, the
 * base of {@link SlotWriter}): begin, settle each slice's remote offsets into span records,
 * commit records, spans and resume positions together, and for a passing cause abort and write
 * the transaction again.
 *
 * <p>Each transaction carries, atomically with its records, the span record of every range it
 * wrote to and that range's new resume position, committed to the progress group with
 * {@code sendOffsetsToTransaction} (KIP-98; KIP-447's consumer-group metadata, as Kafka Streams
 * and MM2's exactly-once mode commit their source positions). Where the target refuses
 * transactions the same steps run at-least-once: flushed, then the positions committed with
 * the admin client.
 */
abstract class SlotTransactions extends SlotState {

    private static final Logger LOG = LoggerFactory.getLogger(SlotTransactions.class);

    /** Attempts of one transaction before a passing cause fails the write. */
    static final int TRANSACTION_ATTEMPTS = 3;

    /** Slices being written again, kept until all are (a failure midway rewrites them all). */
    private List<Slice> pending;
    private int aborts;
    private final LedgerWrites ledger;
    private final SourceRecords source;

    SlotTransactions(List<WriteTask> tasks, WriterConfig config, WriteClients clients, SourceRecords source,
                     Function<WriteTask, SourceDigest> digests) {
        super(tasks, config, clients, digests);
        this.ledger = new LedgerWrites(config, clients);
        this.source = source;
    }

    /** Produces one record of a range into the open transaction (see {@link SlotWriter}). */
    abstract void produce(RangeState state, ConsumerRecord<byte[], byte[]> record);

    /** Opens a transaction (in transactional mode) and forgets the last one's slices. */
    void begin() {
        if (transactional) {
            try {
                producer.beginTransaction();
            } catch (InterruptException e) {
                throw e;
            } catch (KafkaException e) {
                throw Failures.fenced(e) ? transactionFailed(e) : new WriteException("writing " + where()
                        + ": cannot begin a transaction: " + Failures.describe(e), e);
            }
        }
        for (RangeState state : ranges.values()) {
            state.txn.clear();
        }
        open.clear();
        current = null;
        txnRecords = 0;
        txnBytes = 0;
    }

    /** Waits for the open transaction's records, then writes the spans and resume position of
     * every range in it into it and commits: data, spans and positions land together. */
    void commit() {
        List<RangeState> touched = openRanges();
        if (touched.isEmpty()) {
            if (transactional) {
                try {
                    producer.abortTransaction();
                } catch (InterruptException e) {
                    throw e;
                } catch (KafkaException e) {
                    throw Failures.fenced(e) ? transactionFailed(e) : new WriteException("writing " + where()
                            + ": cannot end an empty transaction: " + Failures.describe(e), e);
                }
            }
            return;
        }
        Map<RangeState, List<Span>> spans;
        while (true) {
            try {
                spans = commitOnce(touched);
                break;
            } catch (Abortable e) {
                writeAgain(e.reason);
            }
        }
        aborts = 0;
        committed(touched, spans);
    }

    private Map<RangeState, List<Span>> commitOnce(List<RangeState> touched) {
        Map<RangeState, List<Span>> spans = settle(touched);
        if (spans == null) {
            LOG.warn("{}: another producer writes to a remote partition of this slot; writing with the remote "
                    + "offset of every record kept from now on", where());
            careful = true;
            rewrite();
            spans = settle(touched);
            if (spans == null) {
                throw new WriteException(where() + ": remote offsets of one record are not contiguous with themselves");
            }
        }
        List<Span> all = new ArrayList<>();
        for (RangeState state : touched) {
            all.addAll(spans.get(state));
        }
        try {
            ledger.sendSpans(producer, all, spanRecordBytes);
        } catch (InterruptException e) {
            throw e;
        } catch (KafkaException e) {
            throw failed(e, spansFailed(e));
        }
        Map<TopicPartition, OffsetAndMetadata> positions = new LinkedHashMap<>();
        for (RangeState state : touched) {
            positions.put(state.task.remotePartition(), new OffsetAndMetadata(state.lastUpstream() + 1,
                    state.task.planId()));
        }
        try {
            if (transactional) {
                producer.sendOffsetsToTransaction(positions, group);
                commitTransaction();
            } else {
                producer.flush();
                List<Exception> failed = ledger.spanErrors();
                if (!failed.isEmpty()) {
                    throw spansFailed(failed.get(0));
                }
                ledger.commitPositions(positions, where());
            }
        } catch (InterruptException e) {
            throw e;
        } catch (KafkaException e) {
            for (Exception failed : ledger.spanErrors()) {
                if (!Failures.passing(failed) && !Failures.fatal(failed)) {
                    throw spansFailed(failed);
                }
            }
            throw failed(e, transactionFailed(e));
        }
        return spans;
    }

    /** What a failed call makes of the open transaction: failed for good (fatal), abortable
     * (passing, in a transaction) or {@code otherwise}. */
    private RuntimeException failed(KafkaException e, WriteException otherwise) {
        if (Failures.fatal(e)) {
            return transactionFailed(e);
        }
        if (transactional && Failures.passing(e)) {
            return new Abortable(Failures.describe(e));
        }
        return otherwise;
    }

    /**
     * {@code commitTransaction}; a timeout is retried (the Java client allows nothing else after
     * it: the commit may be completing), up to {@link #TRANSACTION_ATTEMPTS} calls.
     */
    private void commitTransaction() {
        for (int attempt = 1; ; attempt++) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) {
                if (attempt >= TRANSACTION_ATTEMPTS) {
                    throw transactionFailed(e);
                }
                LOG.warn("{}: commit attempt {} of {} timed out ({}); trying again", where(), attempt,
                        TRANSACTION_ATTEMPTS, e.getMessage());
            }
        }
    }

    WriteException spansFailed(Exception error) {
        return ledger.spansFailed(where(), error);
    }

    /** Accounts a committed transaction to its ranges. */
    private void committed(List<RangeState> touched, Map<RangeState, List<Span>> spans) {
        double at = System.currentTimeMillis();
        for (RangeState state : touched) {
            state.committed(spans.get(state), at);
        }
        open.clear();
        current = null;
    }

    /**
     * Every slice's remote offsets as span records per range (runs of contiguous remote offsets),
     * after the records are delivered; null when a slice with only its ends' offsets kept was
     * interleaved by another producer.
     */
    private Map<RangeState, List<Span>> settle(List<RangeState> touched) {
        flush(touched);
        Map<RangeState, List<Span>> out = new IdentityHashMap<>();
        for (RangeState state : touched) {
            List<Span> spans = state.spans();
            if (spans == null) {
                return null;
            }
            out.put(state, spans);
        }
        return out;
    }

    /** Waits for every record sent; a failed one makes the transaction abortable (passing cause)
     * or fails the write. */
    private void flush(List<RangeState> touched) {
        producer.flush();
        for (RangeState state : touched) {
            for (Slice slice : state.txn) {
                String error = slice.error();
                if (error == null) {
                    continue;
                }
                if (Failures.fatal(slice.cause())) {
                    throw transactionFailed(slice.cause());
                }
                if (transactional && Failures.passing(slice.cause())) {
                    throw new Abortable(state.task.where() + " " + error);
                }
                throw new WriteException("writing " + state.task.where() + ": " + error, slice.cause());
            }
        }
    }

    /**
     * A passing failure made the open transaction abortable: abort it and write its records
     * again, in a new one, unless it failed {@link #TRANSACTION_ATTEMPTS} times.
     */
    void writeAgain(String reason) {
        while (true) {
            aborts++;
            if (aborts >= TRANSACTION_ATTEMPTS) {
                throw transactionFailed(reason);
            }
            LOG.warn("{}: transaction attempt {} of {} aborted ({}); writing it again", where(), aborts,
                    TRANSACTION_ATTEMPTS, reason);
            try {
                rewrite();
                return;
            } catch (Abortable e) {
                reason = e.reason;
            }
        }
    }

    /**
     * Aborts the open transaction and produces its slices again in a new one, their records read
     * from the source again (one read of every partition the transaction touched). A record
     * the source no longer holds fails the write: the aborted transaction is gone, so the
     * task's retry reads the range from its resume position and finds the loss (or the
     * compaction) the way a first read does.
     */
    private void rewrite() {
        if (pending == null) {
            pending = new ArrayList<>(open);
        }
        try {
            producer.abortTransaction();
        } catch (InterruptException e) {
            throw e;
        } catch (KafkaException e) {
            throw transactionFailed(e);
        }
        Map<TopicPartition, long[]> spans = new LinkedHashMap<>();
        for (Slice slice : pending) {
            long[] span = spans.computeIfAbsent(slice.range.task.sourcePartition(),
                    tp -> new long[] {slice.firstUpstream(), slice.lastUpstream()});
            span[0] = Math.min(span[0], slice.firstUpstream());
            span[1] = Math.max(span[1], slice.lastUpstream());
        }
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> read = source.read(spans);
        List<List<ConsumerRecord<byte[], byte[]>>> again = new ArrayList<>();
        for (Slice slice : pending) {
            again.add(readAgain(slice, read.getOrDefault(slice.range.task.sourcePartition(), List.of())));
        }
        begin();
        for (int i = 0; i < pending.size(); i++) {
            for (ConsumerRecord<byte[], byte[]> record : again.get(i)) {
                produce(pending.get(i).range, record);
            }
        }
        pending = null;
    }

    /**
     * The slice's records among its partition's records read again (in offset order): exactly
     * the upstream offsets it held.
     */
    private static List<ConsumerRecord<byte[], byte[]>> readAgain(Slice slice, List<ConsumerRecord<byte[], byte[]>> read) {
        WriteTask task = slice.range.task;
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>(slice.size());
        int lo = 0;
        int hi = read.size();
        while (lo < hi) {  // the first record at or past the slice's first offset
            int mid = (lo + hi) >>> 1;
            if (read.get(mid).offset() < slice.firstUpstream()) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        for (int i = lo; i < read.size() && out.size() < slice.size(); i++) {
            if (read.get(i).offset() == slice.upstream(out.size())) {
                out.add(read.get(i));
            } else if (read.get(i).offset() > slice.upstream(out.size())) {
                break;
            }
        }
        if (out.size() < slice.size()) {
            throw new WriteException("writing " + task.where() + ": upstream offset " + slice.upstream(out.size())
                    + " of an aborted transaction is no longer on the source to be written again (retention or "
                    + "compaction since it was read); nothing of the transaction was committed, and the task's "
                    + "retry reads the range again from its resume position");
        }
        return out;
    }

    /** Closes the admin client, if any, without waiting. */
    void closeAdmin() {
        ledger.close();
    }
}
