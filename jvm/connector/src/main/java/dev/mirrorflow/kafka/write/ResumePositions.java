package dev.mirrorflow.kafka.write;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.WakeupException;

/**
 * Reads the remote partitions' resume positions from the progress group (Python
 * {@code ledger.committed_resume}): the offset each writer transaction commits with its
 * records ({@code sendOffsetsToTransaction}, KIP-98/KIP-447) is the next upstream offset of the
 * range, its metadata the plan's id.
 *
 * <p>The consumer reads with {@code isolation.level=read_committed}, so the Java client asks
 * for stable offsets (KIP-447's {@code require_stable}): a position still pending in an open
 * transaction is waited for until that transaction is committed or aborted, which the slot's
 * {@code initTransactions} (run first) does to any zombie's. The client retries coordinator
 * moves itself within the call; a call that times out is tried again until {@link #TIMEOUT}.
 */
final class ResumePositions {

    static final Duration TIMEOUT = Duration.ofSeconds(30);
    private static final long BACKOFF_MS = 200;

    /** Where a remote partition's writing stopped: the next upstream offset, by plan {@code planId}. */
    record Resume(String planId, long nextUpstream) {
    }

    private ResumePositions() {
    }

    /**
     * The committed positions of {@code remote} (absent: none yet).
     *
     * @param cluster how messages name the target: {@code 'b' (host:port)}
     * @throws LedgerException when they cannot be read within the timeout
     */
    static Map<TopicPartition, Resume> read(Consumer<?, ?> consumer, Collection<TopicPartition> remote,
                                            String cluster) {
        Set<TopicPartition> wanted = new TreeSet<>((a, b) -> a.topic().equals(b.topic())
                ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()));
        wanted.addAll(remote);
        Map<TopicPartition, Resume> out = new HashMap<>();
        if (wanted.isEmpty()) {
            return out;
        }
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        Map<TopicPartition, OffsetAndMetadata> found;
        while (true) {
            try {
                found = consumer.committed(wanted, TIMEOUT);
                break;
            } catch (InterruptException | WakeupException e) {
                throw e;
            } catch (RetriableException e) {
                if (System.nanoTime() > deadline) {
                    throw failed(cluster, e);
                }
                sleep();
            } catch (KafkaException e) {
                throw failed(cluster, e);
            }
        }
        for (Map.Entry<TopicPartition, OffsetAndMetadata> position : found.entrySet()) {
            OffsetAndMetadata at = position.getValue();
            if (at != null && at.offset() >= 0) {
                out.put(position.getKey(), new Resume(at.metadata() == null ? "" : at.metadata(), at.offset()));
            }
        }
        return out;
    }

    private static LedgerException failed(String cluster, KafkaException e) {
        return new LedgerException("cluster " + cluster + ": cannot read the resume positions: "
                + Failures.describe(e), e);
    }

    private static void sleep() {
        try {
            Thread.sleep(BACKOFF_MS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptException(e);
        }
    }
}
