package dev.mirrorflow.kafka.write;

import java.io.Serializable;
import java.util.Objects;

/**
 * What a slot writer needs besides its ranges and its clients.
 *
 * @param targetAlias   the target cluster's alias, for messages ({@code cluster 'b'})
 * @param targetServers its bootstrap servers, for messages about the ledger
 * @param spansTopic    where span records go ({@code mirrorflow-spans.<source>.internal})
 * @param progressGroup the group holding the resume positions ({@code __mirrorflow.<source>})
 * @param chunkBytes    a transaction is committed once its records' key and value bytes reach this
 * @param schemaIds     the schema registry transfer's rewrite ({@link SchemaIds#NONE} for none)
 */
public record WriterConfig(String targetAlias, String targetServers, String spansTopic, String progressGroup,
                           long chunkBytes, SchemaIds schemaIds) implements Serializable {

    private static final long serialVersionUID = 1L;

    /** The Python writer's default: 64 MiB. */
    public static final long DEFAULT_CHUNK_BYTES = 64L * 1024 * 1024;

    /** Checks the fields. */
    public WriterConfig {
        Objects.requireNonNull(targetAlias, "targetAlias");
        Objects.requireNonNull(targetServers, "targetServers");
        Objects.requireNonNull(spansTopic, "spansTopic");
        Objects.requireNonNull(progressGroup, "progressGroup");
        Objects.requireNonNull(schemaIds, "schemaIds");
        if (chunkBytes <= 0) {
            throw new IllegalArgumentException("chunkBytes must be > 0, got " + chunkBytes);
        }
    }

    /** The spans topic of a source cluster (Python {@code ledger.spans_topic}). */
    public static String spansTopic(String sourceAlias) {
        return "mirrorflow-spans." + sourceAlias + ".internal";
    }

    /** The progress group of a source cluster (Python {@code ledger.progress_group}). */
    public static String progressGroup(String sourceAlias) {
        return "__mirrorflow." + sourceAlias;
    }

    /** {@code 'b'}, as Python's {@code repr} quotes an alias. */
    String cluster() {
        return "'" + targetAlias + "'";
    }
}
