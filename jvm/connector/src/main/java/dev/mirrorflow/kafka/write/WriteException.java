package dev.mirrorflow.kafka.write;

import dev.mirrorflow.kafka.read.RangeReadException;

/**
 * A range could not be written: a record too large for its remote topic, a transaction that
 * failed for good (the writer was fenced by a newer one, an authorization error), a target that
 * refuses transactions where exactly-once is required, ...
 *
 * <p>The message is one line naming the range(s), the offsets and the cluster concerned,
 * worded as the Python writer words its {@code WriteError}: Spark reports a failed task as
 * {@code <class name>: <message>}, and the Python side raises {@code dev.mirrorflow.<pkg>.XException}
 * again as its {@code XError} (pattern {@code dev\.mirrorflow\.[\w.]*?(\w+)Exception: ...}), so
 * this class's name is part of the contract.
 */
public class WriteException extends RuntimeException {

    private static final long serialVersionUID = 1L;

    /** An error with a one-line message. */
    public WriteException(String message) {
        super(RangeReadException.oneLine(message));
    }

    /** An error with a one-line message and the client exception behind it. */
    public WriteException(String message, Throwable cause) {
        super(RangeReadException.oneLine(message), cause);
    }
}
