package dev.mirrorflow.kafka.write;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RecordTooLargeException;

/**
 * What a slot writer knows of its ranges and of its open transaction (the slices produced into
 * it, the records and bytes it holds), and how a failure of the transaction or of a record is
 * named: the base of {@link SlotTransactions}. Messages name ranges as the Python writer does
 * ({@code orders[0] -> a.orders[0]}), the first range of a failed transaction with its upstream
 * offsets, and how many more ranges it held.
 */
abstract class SlotState {

    final List<WriteTask> tasks;
    final WriterConfig config;
    final WriteClients clients;
    /** The slot's ranges by source partition, in the order given. */
    final Map<TopicPartition, RangeState> ranges = new LinkedHashMap<>();

    Producer<byte[], byte[]> producer;
    ConsumerGroupMetadata group;
    boolean transactional;
    /** Every record's remote offset is kept, once another producer interleaved. */
    boolean careful;
    /** Why the slot writes without transactions, or null. */
    String atLeastOnce;
    /** The most bytes of spans one span record carries ({@link SpanRecords#limit}). */
    int spanRecordBytes = SpanRecords.MAX_BYTES;
    long txnRecords;
    long txnBytes;
    /** The open transaction's slices in the order produced. */
    final List<Slice> open = new ArrayList<>();
    Slice current;

    SlotState(List<WriteTask> tasks, WriterConfig config, WriteClients clients,
              Function<WriteTask, SourceDigest> digests) {
        this.tasks = List.copyOf(tasks);
        this.config = config;
        this.clients = clients;
        for (WriteTask task : tasks) {
            ranges.put(task.sourcePartition(), new RangeState(task, digests));
        }
    }

    /** {@code orders[0] -> a.orders[0] (and 2 more ranges of write slot 3)}. */
    String where() {
        String first = tasks.get(0).where();
        int more = tasks.size() - 1;
        return more > 0 ? first + " (and " + more + " more ranges of write slot " + tasks.get(0).slot() + ")" : first;
    }

    /** The slice {@code state}'s next record goes to: the open one when it is that range's, else a new one. */
    Slice sliceFor(RangeState state) {
        if (current == null || current.range != state) {
            current = new Slice(state, careful || !transactional);
            open.add(current);
            state.txn.add(current);
        }
        return current;
    }

    /** The ranges with records in the open transaction, in the order given. */
    List<RangeState> openRanges() {
        List<RangeState> out = new ArrayList<>();
        for (RangeState state : ranges.values()) {
            if (!state.txn.isEmpty()) {
                out.add(state);
            }
        }
        return out;
    }

    /**
     * The open transaction failed for good: names its first range's upstream offsets, how many
     * more ranges it held, and the cause.
     */
    WriteException transactionFailed(String cause) {
        return new WriteException(openTransaction() + " failed: " + cause);
    }

    /**
     * The open transaction failed for good on {@code e}: a {@link WriterFencedException} when a
     * newer producer of the slot's id fenced this one, else {@link #transactionFailed(String)}.
     */
    WriteException transactionFailed(Throwable e) {
        if (!Failures.fenced(e)) {
            return transactionFailed(Failures.describe(e));
        }
        WriteTask task = tasks.get(0);
        return new WriterFencedException(openTransaction() + ": write slot " + task.slot() + "'s producer ("
                + WriteTask.transactionalId(task.flow(), task.slot()) + ") was fenced on cluster " + config.cluster()
                + " by a newer one of the plan (another attempt of it) or for outliving transaction.timeout.ms; "
                + "its open transaction is aborted and this attempt stops, the newer attempt or the next run "
                + "finishes the plan (" + Failures.describe(e) + ")", e);
    }

    /** {@code writing orders[0] -> a.orders[0]: the transaction of upstream offsets 5..9 (and of 2 more
     * ranges of write slot 3)}, or {@code writing <where>: the transaction} when it holds no record. */
    private String openTransaction() {
        List<RangeState> touched = openRanges();
        if (touched.isEmpty()) {
            return "writing " + where() + ": the transaction";
        }
        RangeState state = touched.get(0);
        String more = touched.size() > 1 ? " (and of " + (touched.size() - 1) + " more ranges of write slot "
                + tasks.get(0).slot() + ")" : "";
        return "writing " + state.task.where() + ": the transaction of upstream offsets "
                + state.txn.get(0).firstUpstream() + ".." + state.lastUpstream() + more;
    }

    /** The first delivery failure of the open transaction, as {@code <where> offset N: <error>}, or null. */
    String firstDeliveryError() {
        for (RangeState state : openRanges()) {
            for (Slice slice : state.txn) {
                if (slice.error() != null) {
                    return state.task.where() + " " + slice.error();
                }
            }
        }
        return null;
    }

    /**
     * What a record's failed send makes of the write: the transaction failed for good (fatal),
     * abortable (a passing cause, in a transaction; named by the first delivery failure, as the
     * Python writer names it) or a lasting refusal of the record, with a hint when it is too
     * large for the producer.
     */
    RuntimeException sendFailed(RangeState state, ConsumerRecord<byte[], byte[]> record, Throwable e) {
        if (Failures.fatal(e)) {
            return transactionFailed(e);
        }
        if (transactional && Failures.passing(e)) {
            String earlier = firstDeliveryError();
            return new Abortable(earlier != null ? earlier
                    : state.task.where() + " offset " + record.offset() + ": " + Failures.describe(e));
        }
        WriteTask task = state.task;
        boolean tooLarge = Failures.anyCause(e, RecordTooLargeException.class::isInstance);
        return new WriteException("cannot write " + task.source() + " offset " + record.offset() + " to "
                + task.remoteTopic() + ": " + Failures.describe(e) + (tooLarge ? " (the producer's max.request.size on "
                + "cluster " + config.cluster() + " is below the record: raise " + config.targetAlias()
                + ".producer.max.request.size, then rerun)" : ""), e);
    }
}
