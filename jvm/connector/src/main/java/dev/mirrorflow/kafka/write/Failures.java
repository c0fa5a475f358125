package dev.mirrorflow.kafka.write;

import java.util.function.Predicate;

import dev.mirrorflow.kafka.read.RangeReadException;

import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.InvalidTxnStateException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.TransactionAbortableException;
import org.apache.kafka.common.errors.TransactionCoordinatorFencedException;
import org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
import org.apache.kafka.common.errors.UnsupportedVersionException;

/**
 * What the writer makes of a Kafka client's failure. The Java producer wraps the error that
 * put a transaction into an error state in the {@code KafkaException} later calls throw, so each
 * test looks at the whole cause chain.
 *
 * <ul>
 *   <li><b>fatal</b>: the producer cannot go on. A newer writer of the slot fenced it
 *       ({@code ProducerFencedException}, {@code InvalidProducerEpochException}: KIP-98's
 *       zombie fencing, KIP-360's epoch bumps), an authorization error, a broker without the
 *       API. The write fails, naming the transaction.</li>
 *   <li><b>passing</b>: may not recur when the transaction is written again: a timeout, a
 *       broker going away, what Kafka marks retriable ({@link RetriableException}, which
 *       {@code TimeoutException} and the leadership errors extend), and
 *       {@code TransactionAbortableException} (KIP-890: the coordinator aborted it).</li>
 *   <li>anything else is lasting: a record too large, a topic the target refuses, ...</li>
 * </ul>
 */
final class Failures {

    private Failures() {
    }

    /** Whether the producer can no longer be used. */
    static boolean fatal(Throwable error) {
        return anyCause(error, e -> e instanceof ProducerFencedException || e instanceof InvalidProducerEpochException
                || e instanceof AuthorizationException || e instanceof UnsupportedVersionException
                || e instanceof TransactionCoordinatorFencedException || e instanceof FencedInstanceIdException
                || e instanceof InvalidTxnStateException);
    }

    /** Whether a newer producer of the same {@code transactional.id} fenced this one, or the
     * coordinator bumped its epoch (KIP-98, KIP-588): a {@link WriterFencedException}. */
    static boolean fenced(Throwable error) {
        return anyCause(error, e -> e instanceof ProducerFencedException || e instanceof InvalidProducerEpochException);
    }

    /** Whether writing the transaction again may succeed (and nothing in the chain is fatal). */
    static boolean passing(Throwable error) {
        return !fatal(error)
                && anyCause(error, e -> e instanceof RetriableException || e instanceof TransactionAbortableException);
    }

    /** Whether {@code initTransactions} failed because the cluster will not run this producer's
     * transactions (no TransactionalId or cluster grant, a broker without transactions). */
    static boolean refusesTransactions(Throwable error) {
        return anyCause(error, e -> e instanceof TransactionalIdAuthorizationException
                || e instanceof ClusterAuthorizationException || e instanceof UnsupportedVersionException);
    }

    /** Whether {@code error} or any of its causes is one {@code kind} accepts (the Java producer
     * wraps the error behind a failed transaction in the exceptions later calls throw). */
    static boolean anyCause(Throwable error, Predicate<Throwable> kind) {
        for (Throwable e = error; e != null; e = e.getCause() == e ? null : e.getCause()) {
            if (kind.test(e)) {
                return true;
            }
        }
        return false;
    }

    /** {@code SimpleName: message}, with the causes that say more ({@code ...: Cause: message}), one line. */
    static String describe(Throwable error) {
        StringBuilder out = new StringBuilder();
        String said = null;
        for (Throwable e = error; e != null; e = e.getCause()) {
            String message = e.getMessage();
            if (said != null && message != null && said.contains(message)) {
                break;
            }
            if (out.length() > 0) {
                out.append(": ");
            }
            out.append(e.getClass().getSimpleName());
            if (message != null && !message.isBlank()) {
                out.append(": ").append(message);
            }
            said = message == null ? "" : message;
            if (e.getCause() == e) {
                break;
            }
        }
        return RangeReadException.oneLine(out.toString());
    }
}
