package dev.mirrorflow.kafka.write;

import dev.mirrorflow.kafka.read.RangeReadException;

/**
 * The write ledger on the target (the progress group's resume positions) could not be read.
 * Raised again on the Python side as {@code mirrorflow.source.ledger.LedgerError}, whose
 * message it words the same way: it names the cluster.
 */
public class LedgerException extends RuntimeException {

    private static final long serialVersionUID = 1L;

    /** An error with a one-line message and the client exception behind it. */
    public LedgerException(String message, Throwable cause) {
        super(RangeReadException.oneLine(message), cause);
    }
}
