package dev.mirrorflow.spark;

import java.util.EnumSet;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The planned ranges of one read as a table Spark can scan once, in batch
 * ({@link TableCapability#BATCH_READ} only: the plan fixes every end, so there is nothing
 * to stream). Its options were checked when Spark asked for it.
 */
final class KafkaRangeTable implements SupportsRead {

    private final ReadOptions options;

    KafkaRangeTable(ReadOptions options) {
        this.options = options;
    }

    @Override
    public String name() {
        return KafkaRangeSource.NAME;
    }

    @Override
    public Column[] columns() {
        StructField[] fields = options.schema().fields();
        Column[] columns = new Column[fields.length];
        for (int i = 0; i < fields.length; i++) {
            columns[i] = Column.create(fields[i].name(), fields[i].dataType(), fields[i].nullable());
        }
        return columns;
    }

    /** For callers of the deprecated accessor: the same schema as {@link #columns()}. */
    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
        return options.schema();
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    /** The options were parsed by {@link KafkaRangeSource#getTable}; Spark passes the same ones here. */
    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
        return new KafkaRangeScan(options);
    }
}
