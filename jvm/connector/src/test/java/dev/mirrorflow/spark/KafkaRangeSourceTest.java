package dev.mirrorflow.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;

import dev.mirrorflow.kafka.read.TopicRange;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.junit.jupiter.api.Test;

/**
 * The source as Spark drives it, short of a SparkSession and a broker (the Python suite reads
 * through {@code spark.read.format("mirrorflow-kafka")} from real brokers).
 */
class KafkaRangeSourceTest {

    private static final Map<String, String> OPTIONS = Map.of("kafka.bootstrap.servers", "127.0.0.1:1",
            "kafka.sasl.jaas.config", "secret-password",
            "ranges", "[[[\"a\", 0, 0, 5], [\"a\", 1, 3, 3]], [[\"b\", 0, 9, 9]]]");

    @SuppressWarnings("unchecked")
    private static <T> T roundTrip(T value) throws IOException, ClassNotFoundException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
            out.writeObject(value);
        }
        try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
            return (T) in.readObject();
        }
    }

    @Test
    void registeredUnderItsShortName() throws IOException {
        List<String> ours = new ArrayList<>();
        for (URL url : Collections.list(getClass().getClassLoader()
                .getResources("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"))) {
            try (InputStream in = url.openStream()) {
                String text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
                if (text.contains("dev.mirrorflow")) {
                    ours.add(text.strip());
                }
            }
        }
        assertEquals(List.of(KafkaRangeSource.class.getName() + "\n" + MirrorSource.class.getName()), ours);
        assertEquals("mirrorflow-kafka", new KafkaRangeSource().shortName());
    }

    @Test
    void aTableOfOneBatchReadWithOnePartitionPerGroup() throws Exception {
        KafkaRangeSource source = new KafkaRangeSource();
        CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(OPTIONS);
        SupportsRead table = (SupportsRead) source.getTable(source.inferSchema(options), new Transform[0], OPTIONS);

        assertEquals(Set.of(TableCapability.BATCH_READ), table.capabilities());
        Column[] columns = table.columns();
        assertEquals(8, columns.length);
        assertEquals("headers", columns[7].name());
        assertEquals(KafkaRecordRows.SCHEMA.fields()[7].dataType(), columns[7].dataType());
        Scan scan = table.newScanBuilder(options).build();
        assertEquals(KafkaRecordRows.SCHEMA, scan.readSchema());
        assertEquals("mirrorflow-kafka [2 groups, 3 ranges]", scan.description());
        Batch batch = scan.toBatch();
        InputPartition[] partitions = batch.planInputPartitions();
        assertEquals(2, partitions.length);
        assertEquals(List.of(new TopicRange("a", 0, 0, 5), new TopicRange("a", 1, 3, 3)),
                ((RangeGroupPartition) roundTrip(partitions[0])).ranges());
        assertEquals(List.of(new TopicRange("b", 0, 9, 9)), ((RangeGroupPartition) roundTrip(partitions[1])).ranges());
        assertArrayEquals(new String[0], partitions[0].preferredLocations());

        // A group of empty ranges reads nothing and opens no consumer (127.0.0.1:1 has no broker).
        PartitionReaderFactory factory = roundTrip(batch.createReaderFactory());
        try (PartitionReader<InternalRow> reader = factory.createReader(partitions[1])) {
            assertFalse(reader.next());
        }
    }

    /**
     * A summarising read with {@code given}: its schema, columns and description, and a task of
     * empty ranges whose reader, of class {@code reader}, gives no row (no partition had records).
     */
    private static void summaryRead(Map<String, String> given, StructType schema, List<String> columns,
                                    String description, Class<?> reader) throws Exception {
        KafkaRangeSource source = new KafkaRangeSource();
        CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(given);
        assertEquals(schema, source.inferSchema(options));
        SupportsRead table = (SupportsRead) source.getTable(source.inferSchema(options), new Transform[0], given);
        assertEquals(columns, java.util.Arrays.stream(table.columns()).map(Column::name).toList());
        Scan scan = table.newScanBuilder(options).build();
        assertEquals(schema, scan.readSchema());
        assertEquals(description, scan.description());
        Batch batch = scan.toBatch();
        PartitionReaderFactory factory = roundTrip(batch.createReaderFactory());
        try (PartitionReader<InternalRow> empty = factory.createReader(batch.planInputPartitions()[1])) {
            assertTrue(reader.isInstance(empty));
            assertFalse(empty.next());
        }
    }

    /** The one-line message of the table refused for {@code given}. */
    private static String refusedTable(Map<String, String> given) {
        return org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> new KafkaRangeSource().getTable(KafkaRecordRows.SCHEMA, new Transform[0], given)).getMessage();
    }

    @Test
    void aDigestsReadGivesThePartitionsSums() throws Exception {
        Map<String, String> given = new java.util.HashMap<>(OPTIONS);
        given.put("Digests", "true");
        summaryRead(given, KafkaDigestPartitionReader.SCHEMA,
                List.of("topic", "partition", "records", "xor", "xor_no_ts", "first", "last"),
                "mirrorflow-kafka [2 groups, 3 ranges, digests]", KafkaDigestPartitionReader.class);
        given.remove("Digests");
        given.put("digests", "yes");
        assertEquals("option 'digests' must be true or false, got 'yes'", refusedTable(given));
    }

    @Test
    void aSchemaIdScanGivesEachPartitionsIds() throws Exception {
        Map<String, String> given = new java.util.HashMap<>(OPTIONS);
        given.put("SchemaIdScan", "value, key");
        summaryRead(given, KafkaIdScanPartitionReader.SCHEMA,
                List.of("topic", "partition", "part", "ids", "refused_offset", "refused_length", "refused_first"),
                "mirrorflow-kafka [2 groups, 3 ranges, schemaIdScan value,key]", KafkaIdScanPartitionReader.class);
        given.put("digests", "true");
        assertEquals("options 'digests' and 'schemaIdScan' exclude each other: a read gives sums or ids, not both",
                refusedTable(given));
        given.remove("digests");
        given.put("SchemaIdScan", "value,headers");
        assertEquals("option 'schemaIdScan' must name key, value or both, each once (comma-separated), got "
                + "'value,headers'", refusedTable(given));
    }

    @Test
    void badOptionsFailWhenTheTableIsAskedFor() {
        KafkaRangeSource source = new KafkaRangeSource();
        IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                () -> source.getTable(KafkaRecordRows.SCHEMA, new Transform[0],
                        Map.of("kafka.bootstrap.servers", "b:1")));
        assertTrue(e.getMessage().startsWith("option 'ranges' is required"), e.getMessage());
    }
}
