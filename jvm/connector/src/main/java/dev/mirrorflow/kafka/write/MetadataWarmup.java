package dev.mirrorflow.kafka.write;

import java.time.Duration;
import java.util.Collection;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.errors.InterruptException;

/**
 * Fetches a new producer's metadata of many topics in a few requests instead of one each.
 *
 * <p>The Java producer learns a topic's partitions at the first {@code send} to it, and that
 * {@code send} blocks until a metadata response names the topic ({@code waitOnMetadata}); the
 * request carries only the topics waiting at that moment (KIP-526's new-topic requests). Sent
 * in order, a slot's first records to 2,500 remote topics waited for 2,500 round trips, in
 * every run, since each run's writer is a new producer. Here up to {@link #THREADS} threads
 * each ask {@code partitionsFor} of one topic at a time, so every request names up to that many
 * topics. A failure here is left for the {@code send} of the topic's first record, which
 * reports it with the range it belongs to.
 */
final class MetadataWarmup {

    /** Topics asked for at once. */
    static final int THREADS = 64;

    private MetadataWarmup() {
    }

    /** Waits (at most {@code timeout}) until {@code producer} knows every topic of {@code topics}, or gave up on it. */
    static void warm(Producer<?, ?> producer, Collection<String> topics, Duration timeout) {
        if (topics.size() < 2) {
            return;  // the first send asks for it as soon
        }
        AtomicInteger count = new AtomicInteger();
        ExecutorService pool = Executors.newFixedThreadPool(Math.min(THREADS, topics.size()), work -> {
            Thread thread = new Thread(work, "mirrorflow-metadata-" + count.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        });
        try {
            topics.forEach(topic -> pool.submit(() -> producer.partitionsFor(topic)));
            pool.shutdown();
            pool.awaitTermination(timeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptException(e);
        } finally {
            pool.shutdownNow();  // what is still asking, after the timeout, is interrupted
        }
    }
}
