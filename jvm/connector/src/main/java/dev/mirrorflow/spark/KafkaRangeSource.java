package dev.mirrorflow.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The {@code mirrorflow-kafka} data source (Spark DataSource V2): reads planned Kafka offset
 * ranges, {@code spark.read.format("mirrorflow-kafka").option("ranges", ...).load()}.
 *
 * <p>It replaces Spark's own Kafka source for exact ranges: where that one gives each
 * partition a consumer of its own and asks for both ends of the log after each poll, here
 * one task reads a whole group of ranges with one consumer (one fetch per broker for all of
 * them, KIP-227 fetch sessions), so a partition costs microseconds instead of milliseconds.
 * The rows have the schema of Spark's Kafka source with headers ({@link KafkaRecordRows}).
 * Options: {@link ReadOptions}. Registered under its short name in
 * {@code META-INF/services/org.apache.spark.sql.sources.DataSourceRegister}.
 */
public final class KafkaRangeSource implements TableProvider, DataSourceRegister {

    /** The format name PySpark and Spark Connect clients use. */
    public static final String NAME = "mirrorflow-kafka";

    @Override
    public String shortName() {
        return NAME;
    }

    /**
     * Spark's Kafka schema with headers, or with {@code digests} the sums' schema; a schema given
     * by the user is refused by Spark.
     */
    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return ReadOptions.schema(options.asCaseSensitiveMap());
    }

    /** Checks the options here, so that a bad one fails {@code load()} on the driver. */
    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new KafkaRangeTable(ReadOptions.parse(properties));
    }
}
