package dev.mirrorflow.kafka.write;

/**
 * A newer producer of the write slot's {@code transactional.id} fenced this one (KIP-98's zombie
 * fencing: another attempt of the plan, a Spark task retried or speculated, a run that took the
 * flow over), or the coordinator bumped its epoch when the open transaction outlived
 * {@code transaction.timeout.ms} (KIP-588). The open transaction is aborted by the coordinator,
 * so none of its records is ever visible to read_committed readers; this attempt stops and the
 * newer writer, or the next run, finishes the plan from the resume positions committed so far.
 *
 * <p>Raised again on the Python side as {@code WriterFencedError} (see {@link WriteException}).
 */
public class WriterFencedException extends WriteException {

    private static final long serialVersionUID = 1L;

    /** An error with a one-line message and the client exception behind it. */
    public WriterFencedException(String message, Throwable cause) {
        super(message, cause);
    }
}
