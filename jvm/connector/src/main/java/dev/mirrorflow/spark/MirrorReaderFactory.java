package dev.mirrorflow.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/**
 * Makes each slot's reader-writer on its executor. Serialized to the executors with the
 * options (client settings included, as Spark's own Kafka source ships its parameters).
 */
final class MirrorReaderFactory implements PartitionReaderFactory {

    private static final long serialVersionUID = 1L;

    private final MirrorOptions options;

    MirrorReaderFactory(MirrorOptions options) {
        this.options = options;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        return new MirrorPartitionReader((SlotPartition) partition, options);
    }
}
