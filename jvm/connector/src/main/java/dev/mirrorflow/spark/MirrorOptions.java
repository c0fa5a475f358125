package dev.mirrorflow.spark;

import java.io.Serializable;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;

import dev.mirrorflow.kafka.read.RangeConsumers;
import dev.mirrorflow.kafka.read.RangeReadException;
import dev.mirrorflow.kafka.write.SchemaIds;
import dev.mirrorflow.kafka.write.WriteTask;
import dev.mirrorflow.kafka.write.WriterConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.config.ConfigException;

/**
 * The options of a {@code mirrorflow-mirror} read, checked on the driver before any task starts,
 * each fault an {@link IllegalArgumentException} with a one-line message naming the option.
 * Option names are case-insensitive, as Spark's are.
 *
 * <ul>
 *   <li>{@code tasks} (required): a JSON list of the ranges to write, one object per range with
 *       the fields of the Python {@code WriteTask} ({@code flow, plan_id, topic, partition,
 *       remote_topic, start, end} required; {@code max_message_bytes} (null), {@code
 *       fail_on_data_loss} (true), {@code exactly_once} ("requested"), {@code chunk_records}
 *       (100000), {@code written_until} (0), {@code restamp_ms} (0), {@code slot} (0) optional)
 *       and {@code read_start}, the offset the read starts at (default: the larger of
 *       {@code start} and {@code written_until}). One flow; a slot's ranges share its plan and
 *       name each source partition once. Each slot is one input partition (one task).</li>
 *   <li>{@code source.kafka.*}: the source consumer's settings ({@code bootstrap.servers}
 *       required, {@code isolation.level} as the cluster reads), as {@code mirrorflow-kafka}'s
 *       {@code kafka.*}.</li>
 *   <li>{@code target.kafka.*}: the target's client settings ({@code bootstrap.servers}
 *       required): all of them for the producer (the writer's forced settings win), those a
 *       consumer or an admin client knows for those.</li>
 *   <li>{@code sourceAlias}, {@code targetAlias}: the clusters' aliases for names and messages
 *       (default: the flow's two sides of {@code ->}); {@code spansTopic} (default
 *       {@code mirrorflow-spans.<source>.internal}), {@code progressGroup} (default
 *       {@code __mirrorflow.<source>}); {@code chunkBytes} (default 67108864).</li>
 *   <li>{@code digestHeaders} (default true): whether the proof's digests hash headers.</li>
 *   <li>A schema registry transfer: {@code schemaIds}, the JSON table of the ids to rewrite
 *       ({@link SchemaIds#parse}), and {@code dropHeaders} (default false).</li>
 *   <li>{@code pollTimeoutMs} (1000) and {@code timeoutMs} (120000): the reader's, see
 *       {@link dev.mirrorflow.kafka.read.RangeReader}.</li>
 * </ul>
 *
 * @param slots         the slots' ranges, by slot number
 * @param source        the source consumer's settings
 * @param target        the target's client settings
 * @param writer        the writer's names and chunk size
 * @param digestHeaders whether digests hash headers
 * @param pollTimeoutMs the reader's longest poll
 * @param timeoutMs     the reader's longest wait without progress
 */
public record MirrorOptions(List<SlotPartition> slots, Map<String, String> source, Map<String, String> target,
                            WriterConfig writer, boolean digestHeaders, long pollTimeoutMs, long timeoutMs)
        implements Serializable {

    private static final long serialVersionUID = 1L;

    /** Parses and checks Spark's options of a mirror read. */
    public static MirrorOptions parse(Map<String, String> options) {
        Map<String, String> lower = new HashMap<>();
        Map<String, String> source = new HashMap<>();
        Map<String, String> target = new HashMap<>();
        for (Map.Entry<String, String> option : options.entrySet()) {
            String key = option.getKey().toLowerCase(Locale.ROOT);
            lower.put(key, option.getValue());
            if (key.startsWith("source.kafka.")) {
                source.put(option.getKey().substring("source.kafka.".length()), option.getValue());
            } else if (key.startsWith("target.kafka.")) {
                target.put(option.getKey().substring("target.kafka.".length()), option.getValue());
            }
        }
        for (Map.Entry<String, Map<String, String>> side : Map.of("source", source, "target", target).entrySet()) {
            String servers = side.getValue().get(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG);
            if (servers == null || servers.isBlank()) {
                throw new IllegalArgumentException("option '" + side.getKey() + ".kafka.bootstrap.servers' is required: "
                        + "the " + side.getKey() + " cluster's brokers");
            }
        }
        try {
            ConsumerConfig.configDef().parse(RangeConsumers.settings(source));
        } catch (ConfigException e) {
            throw new IllegalArgumentException("option 'source.kafka.*' has a bad consumer setting: "
                    + RangeReadException.oneLine(e.getMessage()), e);
        }
        SchemaIds schemaIds = SchemaIds.parse(lower.get("schemaids"), OptionValues.flag(lower, "dropHeaders", false));
        List<SlotPartition> slots = WriteTasksJson.parse(lower.get("tasks"));
        WriteTask first = slots.isEmpty() ? null : slots.get(0).tasks().get(0);
        String sourceAlias = text(lower, "sourceAlias", first == null ? "" : first.sourceAlias());
        String targetAlias = text(lower, "targetAlias", first == null ? "" : first.targetAlias());
        WriterConfig writer = new WriterConfig(targetAlias, target.get(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG),
                text(lower, "spansTopic", WriterConfig.spansTopic(sourceAlias)),
                text(lower, "progressGroup", WriterConfig.progressGroup(sourceAlias)),
                OptionValues.positive(lower, "chunkBytes", WriterConfig.DEFAULT_CHUNK_BYTES, "a whole number of bytes"), schemaIds);
        return new MirrorOptions(slots, Map.copyOf(source), Map.copyOf(target), writer,
                OptionValues.flag(lower, "digestHeaders", true),
                OptionValues.positive(lower, "pollTimeoutMs", 1000, "a whole number of milliseconds"),
                OptionValues.positive(lower, "timeoutMs", 120_000, "a whole number of milliseconds"));
    }

    /** Counts and setting names, never the settings' values (they may hold secrets). */
    @Override
    public String toString() {
        return "MirrorOptions[" + slots.size() + " slots, " + slots.stream().mapToInt(s -> s.tasks().size()).sum()
                + " ranges, source settings " + new TreeSet<>(source.keySet()) + ", target settings "
                + new TreeSet<>(target.keySet()) + ", " + writer + ", digestHeaders=" + digestHeaders + "]";
    }

    private static String text(Map<String, String> lower, String name, String otherwise) {
        String value = lower.get(name.toLowerCase(Locale.ROOT));
        if (value == null) {
            return otherwise;
        }
        if (value.isBlank()) {
            throw new IllegalArgumentException("option '" + name + "' must not be empty");
        }
        return value.strip();
    }



}
