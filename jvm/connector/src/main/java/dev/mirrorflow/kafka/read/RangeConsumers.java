package dev.mirrorflow.kafka.read;

import java.util.HashMap;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The consumer settings {@link RangeReader} needs, whatever the caller's settings say.
 *
 * <p>A range read assigns partitions itself and joins no group, so {@code group.id} and
 * {@code group.instance.id} are dropped (nothing is committed: {@code enable.auto.commit}
 * is off). {@code auto.offset.reset=none} makes an offset outside the log an error the
 * reader handles ({@code OffsetOutOfRangeException}) instead of a silent jump to the
 * earliest or latest record. {@code allow.auto.create.topics=false}: the metadata request
 * of a consumer assigned to a deleted topic would otherwise create it again on a broker
 * with {@code auto.create.topics.enable} (the broker's default). Records stay bytes.
 * {@code fetch.max.wait.ms} is short unless given ({@link #FETCH_MAX_WAIT_MS}).
 */
public final class RangeConsumers {

    private RangeConsumers() {
    }

    /**
     * How long the broker may hold a fetch that finds nothing new, unless the caller says
     * otherwise (the client's default is 500 ms). A range read never waits for new records:
     * what it reads is already in the log. A held fetch only delays what follows it on the
     * connection, such as the request that closes the fetch session when the consumer closes.
     */
    public static final String FETCH_MAX_WAIT_MS = "10";

    /** {@code given} (client settings, as strings) with the settings of a range read forced. */
    public static Map<String, Object> settings(Map<String, String> given) {
        Map<String, Object> config = new HashMap<>(given);
        config.putIfAbsent(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, FETCH_MAX_WAIT_MS);
        config.remove(ConsumerConfig.GROUP_ID_CONFIG);
        config.remove(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG);
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        config.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return config;
    }

    /** A new consumer with {@link #settings(Map) the forced settings}, its per-partition
     *  INFO lines kept out of Spark's logs ({@link ConsumerLogs}). */
    public static KafkaConsumer<byte[], byte[]> open(Map<String, String> given) {
        ConsumerLogs.quiet();
        return new KafkaConsumer<>(settings(given));
    }
}
