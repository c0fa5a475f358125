package dev.mirrorflow.kafka.write;

/**
 * The open transaction must be aborted for a cause that may pass (a record timed out, a broker
 * went away): {@link SlotTransactions} aborts it and writes it again, at most
 * {@link SlotTransactions#TRANSACTION_ATTEMPTS} times. Never leaves the package.
 */
final class Abortable extends RuntimeException {

    private static final long serialVersionUID = 1L;

    final String reason;

    Abortable(String reason) {
        super(reason, null, false, false);
        this.reason = reason;
    }
}
