package dev.mirrorflow.kafka.write;

import dev.mirrorflow.kafka.read.RangeReadException;

/**
 * Records not yet mirrored were removed from the source by retention before the writer got
 * them, and the flow says {@code failOnDataLoss = true}. Raised again on the Python side as
 * {@code DataLossError} (the class name is part of that contract); the one-line message names
 * the partition, the offsets lost and the flow's setting, as the Python writer's does.
 */
public class DataLossException extends RuntimeException {

    private static final long serialVersionUID = 1L;

    /** An error with a one-line message. */
    public DataLossException(String message) {
        super(RangeReadException.oneLine(message));
    }
}
