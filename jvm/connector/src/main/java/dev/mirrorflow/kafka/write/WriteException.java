package dev.mirrorflow.kafka.write;

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
        super(oneLine(message));
    }

    /** An error with a one-line message and the client exception behind it. */
    public WriteException(String message, Throwable cause) {
        super(oneLine(message), cause);
    }

    /** {@code text} with every run of line breaks (and the spaces around them) as one space. */
    static String oneLine(String text) {
        return text == null ? "" : text.replaceAll("\\s*[\\r\\n]+\\s*", " ").strip();
    }
}
