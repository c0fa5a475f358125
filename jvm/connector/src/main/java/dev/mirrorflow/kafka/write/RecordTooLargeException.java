package dev.mirrorflow.kafka.write;

/**
 * A record larger, as a record batch, than its remote topic's {@code max.message.bytes}
 * ({@link RecordSize#check}), refused before it is sent. The driver then raises the remote topic's
 * limit where config sync would copy the source topic's larger one, and writes the plan on
 * (Python {@code mirrorflow.spark.mirror}); otherwise the refusal stands.
 *
 * <p>Raised again on the Python side as {@code RecordTooLargeError} (see {@link WriteException}).
 */
public class RecordTooLargeException extends WriteException {

    private static final long serialVersionUID = 1L;

    /** An error with a one-line message naming the range, the offset, the size and the limit. */
    public RecordTooLargeException(String message) {
        super(message);
    }
}
