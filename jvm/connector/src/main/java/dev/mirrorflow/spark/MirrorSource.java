package dev.mirrorflow.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The {@code mirrorflow-mirror} data source (Spark DataSource V2): each task reads one write
 * slot's planned source ranges ({@link dev.mirrorflow.kafka.read.RangeReader}) and writes them,
 * exactly once, to the target ({@link dev.mirrorflow.kafka.write.SlotWriter}), in the JVM: no
 * record becomes a Spark row or enters Python. The rows are the results, one per range written:
 * {@code result string}, the JSON of the Python {@code RangeResult.to_dict()}.
 * {@code spark.read.format("mirrorflow-mirror").options(...).load().collect()} runs the write.
 * Options: {@link MirrorOptions}. Registered under its short name in
 * {@code META-INF/services/org.apache.spark.sql.sources.DataSourceRegister}.
 *
 * <p>A read that writes is unusual for a data source; it is one on purpose. The write needs one
 * task per slot whose output is a handful of results, and the driver needs those results back:
 * a scan gives both, where a DataSource V2 write would need an input DataFrame of records (which
 * is what this avoids) and gives the driver only commit messages. Spark must not run such a
 * scan twice: the Python driver collects it once, and a retried task fences its predecessor.
 */
public final class MirrorSource implements TableProvider, DataSourceRegister {

    /** The format name PySpark and Spark Connect clients use. */
    public static final String NAME = "mirrorflow-mirror";

    @Override
    public String shortName() {
        return NAME;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return MirrorTable.SCHEMA;
    }

    /** Checks the options here, so that a bad one fails {@code load()} on the driver. */
    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new MirrorTable(MirrorOptions.parse(properties));
    }
}
