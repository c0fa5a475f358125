package dev.mirrorflow.spark;

import java.util.EnumSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A mirror write as a table Spark scans once, in batch: its scan (its own builder and batch) has
 * one input partition per write slot ({@link SlotPartition}) and rows {@code result string}.
 */
final class MirrorTable implements SupportsRead, ScanBuilder, Scan, Batch {

    /** {@code result string}: one range's result as JSON. */
    static final StructType SCHEMA = new StructType().add("result", DataTypes.StringType, false);

    private final MirrorOptions options;

    MirrorTable(MirrorOptions options) {
        this.options = options;
    }

    @Override
    public String name() {
        return MirrorSource.NAME;
    }

    @Override
    public Column[] columns() {
        return new Column[] {Column.create("result", DataTypes.StringType, false)};
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
        return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
        return this;
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return SCHEMA;
    }

    /** Shown by {@code explain} and the UI: counts only, never a client setting. */
    @Override
    public String description() {
        List<SlotPartition> slots = options.slots();
        return MirrorSource.NAME + " [" + slots.size() + " slots, " + slots.stream().mapToInt(s -> s.tasks().size()).sum()
                + " ranges]";
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        return options.slots().toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new MirrorReaderFactory(options);
    }
}
