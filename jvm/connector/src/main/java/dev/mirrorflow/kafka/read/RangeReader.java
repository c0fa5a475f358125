package dev.mirrorflow.kafka.read;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.WakeupException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads many partitions' offset ranges with one consumer, each exactly from its start to its
 * end, in each partition's offset order (partitions interleave).
 *
 * <p>One consumer assigned to every partition sends one fetch per broker for all of them,
 * which the broker keeps as an incremental fetch session (KIP-227): the cost of a partition
 * is its {@code seek}, a few position checks and its share of a fetch, not a consumer and
 * its round trips of its own. Nothing asks the broker for a partition's ends while reads
 * advance: a partition is done when the consumer's position reaches its end. Under
 * {@code read_committed} (KIP-98, KIP-447) the position also steps over transaction markers
 * and aborted records, so a range that ends on a marker is done without a record at its
 * last offset. Records at or past a range's end (the rest of a fetched batch) are dropped
 * and the partition is paused, then unassigned in batches, which frees what was fetched
 * past its end.
 *
 * <p>What the log no longer has is left for the caller to see, who compares the records'
 * offsets and count with the plan: a range starting below the log start (retention,
 * DeleteRecords) resumes at the log start, and a partition whose end (at the consumer's
 * isolation level) is below the range's end is done when nothing more comes. Only a
 * partition that made no progress for {@code pollTimeoutMs} costs a metadata look-up and
 * one end-offsets request per broker; a partition that no longer exists is an error, and
 * so is {@code timeoutMs} spent waiting in the consumer without any range advancing.
 *
 * <p>Not thread-safe, like the consumer it drives.
 */
public final class RangeReader implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(RangeReader.class);
    private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(1);
    private static final long MAX_API_TIMEOUT_MS = 30_000;
    private static final int UNASSIGN_BATCH = 16;
    private static final long FIRST_POLL_MS = 10;

    private final Consumer<byte[], byte[]> consumer;
    private final long pollTimeoutMs;
    private final Duration apiTimeout;
    private final LogBounds bounds;
    private final long stallNanos;
    private final long timeoutNanos;
    private final Map<TopicPartition, PartitionProgress> progress = new HashMap<>();
    private final Map<TopicPartition, PartitionProgress> unfinished = new LinkedHashMap<>();
    private final List<TopicPartition> pausedAssigned = new ArrayList<>();
    private final long startNanos = System.nanoTime();

    private ConsumerRecords<byte[], byte[]> batch = ConsumerRecords.empty();
    private Iterator<TopicPartition> batchPartitions = Collections.emptyIterator();
    private Iterator<ConsumerRecord<byte[], byte[]>> records = Collections.emptyIterator();
    private PartitionProgress current;
    private long pollMs = FIRST_POLL_MS;
    private long idleNanos;
    private long lastStallCheckNanos = startNanos;
    private String lastProblem;
    private long recordsRead;
    private int shortRanges;
    private boolean closed;

    /**
     * Assigns {@code consumer} every non-empty range's partition and seeks each to its start.
     *
     * @param consumer      a consumer with {@link RangeConsumers#settings the forced settings};
     *                      the reader owns it and closes it
     * @param ranges        at most one range per partition
     * @param pollTimeoutMs the longest one poll waits, and how long a partition may stay
     *                      still before the reader asks whether it has ended short
     * @param timeoutMs     the longest the reader waits in the consumer with no range
     *                      advancing before it fails
     * @throws IllegalArgumentException when two ranges name the same partition
     */
    public RangeReader(Consumer<byte[], byte[]> consumer, List<TopicRange> ranges,
                       long pollTimeoutMs, long timeoutMs) {
        if (pollTimeoutMs <= 0 || timeoutMs <= 0) {
            throw new IllegalArgumentException("pollTimeoutMs and timeoutMs must be > 0, got "
                    + pollTimeoutMs + " and " + timeoutMs);
        }
        this.consumer = consumer;
        this.pollTimeoutMs = pollTimeoutMs;
        this.apiTimeout = Duration.ofMillis(Math.min(timeoutMs, MAX_API_TIMEOUT_MS));
        this.bounds = new LogBounds(consumer, apiTimeout);
        this.stallNanos = Duration.ofMillis(pollTimeoutMs).toNanos();
        this.timeoutNanos = Duration.ofMillis(timeoutMs).toNanos();
        Map<TopicPartition, TopicRange> seen = new HashMap<>();
        for (TopicRange range : ranges) {
            TopicRange other = seen.putIfAbsent(range.topicPartition(), range);
            if (other != null) {
                throw new IllegalArgumentException("two ranges for topic '" + range.topic() + "' partition "
                        + range.partition() + ": [" + other.start() + ", " + other.end() + ") and ["
                        + range.start() + ", " + range.end() + "); a read takes one range per partition");
            }
            if (!range.isEmpty()) {
                PartitionProgress p = new PartitionProgress(range, startNanos);
                progress.put(p.partition, p);
                unfinished.put(p.partition, p);
            }
        }
        if (!unfinished.isEmpty()) {
            consumer.assign(new ArrayList<>(unfinished.keySet()));
            for (PartitionProgress p : unfinished.values()) {
                consumer.seek(p.partition, p.range.start());
            }
        }
    }

    /**
     * The next record of the ranges, or {@code null} once every range is read.
     *
     * @throws RangeReadException when a partition no longer exists, the timeout passes or
     *                            the client fails
     */
    public ConsumerRecord<byte[], byte[]> next() {
        while (true) {
            while (records.hasNext()) {
                ConsumerRecord<byte[], byte[]> record = records.next();
                if (current.covers(record.offset())) {
                    recordsRead++;
                    return record;
                }
            }
            if (batchPartitions.hasNext()) {
                TopicPartition tp = batchPartitions.next();
                current = progress.get(tp);
                records = current == null ? Collections.emptyIterator() : batch.records(tp).iterator();
            } else if (unfinished.isEmpty()) {
                return null;
            } else {
                pollOnce();
            }
        }
    }

    /**
     * One poll, then the positions. A poll that brings no record waits its whole timeout even
     * when the position moved (past a transaction marker), so polls start short after any
     * progress and double, up to {@code pollTimeoutMs}, while nothing moves.
     */
    private void pollOnce() {
        long before = System.nanoTime();
        batch = ConsumerRecords.empty();
        try {
            batch = consumer.poll(Duration.ofMillis(Math.min(pollMs, pollTimeoutMs)));
        } catch (OffsetOutOfRangeException e) {
            outOfRange(e.offsetOutOfRangePartitions());
        } catch (InterruptException | WakeupException e) {
            throw e;
        } catch (KafkaException e) {
            throw failure("reading", e);
        }
        batchPartitions = batch.partitions().iterator();
        long now = System.nanoTime();
        boolean progressed = updatePositions(now);
        if (!unfinished.isEmpty() && now - lastStallCheckNanos >= stallNanos) {
            progressed |= checkStalled(now);
        }
        idleNanos = progressed ? 0 : idleNanos + (System.nanoTime() - before);
        pollMs = progressed ? FIRST_POLL_MS : Math.min(2 * pollMs, pollTimeoutMs);
        if (idleNanos >= timeoutNanos && !unfinished.isEmpty()) {
            throw new RangeReadException("no progress for " + Duration.ofNanos(idleNanos).toMillis()
                    + " ms (timeoutMs) with " + unfinished.size() + " of " + progress.size()
                    + " ranges unfinished: " + PartitionProgress.describeAll(unfinished.values())
                    + (lastProblem == null ? "" : "; last problem: " + lastProblem));
        }
    }

    /** Reads each unfinished partition's position; finishes those at or past their end. */
    private boolean updatePositions(long now) {
        boolean progressed = false;
        List<TopicPartition> done = new ArrayList<>();
        for (Iterator<PartitionProgress> it = unfinished.values().iterator(); it.hasNext(); ) {
            PartitionProgress p = it.next();
            long position = consumer.position(p.partition, apiTimeout);
            if (position != p.position) {
                p.position = position;
                p.lastProgressNanos = now;
                progressed = true;
            }
            if (position >= p.range.end()) {
                it.remove();
                done.add(p.partition);
            }
        }
        pause(done);
        return progressed;
    }

    /**
     * Partitions still for {@code pollTimeoutMs}: fails on one that no longer exists, finishes
     * those whose log ends (at the consumer's isolation level) at or below their position.
     */
    private boolean checkStalled(long now) {
        List<PartitionProgress> stalled = unfinished.values().stream()
                .filter(p -> now - p.lastProgressNanos >= stallNanos).collect(Collectors.toList());
        if (stalled.isEmpty()) {
            return false;
        }
        lastStallCheckNanos = now;
        Map<TopicPartition, Long> ends;
        try {
            ends = bounds.ends(stalled);
        } catch (TimeoutException e) {
            lastProblem = "asking the ends of stalled partitions: " + e.getMessage();
            return false;
        } catch (InterruptException | WakeupException e) {
            throw e;
        } catch (KafkaException e) {
            throw failure("asking the ends of", e);
        }
        List<TopicPartition> done = new ArrayList<>();
        for (PartitionProgress p : stalled) {
            Long end = ends.get(p.partition);
            p.lastProgressNanos = now;
            if (end != null && end <= p.position) {
                LOG.warn("{} ends short: the log ends at {}", p.describe(), end);
                shortRanges++;
                unfinished.remove(p.partition);
                done.add(p.partition);
            }
        }
        pause(done);
        return !done.isEmpty();
    }

    /**
     * The consumer's position in these partitions is outside their log: below the log start,
     * the reader goes on from the log start (or finishes a range wholly below it); beyond the
     * log end, the partition has ended short.
     */
    private void outOfRange(Map<TopicPartition, Long> offsets) {
        List<TopicPartition> ours = offsets.keySet().stream().filter(unfinished::containsKey)
                .collect(Collectors.toList());
        Map<TopicPartition, Long> starts;
        try {
            starts = bounds.starts(ours);
        } catch (TimeoutException e) {
            lastProblem = "asking the log start of partitions out of range: " + e.getMessage();
            return;
        } catch (InterruptException | WakeupException e) {
            throw e;
        } catch (KafkaException e) {
            throw failure("asking the log start of", e);
        }
        List<TopicPartition> done = new ArrayList<>();
        for (TopicPartition tp : ours) {
            PartitionProgress p = unfinished.get(tp);
            long offset = offsets.get(tp);
            Long logStart = starts.get(tp);
            if (logStart == null) {
                throw LogBounds.gone(p);
            }
            if (offset < logStart && logStart < p.range.end()) {
                LOG.warn("{}: the log starts at {}, reading on from there", p.describe(), logStart);
                consumer.seek(tp, logStart);
                continue;
            }
            if (offset < logStart) {
                LOG.warn("{}: the log starts at {}, past the range's end: nothing left to read", p.describe(),
                        logStart);
            } else {
                LOG.warn("{}: offset {} is past the log's end (log start {}): the range ends short", p.describe(),
                        offset, logStart);
            }
            shortRanges++;
            unfinished.remove(tp);
            done.add(tp);
        }
        pause(done);
    }

    /** Stops fetching finished partitions; unassigns them in batches to free their buffers. */
    private void pause(List<TopicPartition> done) {
        if (done.isEmpty()) {
            return;
        }
        consumer.pause(done);
        pausedAssigned.addAll(done);
        if (!unfinished.isEmpty() && pausedAssigned.size() >= Math.max(UNASSIGN_BATCH, unfinished.size())) {
            consumer.assign(new ArrayList<>(unfinished.keySet()));
            pausedAssigned.clear();
        }
    }

    private RangeReadException failure(String doing, KafkaException e) {
        return new RangeReadException(doing + " " + PartitionProgress.describeAll(unfinished.values()) + " failed: "
                + e.getClass().getName() + ": " + e.getMessage(), e);
    }

    /** Closes the consumer, waiting at most a second (a range read has nothing to commit). */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        LOG.info("read {} records of {} ranges in {} ms ({} ended short, {} unfinished)", recordsRead,
                progress.size(), Duration.ofNanos(System.nanoTime() - startNanos).toMillis(), shortRanges,
                unfinished.size());
        try {
            consumer.close(CloseOptions.timeout(CLOSE_TIMEOUT));
        } catch (InterruptException | WakeupException e) {
            throw e;
        } catch (KafkaException e) {
            LOG.warn("closing the consumer: {}", e.toString());
        }
    }
}
