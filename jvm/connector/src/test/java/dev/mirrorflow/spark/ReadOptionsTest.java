package dev.mirrorflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import dev.mirrorflow.kafka.read.TopicRange;
import org.junit.jupiter.api.Test;

class ReadOptionsTest {

    private static Map<String, String> options(String ranges, String... more) {
        Map<String, String> options = new HashMap<>();
        options.put("kafka.bootstrap.servers", "127.0.0.1:9092");
        if (ranges != null) {
            options.put("ranges", ranges);
        }
        for (int i = 0; i < more.length; i += 2) {
            options.put(more[i], more[i + 1]);
        }
        return options;
    }

    private static String refused(Map<String, String> options) {
        String message = assertThrows(IllegalArgumentException.class, () -> ReadOptions.parse(options)).getMessage();
        assertFalse(message.contains("\n"), message);
        return message;
    }

    @Test
    void groupsKafkaSettingsAndTimeouts() {
        ReadOptions parsed = ReadOptions.parse(options("[[[\"a\", 0, 5, 9], [\"b\", 3, 0, 0]], [], [[\"a\", 1, 2, 4]]]",
                "kafka.isolation.level", "read_committed", "kafka.group.id", "ignored", "TimeoutMS", "5000",
                "path", "ignored too"));

        assertEquals(List.of(List.of(new TopicRange("a", 0, 5, 9), new TopicRange("b", 3, 0, 0)), List.of(),
                List.of(new TopicRange("a", 1, 2, 4))), parsed.groups());
        assertEquals(Map.of("bootstrap.servers", "127.0.0.1:9092", "isolation.level", "read_committed",
                "group.id", "ignored"), parsed.kafka());
        assertEquals(1000, parsed.pollTimeoutMs());
        assertEquals(5000, parsed.timeoutMs());
    }

    @Test
    void defaultTimeouts() {
        ReadOptions parsed = ReadOptions.parse(options("[]", "pollTimeoutMs", "250"));
        assertEquals(List.of(), parsed.groups());
        assertEquals(250, parsed.pollTimeoutMs());
        assertEquals(120_000, parsed.timeoutMs());
    }

    @Test
    void itsTextNamesNoSettingValue() {
        String text = ReadOptions.parse(options("[[[\"a\", 0, 0, 1]]]", "kafka.sasl.jaas.config", "secret-password"))
                .toString();
        assertFalse(text.contains("secret-password"), text);
        assertTrue(text.contains("sasl.jaas.config"), text);
    }

    @Test
    void missingOptions() {
        assertEquals("option 'ranges' is required: JSON [[[\"topic\", partition, start, end], ...], ...]",
                refused(options(null)));
        Map<String, String> noServers = options("[]");
        noServers.remove("kafka.bootstrap.servers");
        assertEquals("option 'kafka.bootstrap.servers' is required: the brokers to read from", refused(noServers));
    }

    @Test
    void malformedRanges() {
        assertEquals("option 'ranges' is not valid JSON at line 1, column 10: Unexpected end-of-input: expected "
                + "close marker for Array", refused(options("[[[\"a\", 0")));
        assertEquals("option 'ranges' is not valid JSON at line 1, column 5: Unexpected character (']' (code 93)): "
                + "expected a valid value (JSON String, Number, Array, Object or token 'null', 'true' or 'false')",
                refused(options("[[1,]]")));
        assertEquals("option 'ranges' must be a JSON list of groups [[[\"topic\", partition, start, end], ...], ...], "
                + "got {\"a\":1}", refused(options("{\"a\": 1}")));
        assertEquals("option 'ranges': group 1 must be a list of [topic, partition, start, end], got \"x\"",
                refused(options("[[], \"x\"]")));
        assertEquals("option 'ranges': group 0 range 1 must be [topic, partition, start, end] (a topic name and three "
                + "integers >= 0), got [\"a\",1,-1,3]", refused(options("[[[\"a\", 0, 0, 1], [\"a\", 1, -1, 3]]]")));
        assertEquals("option 'ranges': group 0 range 0 must be [topic, partition, start, end] (a topic name and three "
                + "integers >= 0), got [\"a\",1,2]", refused(options("[[[\"a\", 1, 2]]]")));
        assertEquals("option 'ranges': group 0 range 0 must be [topic, partition, start, end] (a topic name and three "
                + "integers >= 0), got [\"a\",1.5,0,2]", refused(options("[[[\"a\", 1.5, 0, 2]]]")));
    }

    @Test
    void aPartitionTwiceInAGroup() {
        assertEquals("option 'ranges': group 1 names topic 'a' partition 2 twice; a group reads one range per partition",
                refused(options("[[[\"a\", 2, 0, 5]], [[\"a\", 2, 0, 5], [\"a\", 2, 5, 9]]]")));
    }

    @Test
    void badTimeoutsAndSettings() {
        assertEquals("option 'timeoutMs' must be a whole number of milliseconds > 0, got 'soon'",
                refused(options("[]", "timeoutMs", "soon")));
        assertEquals("option 'pollTimeoutMs' must be a whole number of milliseconds > 0, got '0'",
                refused(options("[]", "pollTimeoutMs", "0")));
        assertEquals("option 'kafka.*' has a bad consumer setting: Invalid value many for configuration "
                + "max.poll.records: Not a number of type INT", refused(options("[]", "kafka.max.poll.records", "many")));
    }
}
