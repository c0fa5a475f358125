package dev.mirrorflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.junit.jupiter.api.Test;

/**
 * The mirror source as Spark drives it, short of a SparkSession and brokers (the smoke test and
 * the Python suite write through {@code spark.read.format("mirrorflow-mirror")} on real ones).
 */
class MirrorSourceTest {

    private static String task(String topic, int partition, long start, long end, int slot, long readStart) {
        return "{\"flow\": \"a->b\", \"plan_id\": \"p\", \"topic\": \"" + topic + "\", \"partition\": " + partition
                + ", \"remote_topic\": \"a." + topic + "\", \"start\": " + start + ", \"end\": " + end
                + ", \"slot\": " + slot + ", \"read_start\": " + readStart + "}";
    }

    private static final Map<String, String> OPTIONS = Map.of("source.kafka.bootstrap.servers", "127.0.0.1:1",
            "target.kafka.bootstrap.servers", "127.0.0.1:2", "target.kafka.sasl.jaas.config", "secret-password",
            "tasks", "[" + task("a", 0, 0, 5, 1, 0) + ", " + task("a", 1, 0, 5, 0, 5) + ", " + task("b", 0, 3, 9, 1, 9)
                    + "]");

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
    void oneInputPartitionPerWriteSlotAndResultRows() throws Exception {
        MirrorSource source = new MirrorSource();
        assertEquals("mirrorflow-mirror", source.shortName());
        CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(OPTIONS);
        SupportsRead table = (SupportsRead) source.getTable(source.inferSchema(options), new Transform[0], OPTIONS);
        assertEquals(Set.of(TableCapability.BATCH_READ), table.capabilities());
        assertEquals("result", table.columns()[0].name());
        Scan scan = table.newScanBuilder(options).build();
        assertEquals(MirrorTable.SCHEMA, scan.readSchema());
        assertEquals("result", scan.readSchema().fields()[0].name());
        assertEquals("mirrorflow-mirror [2 slots, 3 ranges]", scan.description());
        assertFalse(scan.description().contains("secret"));
        InputPartition[] partitions = scan.toBatch().planInputPartitions();
        assertEquals(2, partitions.length);
        SlotPartition first = roundTrip((SlotPartition) partitions[0]);
        assertEquals(0, first.slot());
        assertEquals(1, first.tasks().size());
        SlotPartition second = roundTrip((SlotPartition) partitions[1]);
        assertEquals(1, second.slot());
        assertEquals(2, second.tasks().size());

        // A slot whose ranges are all read already opens no client and writes nothing.
        PartitionReaderFactory factory = roundTrip(scan.toBatch().createReaderFactory());
        try (PartitionReader<InternalRow> reader = factory.createReader(first)) {
            assertFalse(reader.next());
        }
        assertTrue(first.readRanges().get(0).isEmpty());
    }
}
