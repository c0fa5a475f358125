package dev.mirrorflow.kafka.write;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

class ProducerSettingsTest {

    @Test
    void defaultsTheTargetsSettingsThenWhatCorrectnessNeeds() {
        Map<String, Object> config = ProducerSettings.of(Map.of("bootstrap.servers", "b:9092", "linger.ms", "5",
                "enable.idempotence", "false", "acks", "1", "transactional.id", "theirs",
                "key.serializer", "x"), List.of(), 1_000_000, "mirrorflow|a->b|write-0");
        assertEquals("b:9092", config.get("bootstrap.servers"));
        assertEquals("5", config.get("linger.ms"));
        assertEquals(null, config.get("compression.type"));  // Kafka's default: none
        assertEquals("120000", config.get("transaction.timeout.ms"));
        assertEquals("10", config.get("retry.backoff.ms"));
        assertEquals("", config.get("metric.reporters"));  // no JMX MBeans per topic
        assertEquals("1000000", config.get("batch.size"));
        assertEquals(String.valueOf(16 * 1024 * 1024), config.get("max.request.size"));
        assertEquals("true", config.get("enable.idempotence"));
        assertEquals("all", config.get("acks"));
        assertEquals("mirrorflow|a->b|write-0", config.get("transactional.id"));
        assertEquals("org.apache.kafka.common.serialization.ByteArraySerializer", config.get("key.serializer"));
    }

    @Test
    void aSlotOfManyPartitionsBatchesItsShareOfTheBuffer() {
        List<Long> limits = java.util.Collections.nCopies(2500, 1_048_588L);
        assertEquals(String.valueOf(64L * 1024 * 1024 / 2500), ProducerSettings.of(Map.of(), limits, 1_000_000, null)
                .get("batch.size"));
        assertEquals("16384", ProducerSettings.of(Map.of("buffer.memory", "1000000"), limits, 1_000_000, null).get("batch.size"));
        assertEquals("1000000", ProducerSettings.of(Map.of(), limits.subList(0, 8), 1_000_000, null).get("batch.size"));
        assertEquals("500000", ProducerSettings.of(Map.of("batch.size", "500000"), limits, 3, null).get("batch.size"));
    }

    @Test
    void smallRangesTakeSmallBatches() {
        List<Long> limits = java.util.Collections.nCopies(500, 1_048_588L);
        assertEquals("16384", ProducerSettings.of(Map.of(), limits, 3, null).get("batch.size"));
        assertEquals(String.valueOf(100 * 1024), ProducerSettings.of(Map.of(), limits, 100, null).get("batch.size"));
        assertEquals(String.valueOf(64L * 1024 * 1024 / 500), ProducerSettings.of(Map.of(), limits, 50_000, null)
                .get("batch.size"));
        assertEquals("1000000", ProducerSettings.of(Map.of(), limits.subList(0, 8), Long.MAX_VALUE, null)
                .get("batch.size"));
    }

    @Test
    void batchesFitTheSmallestLimitRequestsTheLargest() {
        Map<String, Object> config = ProducerSettings.of(Map.of("batch.size", "2000000"), List.of(0L, 50_000L, 2_000_000L),
                1_000_000, null);
        assertEquals("50000", config.get("batch.size"));
        assertEquals(String.valueOf(2_000_000 + ProducerSettings.MESSAGE_MARGIN), config.get("max.request.size"));
        assertFalse(config.containsKey("transactional.id"));
    }
}
