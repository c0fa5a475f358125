package dev.mirrorflow.kafka.write;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Makes the target's clients a slot writer uses: its producer, the progress group's consumer
 * (resume positions and the group's metadata for {@code sendOffsetsToTransaction}) and, for the
 * at-least-once fallback, an admin client. An interface so that unit tests can hand the writer
 * Kafka's {@code MockProducer} and {@code MockConsumer}.
 */
public interface WriteClients {

    /** A producer with these (complete) settings. */
    Producer<byte[], byte[]> producer(Map<String, Object> settings);

    /** A consumer of the progress group {@code group} that asks for stable offsets (KIP-447). */
    Consumer<byte[], byte[]> progressConsumer(String group);

    /** An admin client of the target. */
    Admin admin();

    /**
     * Real clients of the target whose settings are {@code target} (the cluster's client
     * settings: security, bootstrap servers; producer settings too). The consumer and the
     * admin client take only the settings they know, so that producer settings do not make
     * them log unknown ones.
     */
    static WriteClients kafka(Map<String, String> target) {
        Map<String, String> settings = Map.copyOf(target);
        return new WriteClients() {
            @Override
            public Producer<byte[], byte[]> producer(Map<String, Object> config) {
                return new KafkaProducer<>(config);
            }

            @Override
            public Consumer<byte[], byte[]> progressConsumer(String group) {
                Map<String, Object> config = known(settings, ConsumerConfig.configNames());
                config.putIfAbsent(ConsumerConfig.RETRY_BACKOFF_MS_CONFIG, ProducerSettings.RETRY_BACKOFF_MS);
                config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
                // It never joins the group: the classic protocol's metadata of a consumer that
                // did not join (generation -1, no member id) is what a member-less group takes.
                config.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
                config.remove(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG);
                config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
                config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                config.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
                config.put(ConsumerConfig.ENABLE_METRICS_PUSH_CONFIG, "false");
                config.putIfAbsent(ConsumerConfig.METRIC_REPORTER_CLASSES_CONFIG, "");
                config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
                config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
                return new KafkaConsumer<>(config);
            }

            @Override
            public Admin admin() {
                Map<String, Object> config = known(settings, AdminClientConfig.configNames());
                config.put(AdminClientConfig.ENABLE_METRICS_PUSH_CONFIG, "false");
                config.putIfAbsent(AdminClientConfig.METRIC_REPORTER_CLASSES_CONFIG, "");
                return Admin.create(config);
            }
        };
    }

    private static Map<String, Object> known(Map<String, String> settings, Set<String> names) {
        Map<String, Object> out = new HashMap<>();
        settings.forEach((key, value) -> {
            if (names.contains(key)) {
                out.put(key, value);
            }
        });
        return out;
    }
}
