package dev.mirrorflow.kafka.read;

/**
 * A range could not be read: its partition no longer exists, the reader made no progress
 * for its whole timeout, the client refused (authorization, a corrupt record, ...).
 *
 * <p>The message is one line that names the topic, partition and offsets concerned: Spark
 * reports a failed task as {@code <class name>: <message>} followed by the stack trace, so
 * the Python side finds this class and its message in Spark's failure text (pattern
 * {@code dev\.mirrorflow\.[\w.]*\.(\w+Exception): (.+)}). Line breaks in a message (for
 * example from a client exception) are folded into spaces.
 */
public class RangeReadException extends RuntimeException {

    private static final long serialVersionUID = 1L;

    /** An error with a one-line message. */
    public RangeReadException(String message) {
        super(oneLine(message));
    }

    /** An error with a one-line message and the client exception behind it. */
    public RangeReadException(String message, Throwable cause) {
        super(oneLine(message), cause);
    }

    /** {@code text} with every run of line breaks (and the spaces around them) as one space
     * (the writer's {@code WriteException} words its messages the same way). */
    public static String oneLine(String text) {
        return text == null ? "" : text.replaceAll("\\s*[\\r\\n]+\\s*", " ").strip();
    }
}
