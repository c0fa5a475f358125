package dev.mirrorflow.kafka.write;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes the planned ranges of one write slot to their remote partitions, exactly once, with one
 * transactional producer (as the first, Python writer did, whose behaviour and
 * stored state it reproduces). Use: {@link #open()}, {@link #write} for each record,
 * {@link #close()}; after a failure {@link #abort()}; in every case {@link #release()}.
 *
 * <ol>
 *   <li><b>Fence</b>: the producer's {@code transactional.id} is fixed per flow and slot
 *       ({@code mirrorflow|<flow>|write-<slot>}), so {@code initTransactions} aborts the open
 *       transaction of any earlier writer of the slot's ranges and bumps the epoch, which stops
 *       it writing (KIP-98 zombie fencing; KIP-360 keeps an idempotent producer's epoch safe to
 *       bump).</li>
 *   <li><b>Resume</b>: each remote partition's position in the progress group, read after
 *       fencing ({@link ResumePositions}), says which upstream offset this plan's writing
 *       reached; records below {@code max(written_until, start, resume)} are skipped.</li>
 *   <li><b>Write</b> the rest in source order, a transaction per {@code chunk_records} records or
 *       {@code chunkBytes} bytes, whichever comes first, across the slot's ranges; each
 *       transaction also carries every touched range's span records and resume position
 *       ({@link SlotTransactions}).</li>
 * </ol>
 *
 * <p>A first upstream offset beyond where a range (or its resume position) starts means the
 * source lost records: the source's log start tells retention from compaction or transaction
 * markers, and retention fails the write ({@link DataLossException}) or is recorded as a gap.
 * A timestamp at or before the epoch (or none) is written as the plan's time. A record larger
 * than its remote topic's {@code max.message.bytes} fails the write before it is sent.
 * Where the target refuses transactions and {@code exactly.once.support} is not
 * {@code required}, an idempotent producer writes at-least-once. Not thread-safe.
 */
public final class SlotWriter extends SlotTransactions {

    private static final Logger LOG = LoggerFactory.getLogger(SlotWriter.class);
    /** How long {@link #abort()} gives the producer to abort its transaction on its way out. */
    static final Duration ABORT_TIMEOUT = Duration.ofSeconds(10);
    private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(5);
    /** How long {@link #open()} waits for the producer's metadata of the slot's topics ({@link MetadataWarmup}). */
    private static final Duration METADATA_TIMEOUT = Duration.ofSeconds(30);

    private final Map<String, String> producerSettings;
    private final SourceLogStart logStart;
    private final long chunkRecords;
    private long opened;
    private boolean isOpen;
    private RangeState last;

    /**
     * A writer of the ranges of one flow's one write slot.
     *
     * @param tasks            the slot's ranges, at most one per source partition
     * @param config           the target's names and the chunk size
     * @param producerSettings the target's producer settings (see {@link ProducerSettings})
     * @param clients          makes the target's clients
     * @param logStart         asks the source for a partition's log start
     * @param source           reads records of the source again, for a transaction written again
     * @param digests          the proof's aggregates per range ({@link SourceDigest#NONE} for none)
     */
    public SlotWriter(List<WriteTask> tasks, WriterConfig config, Map<String, String> producerSettings,
                      WriteClients clients, SourceLogStart logStart, SourceRecords source,
                      Function<WriteTask, SourceDigest> digests) {
        super(checked(tasks), config, clients, source, digests);
        this.producerSettings = Map.copyOf(producerSettings);
        this.logStart = logStart;
        this.chunkRecords = tasks.get(0).chunkRecords();
    }

    private static List<WriteTask> checked(List<WriteTask> tasks) {
        if (tasks.isEmpty() || tasks.stream().map(t -> t.flow() + "\u0000" + t.slot()).distinct().count() != 1) {
            throw new IllegalArgumentException("a slot writer takes the ranges of one flow's one slot");
        }
        if (tasks.stream().map(WriteTask::sourcePartition).distinct().count() != tasks.size()) {
            throw new IllegalArgumentException("a slot writer takes one range per source partition");
        }
        return tasks;
    }

    /** Whether {@link #open()} ran. */
    public boolean isOpen() {
        return isOpen;
    }

    /** Fences earlier writers of the slot, then finds where the plan's writing of each range stopped. */
    public void open() {
        opened = System.nanoTime();
        isOpen = true;
        WriteTask task = tasks.get(0);
        String txnId = WriteTask.transactionalId(task.flow(), task.slot());
        List<Long> limits = tasks.stream().map(WriteTask::maxMessageBytes).toList();
        long largest = tasks.stream().mapToLong(t -> t.end() - t.start()).max().orElse(0);
        String where = "cluster " + config.cluster() + ", writing " + where();
        Map<String, Object> settings = ProducerSettings.of(producerSettings, limits, largest, txnId);
        spanRecordBytes = SpanRecords.limit(ProducerSettings.number(settings, ProducerConfig.MAX_REQUEST_SIZE_CONFIG));
        Producer<byte[], byte[]> created = newProducer(settings, where);
        try {
            created.initTransactions();
            transactional = true;
        } catch (InterruptException e) {
            created.close(Duration.ZERO);
            throw e;
        } catch (KafkaException e) {
            created.close(Duration.ZERO);
            if (!Failures.refusesTransactions(e)) {
                throw new WriteException(where + ": cannot start transactions: " + Failures.describe(e), e);
            }
            if ("required".equals(task.exactlyOnce())) {
                throw new TransactionsRefusedException("flow " + task.flow() + ": exactly.once.support = required, "
                        + "but cluster " + config.cluster() + " refuses the flow's transactions (" + txnId + ", writing "
                        + where() + ": " + Failures.describe(e) + "); nothing was written; grant WRITE and DESCRIBE "
                        + "on the TransactionalId prefix 'mirrorflow|' (docs/security.md)", e);
            }
            LOG.warn("transactions unavailable for {} ({}); writing at-least-once with an idempotent producer", where,
                    Failures.describe(e));
            atLeastOnce = "cluster " + config.cluster() + " refuses transactions: " + Failures.describe(e);
            created = newProducer(ProducerSettings.of(producerSettings, limits, largest, null), where);
        }
        producer = created;
        Map<TopicPartition, ResumePositions.Resume> resume;
        Consumer<byte[], byte[]> consumer;
        Set<String> topics;
        try {
            consumer = clients.progressConsumer(config.progressGroup());
        } catch (KafkaException e) {
            throw new WriteException(where + ": cannot create the progress group's consumer: " + Failures.describe(e), e);
        }
        try {
            group = consumer.groupMetadata();
            resume = ResumePositions.read(consumer, tasks.stream().map(WriteTask::remotePartition).toList(),
                    config.cluster() + " (" + config.targetServers() + ")");
            topics = TargetTopics.check(consumer, config, tasks, where());
        } finally {
            try {
                consumer.close(CloseOptions.timeout(CLOSE_TIMEOUT));
            } catch (InterruptException e) {
                throw e;
            } catch (RuntimeException e) {
                LOG.warn("closing the progress group's consumer: {}", e.toString());
            }
        }
        MetadataWarmup.warm(producer, topics, METADATA_TIMEOUT);
        for (RangeState state : ranges.values()) {
            WriteTask t = state.task;
            state.next = Math.max(t.writtenUntil(), t.start());
            ResumePositions.Resume position = resume.get(t.remotePartition());
            if (position != null && position.planId().equals(t.planId())) {
                state.next = Math.max(position.nextUpstream(), state.next);
            }
            state.result.resumedFrom = state.next;
            state.result.transactional = transactional;
            state.result.atLeastOnce = atLeastOnce;
            if (state.next > t.start()) {
                LOG.info("{}: resuming at upstream offset {} (earlier attempts wrote {}..{})", t.where(), state.next,
                        t.start(), state.next - 1);
            }
        }
        begin();
    }

    private Producer<byte[], byte[]> newProducer(Map<String, Object> settings, String where) {
        try {
            return clients.producer(settings);
        } catch (KafkaException e) {
            throw new WriteException(where + ": cannot create a producer: " + Failures.describe(e), e);
        }
    }

    /**
     * Writes {@code record} (of one of the slot's ranges, each range's records in offset order)
     * unless an earlier attempt already did; commits when the transaction is full.
     */
    public void write(ConsumerRecord<byte[], byte[]> record) {
        RangeState state = last;
        if (state == null || state.task.partition() != record.partition() || !state.task.topic().equals(record.topic())) {
            state = ranges.get(new TopicPartition(record.topic(), record.partition()));
            if (state == null) {
                throw new WriteException("write slot " + tasks.get(0).slot() + " got records of " + record.topic()
                        + "[" + record.partition() + "], which the plan dealt elsewhere");
            }
            last = state;
        }
        state.seen = true;
        if (record.offset() < state.next) {
            return;
        }
        if (!state.startChecked) {
            state.startChecked = true;
            Retention.check(state, record.offset(), logStart);
        }
        long stamp = state.stamp(record);
        if (record.timestamp() <= 0) {
            state.result.restamped++;
        }
        state.age.add(System.currentTimeMillis(), stamp);
        state.uncommitted.add(stamp);
        try {
            produce(state, record);
        } catch (Abortable e) {  // the record is in the transaction written again
            writeAgain(e.reason);
        }
        state.next = record.offset() + 1;
        if (txnRecords >= chunkRecords || txnBytes >= config.chunkBytes()) {
            commit();
            begin();
        }
    }

    @Override
    void produce(RangeState state, ConsumerRecord<byte[], byte[]> record) {
        RecordSize.check(state.task, record, config.cluster());
        Slice slice = sliceFor(state);
        long stamp = state.stamp(record);
        Callback callback = slice.add(record, stamp, state.digest.usable() ? state.digest.hash(record) : 0);
        WriteTask task = state.task;
        SchemaIds ids = config.schemaIds();
        Future<RecordMetadata> sent;
        try {
            sent = producer.send(new ProducerRecord<>(task.remoteTopic(), task.partition(), stamp,
                    ids.key(task, record), ids.value(task, record), ids.headers(record)), callback);
        } catch (InterruptException e) {
            throw e;
        } catch (KafkaException e) {
            throw sendFailed(state, record, e);
        }
        if (sent.isDone()) {  // refused at once (too large for the producer, no metadata, ...)
            try {
                sent.get();
            } catch (ExecutionException e) {
                throw sendFailed(state, record, e.getCause() == null ? e : e.getCause());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new InterruptException(e);
            }
        }
        txnRecords++;
        txnBytes += (record.key() == null ? 0 : record.key().length) + (record.value() == null ? 0 : record.value().length);
    }

    /**
     * Commits what is left and returns this attempt's figures of each range it got records of,
     * in the order of the ranges given; closes the producer.
     */
    public List<RangeResult> close() {
        commit();
        double seconds = Math.round((System.nanoTime() - opened) / 1e6) / 1000.0;
        List<RangeResult> out = new ArrayList<>();
        for (RangeState state : ranges.values()) {
            if (!state.seen) {
                continue;
            }
            RangeResult result = state.result;
            result.recordAgeMs = state.age.summary();
            result.replicationLatencyMs = state.latency.summary();
            result.writeSeconds = seconds;
            result.sourceDigest = state.digest.summary(state.task.end());
            out.add(result);
        }
        closeProducer(CLOSE_TIMEOUT);
        return out;
    }

    /**
     * Best effort after a failure: the producer is closed within {@link #ABORT_TIMEOUT}, which
     * aborts its open transaction on the way out (the Java producer's close aborts an ongoing
     * transaction, and gives up once its timeout passes: the target may be down). A newer
     * writer of the slot fences it anyway.
     */
    public void abort() {
        closeProducer(ABORT_TIMEOUT);
    }

    /** Closes whatever is still open without waiting. */
    public void release() {
        closeProducer(Duration.ZERO);
        closeAdmin();
    }

    private void closeProducer(Duration timeout) {
        if (producer == null) {
            return;
        }
        Producer<byte[], byte[]> closing = producer;
        producer = null;
        try {
            closing.close(timeout);
        } catch (InterruptException e) {
            throw e;
        } catch (RuntimeException e) {
            LOG.warn("closing the producer of {}: {}", where(), e.toString());
        }
    }
}
