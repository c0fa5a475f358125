package dev.mirrorflow.spark;

import java.util.List;

import dev.mirrorflow.kafka.read.RangeGroups;
import dev.mirrorflow.kafka.read.TopicRange;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;

/**
 * The scan of a read, as its own builder and batch (nothing is pushed down: the plan already
 * says which records to read). Each group of ranges becomes one {@link RangeGroupPartition},
 * so one task with one consumer.
 */
final class KafkaRangeScan implements ScanBuilder, Scan, Batch {

    private final ReadOptions options;

    KafkaRangeScan(ReadOptions options) {
        this.options = options;
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return options.schema();
    }

    /** Shown by {@code explain} and the UI: counts only, never a client setting. */
    @Override
    public String description() {
        return KafkaRangeSource.NAME + " [" + options.groups().size() + " groups, "
                + options.groups().stream().mapToInt(List::size).sum() + " ranges" + (options.digests() ? ", digests" : "")
                + (options.idScan().isEmpty() ? "" : ", schemaIdScan " + String.join(",", options.idScan())) + "]";
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    /**
     * A partition per group; with {@code coalesce} in local mode, the groups merged into at most
     * Spark's default parallelism (the cores of {@code local[*]}). A cluster keeps its groups:
     * there the default parallelism counts the executors running now, which dynamic allocation
     * may not have started yet.
     */
    @Override
    public InputPartition[] planInputPartitions() {
        SparkContext context = options.coalesce() ? SparkSession.active().sparkContext() : null;
        List<List<TopicRange>> groups = context != null && context.isLocal()
                ? RangeGroups.coalesced(options.groups(), context.defaultParallelism())
                : options.groups();
        InputPartition[] partitions = new InputPartition[groups.size()];
        for (int i = 0; i < partitions.length; i++) {
            partitions[i] = new RangeGroupPartition(groups.get(i));
        }
        return partitions;
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new KafkaRangeReaderFactory(options.kafka(), options.pollTimeoutMs(), options.timeoutMs(),
                options.digests() ? options.schemaIds() : null, options.idScan());
    }
}
