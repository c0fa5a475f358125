package dev.mirrorflow.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import dev.mirrorflow.kafka.read.RangeConsumers;
import dev.mirrorflow.kafka.read.RangeReadException;
import dev.mirrorflow.kafka.read.TopicRange;
import dev.mirrorflow.kafka.write.SchemaIds;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.types.StructType;

/**
 * The options of a {@code mirrorflow-kafka} read, checked on the driver before any task
 * starts, each fault an {@link IllegalArgumentException} with a one-line message naming the
 * option.
 *
 * <ul>
 *   <li>{@code ranges}: JSON {@code [[["topic", partition, start, end], ...], ...]}, a list of
 *       groups; each group is one input partition (one task, one consumer) and names each
 *       partition at most once; {@code end} is exclusive.</li>
 *   <li>{@code kafka.*}: consumer settings, the prefix stripped ({@code kafka.bootstrap.servers}
 *       is required); the reader's own settings win ({@link RangeConsumers}), so a
 *       {@code kafka.group.id} is ignored.</li>
 *   <li>{@code pollTimeoutMs} (default 1000) and {@code timeoutMs} (default 120000): see
 *       {@link dev.mirrorflow.kafka.read.RangeReader}.</li>
 *   <li>{@code digests} ({@code true} or {@code false}, the default): rows of the proof's sums
 *       per partition read ({@link KafkaDigestPartitionReader#SCHEMA}) instead of a row per
 *       record; with {@code schemaIds} (the JSON table of the mirror's option of that name:
 *       topic, part, id to id) each record's schema ids are mapped before it is digested
 *       ({@link SchemaIds#mapped}).</li>
 *   <li>{@code schemaIdScan} ({@code key}, {@code value} or {@code key,value}; none by default):
 *       rows of the schema ids each partition's records carry in those parts
 *       ({@link KafkaIdScanPartitionReader#SCHEMA}) instead of a row per record; not with
 *       {@code digests}.</li>
 *   <li>{@code coalesce} ({@code true} or {@code false}, the default): in local mode, at most as
 *       many tasks as Spark's default parallelism, the groups merged
 *       ({@link dev.mirrorflow.kafka.read.RangeGroups#coalesced}).</li>
 * </ul>
 * Option names are case-insensitive, as Spark's are.
 *
 * @param groups        the ranges, group by group
 * @param kafka         the consumer settings as given (prefix stripped)
 * @param pollTimeoutMs the longest one poll waits
 * @param timeoutMs     the longest a reader waits with no range advancing
 * @param digests       whether a row is a partition's sums, not a record
 * @param schemaIds     the ids a digests read maps ({@link SchemaIds#NONE} for none)
 * @param idScan        the parts whose schema ids a row per partition gives (empty: none)
 * @param coalesce      whether the groups are merged into at most Spark's default parallelism
 */
public record ReadOptions(List<List<TopicRange>> groups, Map<String, String> kafka, long pollTimeoutMs,
                          long timeoutMs, boolean digests, SchemaIds schemaIds, List<String> idScan,
                          boolean coalesce) implements Serializable {

    private static final long serialVersionUID = 1L;
    private static final String PREFIX = "kafka.";
    private static final String DIGESTS = "digests";
    private static final String ID_SCAN = "schemaidscan";
    private static final String SHAPE = "[[[\"topic\", partition, start, end], ...], ...]";

    /** Parses and checks Spark's options of a read. */
    public static ReadOptions parse(Map<String, String> options) {
        Map<String, String> lower = new HashMap<>();
        Map<String, String> kafka = new HashMap<>();
        for (Map.Entry<String, String> option : options.entrySet()) {
            String key = option.getKey().toLowerCase(Locale.ROOT);
            lower.put(key, option.getValue());
            if (key.startsWith(PREFIX)) {
                kafka.put(option.getKey().substring(PREFIX.length()), option.getValue());
            }
        }
        String servers = kafka.get(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG);
        if (servers == null || servers.isBlank()) {
            throw new IllegalArgumentException("option 'kafka.bootstrap.servers' is required: the brokers to read from");
        }
        try {
            ConsumerConfig.configDef().parse(RangeConsumers.settings(kafka));
        } catch (ConfigException e) {
            throw new IllegalArgumentException("option 'kafka.*' has a bad consumer setting: "
                    + RangeReadException.oneLine(e.getMessage()), e);
        }
        boolean digests = OptionValues.flag(lower, DIGESTS, false);
        List<String> idScan = idScan(lower);
        if (digests && !idScan.isEmpty()) {
            throw new IllegalArgumentException("options 'digests' and 'schemaIdScan' exclude each other: a read gives "
                    + "sums or ids, not both");
        }
        return new ReadOptions(groups(lower.get("ranges")), kafka, OptionValues.positive(lower, "pollTimeoutMs", 1000, "a whole number of milliseconds"),
                OptionValues.positive(lower, "timeoutMs", 120_000, "a whole number of milliseconds"),
                digests, SchemaIds.parse(lower.get("schemaids"), false), idScan,
                OptionValues.flag(lower, "coalesce", false));
    }

    /** The rows' schema a read with {@code options} gives (Spark asks before the options are parsed). */
    public static StructType schema(Map<String, String> options) {
        Map<String, String> lower = lowerCase(options);
        return schema(OptionValues.flag(lower, DIGESTS, false), idScan(lower));
    }

    /** The rows' schema of this read. */
    public StructType schema() {
        return schema(digests, idScan);
    }

    private static StructType schema(boolean digests, List<String> idScan) {
        return digests ? KafkaDigestPartitionReader.SCHEMA
                : idScan.isEmpty() ? KafkaRecordRows.SCHEMA : KafkaIdScanPartitionReader.SCHEMA;
    }

    /** The parts {@code schemaIdScan} names, each once, in the order given. */
    private static List<String> idScan(Map<String, String> lower) {
        String given = lower.get(ID_SCAN);
        List<String> parts = new ArrayList<>();
        if (given == null || given.isBlank()) {
            return List.of();
        }
        for (String part : given.split(",", -1)) {
            String name = part.strip();
            if (!name.equals("key") && !name.equals("value") || parts.contains(name)) {
                throw new IllegalArgumentException("option 'schemaIdScan' must name key, value or both, each once "
                        + "(comma-separated), got '" + given + "'");
            }
            parts.add(name);
        }
        return List.copyOf(parts);
    }

    private static Map<String, String> lowerCase(Map<String, String> options) {
        Map<String, String> lower = new HashMap<>();
        options.forEach((key, value) -> lower.put(key.toLowerCase(Locale.ROOT), value));
        return lower;
    }

    /** The ranges and setting names, never the settings' values (they may hold secrets). */
    @Override
    public String toString() {
        return "ReadOptions[" + groups.size() + " groups, " + groups.stream().mapToInt(List::size).sum()
                + " ranges, kafka settings " + new java.util.TreeSet<>(kafka.keySet()) + ", pollTimeoutMs="
                + pollTimeoutMs + ", timeoutMs=" + timeoutMs + (digests ? ", digests" : "")
                + (idScan.isEmpty() ? "" : ", schemaIdScan " + String.join(",", idScan))
                + (coalesce ? ", coalesced" : "") + "]";
    }

    private static List<List<TopicRange>> groups(String json) {
        JsonNode root = OptionValues.json("ranges", json, "JSON " + SHAPE);
        if (root == null || !root.isArray()) {
            throw new IllegalArgumentException("option 'ranges' must be a JSON list of groups " + SHAPE + ", got "
                    + OptionValues.excerpt(root));
        }
        List<List<TopicRange>> groups = new ArrayList<>(root.size());
        for (int g = 0; g < root.size(); g++) {
            JsonNode group = root.get(g);
            if (!group.isArray()) {
                throw new IllegalArgumentException("option 'ranges': group " + g
                        + " must be a list of [topic, partition, start, end], got " + OptionValues.excerpt(group));
            }
            List<TopicRange> ranges = new ArrayList<>(group.size());
            Set<TopicPartition> seen = new HashSet<>();
            for (int r = 0; r < group.size(); r++) {
                TopicRange range = range(group.get(r), g, r);
                if (!seen.add(range.topicPartition())) {
                    throw new IllegalArgumentException("option 'ranges': group " + g + " names topic '"
                            + range.topic() + "' partition " + range.partition()
                            + " twice; a group reads one range per partition");
                }
                ranges.add(range);
            }
            groups.add(List.copyOf(ranges));
        }
        return List.copyOf(groups);
    }

    private static TopicRange range(JsonNode node, int g, int r) {
        boolean shaped = node.isArray() && node.size() == 4 && node.get(0).isTextual()
                && !node.get(0).asText().isEmpty() && node.get(1).canConvertToInt();
        for (int i = 1; shaped && i < 4; i++) {
            shaped = node.get(i).isIntegralNumber() && node.get(i).canConvertToLong() && node.get(i).asLong() >= 0;
        }
        if (!shaped) {
            throw new IllegalArgumentException("option 'ranges': group " + g + " range " + r
                    + " must be [topic, partition, start, end] (a topic name and three integers >= 0), got "
                    + OptionValues.excerpt(node));
        }
        return new TopicRange(node.get(0).asText(), node.get(1).asInt(), node.get(2).asLong(), node.get(3).asLong());
    }



}
