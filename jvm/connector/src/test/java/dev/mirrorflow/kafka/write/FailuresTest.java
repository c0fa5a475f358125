package dev.mirrorflow.kafka.write;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.NotLeaderOrFollowerException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TransactionAbortableException;
import org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.Test;

class FailuresTest {

    @Test
    void fencingAndAuthorizationAreFatalThroughWrappers() {
        assertTrue(Failures.fatal(new ProducerFencedException("newer")));
        assertTrue(Failures.fatal(new KafkaException("Cannot perform send", new InvalidProducerEpochException("old"))));
        assertTrue(Failures.fatal(new TransactionalIdAuthorizationException("no")));
        assertFalse(Failures.passing(new KafkaException("state", new ProducerFencedException("newer"))));
    }

    @Test
    void timeoutsAndRetriableErrorsPass() {
        assertTrue(Failures.passing(new TimeoutException("expired")));
        assertTrue(Failures.passing(new KafkaException("in an error state", new NotLeaderOrFollowerException("x"))));
        assertTrue(Failures.passing(new TransactionAbortableException("aborted")));
        assertTrue(Failures.passing(new UnknownTopicOrPartitionException("x")));
        assertFalse(Failures.passing(new RecordTooLargeException("big")));
        assertFalse(Failures.fatal(new RecordTooLargeException("big")));
    }

    @Test
    void refusedTransactions() {
        assertTrue(Failures.refusesTransactions(new TransactionalIdAuthorizationException("no")));
        assertTrue(Failures.refusesTransactions(new KafkaException(new ClusterAuthorizationException("no"))));
        assertFalse(Failures.refusesTransactions(new TimeoutException("slow")));
    }

    @Test
    void describesTheChainOnOneLine() {
        assertEquals("KafkaException: Cannot execute: TimeoutException: Expiring 3 record(s)\nfor x".replace("\n", " "),
                Failures.describe(new KafkaException("Cannot execute", new TimeoutException("Expiring 3 record(s)\nfor x"))));
        KafkaException wrapped = new KafkaException(new ProducerFencedException("newer"));
        assertEquals("KafkaException: org.apache.kafka.common.errors.ProducerFencedException: newer",
                Failures.describe(wrapped));
    }
}
