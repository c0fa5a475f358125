package dev.mirrorflow.kafka.write;

/**
 * {@code exactly.once.support = required}, and the target cluster refuses the write slot's
 * transactions: no grant on its {@code transactional.id}, no cluster grant, or a broker without
 * transactions (KIP-98). Nothing is written. Raised again on the Python side as
 * {@code TransactionsRefusedError}, the error the flow's state producer raises for the same
 * refusal (see {@link WriteException}).
 */
public class TransactionsRefusedException extends WriteException {

    private static final long serialVersionUID = 1L;

    /** An error with a one-line message and the client exception behind it. */
    public TransactionsRefusedException(String message, Throwable cause) {
        super(message, cause);
    }
}
