package dev.mirrorflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import dev.mirrorflow.kafka.read.TopicRange;
import dev.mirrorflow.kafka.write.SchemaIds;
import dev.mirrorflow.kafka.write.WriteTask;
import org.junit.jupiter.api.Test;

class MirrorOptionsTest {

    private static final String FULL = "{\"flow\": \"a->b\", \"plan_id\": \"p1\", \"topic\": \"orders\", \"partition\": 2,"
            + " \"remote_topic\": \"a.orders\", \"start\": 10, \"end\": 90, \"max_message_bytes\": 1048588,"
            + " \"fail_on_data_loss\": false, \"exactly_once\": \"required\", \"chunk_records\": 500,"
            + " \"written_until\": 20, \"restamp_ms\": 1700000000000, \"slot\": 3, \"read_start\": 25}";
    private static final String SHORT = "{\"flow\": \"a->b\", \"plan_id\": \"p1\", \"topic\": \"clicks\", \"partition\": 0,"
            + " \"remote_topic\": \"a.clicks\", \"start\": 5, \"end\": 9, \"max_message_bytes\": null}";

    private static Map<String, String> options(String tasks, String... more) {
        Map<String, String> options = new HashMap<>();
        options.put("source.kafka.bootstrap.servers", "127.0.0.1:9092");
        options.put("target.kafka.bootstrap.servers", "127.0.0.1:9093");
        if (tasks != null) {
            options.put("tasks", tasks);
        }
        for (int i = 0; i < more.length; i += 2) {
            options.put(more[i], more[i + 1]);
        }
        return options;
    }

    private static String refused(Map<String, String> options) {
        String message = assertThrows(IllegalArgumentException.class, () -> MirrorOptions.parse(options)).getMessage();
        assertFalse(message.contains("\n"), message);
        return message;
    }

    @Test
    void tasksBySlotWithDefaultsAndNames() {
        MirrorOptions parsed = MirrorOptions.parse(options("[" + FULL + ", " + SHORT + "]",
                "source.kafka.isolation.level", "read_committed", "Target.Kafka.linger.ms", "5", "ChunkBytes", "1000"));
        assertEquals(2, parsed.slots().size());
        SlotPartition first = parsed.slots().get(0);
        assertEquals(0, first.slot());
        assertEquals(List.of(new WriteTask("a->b", "p1", "clicks", 0, "a.clicks", 5, 9, 0, true, "requested", 100_000,
                0, 0, 0)), first.tasks());
        assertEquals(List.of(new TopicRange("clicks", 0, 5, 9)), first.readRanges());
        SlotPartition second = parsed.slots().get(1);
        assertEquals(3, second.slot());
        assertEquals(new WriteTask("a->b", "p1", "orders", 2, "a.orders", 10, 90, 1048588, false, "required", 500, 20,
                1_700_000_000_000L, 3), second.tasks().get(0));
        assertEquals(List.of(new TopicRange("orders", 2, 25, 90)), second.readRanges());
        assertEquals(Map.of("bootstrap.servers", "127.0.0.1:9092", "isolation.level", "read_committed"), parsed.source());
        assertEquals(Map.of("bootstrap.servers", "127.0.0.1:9093", "linger.ms", "5"), parsed.target());
        assertEquals("b", parsed.writer().targetAlias());
        assertEquals("127.0.0.1:9093", parsed.writer().targetServers());
        assertEquals("mirrorflow-spans.a.internal", parsed.writer().spansTopic());
        assertEquals("__mirrorflow.a", parsed.writer().progressGroup());
        assertEquals(1000, parsed.writer().chunkBytes());
        assertTrue(parsed.digestHeaders());
        assertEquals(1000, parsed.pollTimeoutMs());
        assertEquals(120_000, parsed.timeoutMs());
    }

    @Test
    void namesGiven() {
        MirrorOptions parsed = MirrorOptions.parse(options("[" + SHORT + "]", "targetAlias", "backup",
                "spansTopic", "spans", "progressGroup", "group", "digestHeaders", "false", "timeoutMs", "5000"));
        assertEquals("backup", parsed.writer().targetAlias());
        assertEquals("spans", parsed.writer().spansTopic());
        assertEquals("group", parsed.writer().progressGroup());
        assertFalse(parsed.digestHeaders());
        assertEquals(5000, parsed.timeoutMs());
    }

    @Test
    void badOptionsAreNamed() {
        assertEquals("option 'tasks' is required: a JSON list of write tasks", refused(options(null)));
        assertTrue(refused(options("[{")).startsWith("option 'tasks' is not valid JSON at line 1"));
        assertEquals("option 'tasks' must be a JSON list of write tasks, got {}", refused(options("{}")));
        assertEquals("option 'tasks': task 0 has no 'end'",
                refused(options("[" + SHORT.replace(", \"end\": 9", "") + "]")));
        assertTrue(refused(options("[" + SHORT.replace("\"end\": 9", "\"end\": -1") + "]"))
                .startsWith("option 'tasks': task 0 field 'end' must be a whole number >= 0"));
        assertTrue(refused(options("[" + SHORT.replace("\"start\"", "\"begin\"") + "]"))
                .startsWith("option 'tasks': task 0 has an unknown field 'begin'"));
        assertEquals("option 'tasks': task 1 is of flow 'a->c', task 0 of 'a->b'; one mirror read writes one flow",
                refused(options("[" + SHORT + ", " + SHORT.replace("a->b", "a->c") + "]")));
        assertEquals("option 'tasks': slot 0 names clicks[0] twice; a slot writes one range per partition",
                refused(options("[" + SHORT + ", " + SHORT + "]")));
        assertEquals("option 'source.kafka.bootstrap.servers' is required: the source cluster's brokers",
                refused(Map.of("target.kafka.bootstrap.servers", "x:1", "tasks", "[]")));
        assertEquals("option 'chunkBytes' must be a whole number of bytes > 0, got 'lots'",
                refused(options("[]", "chunkBytes", "lots")));
        assertEquals("option 'digestHeaders' must be true or false, got 'yes'",
                refused(options("[]", "digestHeaders", "yes")));
    }

    @Test
    void aSchemaTransfersTableIsParsedAndAMalformedOneNamed() {
        MirrorOptions parsed = MirrorOptions.parse(options("[" + SHORT + "]", "schemaIds",
                "{\"a.orders\": {\"value\": {\"7\": 1001}}}"));
        assertEquals(false, parsed.writer().schemaIds() == SchemaIds.NONE);
        assertEquals("option 'schemaIds' is not a JSON table of remote topic, part and source id to target id: "
                        + "For input string: \"x\"",
                refused(options("[" + SHORT + "]", "schemaIds", "{\"a.orders\": {\"value\": {\"x\": 1}}}")));
    }

    @Test
    void itsTextNamesNoSettingValue() {
        String text = MirrorOptions.parse(options("[" + SHORT + "]", "target.kafka.sasl.jaas.config", "secret-password"))
                .toString();
        assertFalse(text.contains("secret-password"), text);
        assertTrue(text.contains("sasl.jaas.config"), text);
    }
}
