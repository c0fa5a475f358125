package dev.mirrorflow.kafka.write;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The write ledger's entries of one transaction besides its records (Python
 * {@code source.ledger}): its span records ({@link SpanRecords}), sent through the slot's producer into the same
 * transaction, and, where the target refuses transactions, the resume positions committed to
 * the progress group with the admin client after the data ({@code alterConsumerGroupOffsets}:
 * the group has no members, so the admin may set its offsets).
 */
final class LedgerWrites {

    private static final Logger LOG = LoggerFactory.getLogger(LedgerWrites.class);
    static final Duration ADMIN_TIMEOUT = Duration.ofSeconds(60);

    private final WriterConfig config;
    private final WriteClients clients;
    private final List<Exception> spanErrors = new ArrayList<>();
    private Admin admin;

    LedgerWrites(WriterConfig config, WriteClients clients) {
        this.config = config;
        this.clients = clients;
    }

    /**
     * Sends the span records of one transaction ({@link SpanRecords}, at most {@code maxBytes} each);
     * their delivery failures are kept ({@link #spanErrors()}).
     */
    void sendSpans(Producer<byte[], byte[]> producer, List<Span> spans, int maxBytes) {
        synchronized (spanErrors) {
            spanErrors.clear();
        }
        for (SpanRecords record : SpanRecords.pack(spans, maxBytes)) {
            producer.send(new ProducerRecord<>(config.spansTopic(), record.key(), record.value()), (metadata, e) -> {
                if (e != null) {
                    synchronized (spanErrors) {
                        spanErrors.add(e);
                    }
                }
            });
        }
    }

    /** The delivery failures of the span records last sent. */
    List<Exception> spanErrors() {
        synchronized (spanErrors) {
            return new ArrayList<>(spanErrors);
        }
    }

    /** The failure of writing the span records of {@code where}. */
    WriteException spansFailed(String where, Exception error) {
        return new WriteException("writing " + where + ": cannot write its span records to " + config.spansTopic()
                + " on cluster " + config.cluster() + ": " + Failures.describe(error)
                + "; nothing of the transaction was committed", error);
    }

    /** At-least-once: commits the resume positions once the data and spans are on the target. */
    void commitPositions(Map<TopicPartition, OffsetAndMetadata> positions, String where) {
        if (admin == null) {
            admin = clients.admin();
        }
        try {
            admin.alterConsumerGroupOffsets(config.progressGroup(), positions).all()
                    .get(ADMIN_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptException(e);
        } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            throw new WriteException("writing " + where + ": committing the positions to group '"
                    + config.progressGroup() + "' on cluster " + config.cluster() + " failed: "
                    + Failures.describe(cause), cause);
        }
    }

    /** Closes the admin client, if any, without waiting. */
    void close() {
        if (admin != null) {
            try {
                admin.close(Duration.ZERO);
            } catch (RuntimeException e) {
                LOG.warn("closing the admin client: {}", e.toString());
            }
            admin = null;
        }
    }
}
