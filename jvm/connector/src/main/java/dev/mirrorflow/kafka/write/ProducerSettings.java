package dev.mirrorflow.kafka.write;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The settings of a slot writer's producer: the writer's defaults, then the target cluster's
 * producer settings (which win), then what correctness needs (which nothing overrides).
 *
 * <ul>
 *   <li>Defaults: {@code linger.ms=20}, {@code batch.size=1000000} or, where less, the slot's
 *       share of {@code buffer.memory} per remote partition, or what its largest range would
 *       fill at {@link #BYTES_PER_OFFSET} a record (at least Kafka's 16 KiB default: the
 *       producer takes a whole {@code batch.size} buffer for each partition's open batch, so
 *       2,500 partitions of a record each, at 1 MB a batch, waited for the 64 MiB pool to
 *       drain dozens of times, and every buffer was a humongous object to G1; and 1,000
 *       partitions of 3 records each, at 128 KiB a batch, allocated 130 MiB a run for 3,000
 *       records, half of a warm Connect server's allocation, collected 4 to 9 times a run),
 *       no compression (Kafka's
 *       and MirrorMaker 2's default: the Java producer, unlike librdkafka, sends a batch
 *       compressed even where that makes it larger, so a record at its topic's limit would be
 *       refused; the file's {@code <target>.producer.compression.type} sets one),
 *       {@code buffer.memory} 64 MiB (what a write task holds in flight), {@code max.request.size}
 *       16 MiB, {@code transaction.timeout.ms=120000}; no client telemetry (KIP-714) and no
 *       metrics reporter (Kafka 4's default registers every metric, per topic too, in JMX):
 *       a task's producer lives for one write.</li>
 *   <li>Forced: {@code enable.idempotence=true} and {@code acks=all} (KIP-98: the broker drops a
 *       retried batch it already has, and transactions need both), the byte-array serializers,
 *       and the slot's {@code transactional.id} (or none, for the at-least-once fallback).</li>
 *   <li>Record limits: the broker refuses a batch larger than its topic's
 *       {@code max.message.bytes}; the producer closes a batch at {@code batch.size} but always
 *       takes its first record. So {@code batch.size} is at most the smallest limit of the slot's
 *       remote topics (batches of several records fit everywhere), a larger record goes alone
 *       and was checked against its own topic's limit ({@link RecordSize}), and
 *       {@code max.request.size}, also the producer's bound on one record, need only admit the
 *       largest limit (plus {@link #MESSAGE_MARGIN} for the producer's estimate of a record's
 *       size, above the exact one).</li>
 * </ul>
 */
final class ProducerSettings {

    /** What the producer's size estimate of a record may exceed the exact batch size by. */
    static final int MESSAGE_MARGIN = 1024;
    static final int TRANSACTION_TIMEOUT_MS = 120_000;
    /**
     * The first retry's backoff (the Java client's default is 100 ms; it doubles on each retry up
     * to {@code retry.backoff.max.ms}, KIP-580). A new producer's first transactional requests
     * wait for the coordinators' lookups and are re-enqueued after this backoff: at 100 ms,
     * {@code initTransactions} and the first {@code sendOffsetsToTransaction} of each write slot
     * took over 100 ms each, a fifth of a slot's 50,000 records' write (measured).
     */
    static final String RETRY_BACKOFF_MS = "10";
    /** The largest batch the writer asks for by default. */
    static final long BATCH_SIZE = 1_000_000;
    /** The smallest: Kafka's default {@code batch.size}. */
    static final long MIN_BATCH_SIZE = 16 * 1024;
    /** The bytes a record of a range is taken to need, bounding a batch by the range's offsets
     * (a larger record makes a batch of its own size, as it always could). */
    static final long BYTES_PER_OFFSET = 1024;

    private ProducerSettings() {
    }

    /**
     * The producer's settings.
     *
     * @param target          the target's producer settings, as given
     * @param limits          the {@code max.message.bytes} of each of the slot's remote partitions (0: unknown)
     * @param largestRange    the most offsets one of the slot's ranges plans
     * @param transactionalId the slot's id, or null for an idempotent producer without transactions
     */
    static Map<String, Object> of(Map<String, String> target, List<Long> limits, long largestRange,
                                  String transactionalId) {
        Map<String, Object> config = new HashMap<>();
        config.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        config.put(ProducerConfig.BUFFER_MEMORY_CONFIG, String.valueOf(64L * 1024 * 1024));
        config.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, String.valueOf(16 * 1024 * 1024));
        config.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(TRANSACTION_TIMEOUT_MS));
        config.put(ProducerConfig.ENABLE_METRICS_PUSH_CONFIG, "false");
        config.put(ProducerConfig.METRIC_REPORTER_CLASSES_CONFIG, "");
        config.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, RETRY_BACKOFF_MS);
        config.putAll(target);
        long share = number(config, ProducerConfig.BUFFER_MEMORY_CONFIG) / Math.max(1, limits.size());
        long fill = largestRange > BATCH_SIZE / BYTES_PER_OFFSET ? BATCH_SIZE : largestRange * BYTES_PER_OFFSET;
        config.putIfAbsent(ProducerConfig.BATCH_SIZE_CONFIG,
                String.valueOf(Math.max(MIN_BATCH_SIZE, Math.min(BATCH_SIZE, Math.min(share, fill)))));
        config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        config.put(ProducerConfig.ACKS_CONFIG, "all");
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        config.remove(ProducerConfig.TRANSACTIONAL_ID_CONFIG);
        if (transactionalId != null) {
            config.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        long smallest = limits.stream().filter(l -> l > 0).mapToLong(Long::longValue).min().orElse(0);
        long largest = limits.stream().filter(l -> l > 0).mapToLong(Long::longValue).max().orElse(0);
        if (smallest > 0) {
            config.put(ProducerConfig.BATCH_SIZE_CONFIG,
                    String.valueOf(Math.min(number(config, ProducerConfig.BATCH_SIZE_CONFIG), smallest)));
            config.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, String.valueOf(
                    Math.min(number(config, ProducerConfig.MAX_REQUEST_SIZE_CONFIG), largest + MESSAGE_MARGIN)));
        }
        return config;
    }

    static long number(Map<String, Object> config, String name) {
        String text = String.valueOf(config.get(name)).strip();
        try {
            return Long.parseLong(text);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("the target's producer setting " + name + " must be a whole number, got '"
                    + text + "'");
        }
    }
}
