package org.apache.kafka.clients.admin;

import java.util.Map;

import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.protocol.Errors;

/**
 * Results of admin calls for unit tests' doubles: their constructors are package-private, so
 * this helper lives in the admin client's package (test sources only).
 */
public final class AdminResults {

    private AdminResults() {
    }

    /** A successful {@code alterConsumerGroupOffsets}. */
    public static AlterConsumerGroupOffsetsResult alteredOffsets() {
        return new AlterConsumerGroupOffsetsResult(KafkaFuture.completedFuture(Map.<TopicPartition, Errors>of()));
    }
}
