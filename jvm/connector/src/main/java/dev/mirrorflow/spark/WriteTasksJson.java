package dev.mirrorflow.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import com.fasterxml.jackson.databind.JsonNode;
import dev.mirrorflow.kafka.write.WriteTask;
import org.apache.kafka.common.TopicPartition;

/**
 * The {@code tasks} option of a {@code mirrorflow-mirror} read: a JSON list of write tasks (the
 * fields of the Python {@code WriteTask}, as {@code plain(task)} gives them, and
 * {@code read_start}), checked and dealt out to their write slots, one {@link SlotPartition} per
 * slot in slot order. Each fault is an {@link IllegalArgumentException} naming the option, the
 * task's index and the field.
 */
final class WriteTasksJson {

    private static final Set<String> REQUIRED = Set.of("flow", "plan_id", "topic", "partition", "remote_topic",
            "start", "end");
    private static final Set<String> FIELDS = Set.of("flow", "plan_id", "topic", "partition", "remote_topic", "start",
            "end", "max_message_bytes", "fail_on_data_loss", "exactly_once", "chunk_records", "written_until",
            "restamp_ms", "slot", "read_start");

    private WriteTasksJson() {
    }

    /** The slots of the tasks of {@code json}. */
    static List<SlotPartition> parse(String json) {
        List<WriteTask> tasks = new ArrayList<>();
        List<Long> readStarts = new ArrayList<>();
        tasks(json, tasks, readStarts);
        return slots(tasks, readStarts);
    }

    private static void tasks(String json, List<WriteTask> tasks, List<Long> readStarts) {
        JsonNode root = OptionValues.json("tasks", json, "a JSON list of write tasks");
        if (root == null || !root.isArray()) {
            throw new IllegalArgumentException("option 'tasks' must be a JSON list of write tasks, got " + OptionValues.excerpt(root));
        }
        for (int i = 0; i < root.size(); i++) {
            JsonNode node = root.get(i);
            WriteTask task = task(node, i);
            if (!tasks.isEmpty() && !tasks.get(0).flow().equals(task.flow())) {
                throw new IllegalArgumentException("option 'tasks': task " + i + " is of flow '" + task.flow()
                        + "', task 0 of '" + tasks.get(0).flow() + "'; one mirror read writes one flow");
            }
            long readStart = node.has("read_start") ? number(node, "read_start", i, 0)
                    : Math.max(task.start(), task.writtenUntil());
            tasks.add(task);
            readStarts.add(readStart);
        }
    }

    private static WriteTask task(JsonNode node, int i) {
        if (node == null || !node.isObject()) {
            throw new IllegalArgumentException("option 'tasks': task " + i + " must be a JSON object, got "
                    + OptionValues.excerpt(node));
        }
        for (Iterator<String> names = node.fieldNames(); names.hasNext(); ) {
            String name = names.next();
            if (!FIELDS.contains(name)) {
                throw new IllegalArgumentException("option 'tasks': task " + i + " has an unknown field '" + name
                        + "'; the fields are " + new TreeSet<>(FIELDS));
            }
        }
        for (String name : new TreeSet<>(REQUIRED)) {
            if (!node.hasNonNull(name)) {
                throw new IllegalArgumentException("option 'tasks': task " + i + " has no '" + name + "'");
            }
        }
        JsonNode limit = node.get("max_message_bytes");
        return new WriteTask(string(node, "flow", i, null), string(node, "plan_id", i, null),
                string(node, "topic", i, null), (int) number(node, "partition", i, 0),
                string(node, "remote_topic", i, null), number(node, "start", i, 0), number(node, "end", i, 0),
                limit == null || limit.isNull() ? 0 : number(node, "max_message_bytes", i, 0),
                bool(node, "fail_on_data_loss", i, true), string(node, "exactly_once", i, "requested"),
                (int) Math.min(Integer.MAX_VALUE, node.has("chunk_records") ? number(node, "chunk_records", i, 1) : 100_000),
                node.has("written_until") ? number(node, "written_until", i, 0) : 0,
                node.has("restamp_ms") ? number(node, "restamp_ms", i, Long.MIN_VALUE) : 0,
                node.has("slot") ? (int) number(node, "slot", i, 0) : 0);
    }

    private static List<SlotPartition> slots(List<WriteTask> tasks, List<Long> readStarts) {
        Map<Integer, List<Integer>> bySlot = new TreeMap<>();
        for (int i = 0; i < tasks.size(); i++) {
            bySlot.computeIfAbsent(tasks.get(i).slot(), s -> new ArrayList<>()).add(i);
        }
        List<SlotPartition> out = new ArrayList<>();
        for (Map.Entry<Integer, List<Integer>> slot : bySlot.entrySet()) {
            List<WriteTask> mine = new ArrayList<>();
            List<Long> starts = new ArrayList<>();
            Set<TopicPartition> seen = new HashSet<>();
            for (int i : slot.getValue()) {
                WriteTask task = tasks.get(i);
                if (!task.planId().equals(tasks.get(slot.getValue().get(0)).planId())) {
                    throw new IllegalArgumentException("option 'tasks': slot " + slot.getKey() + " holds ranges of plans '"
                            + tasks.get(slot.getValue().get(0)).planId() + "' and '" + task.planId() + "'");
                }
                if (!seen.add(task.sourcePartition())) {
                    throw new IllegalArgumentException("option 'tasks': slot " + slot.getKey() + " names "
                            + task.source() + " twice; a slot writes one range per partition");
                }
                mine.add(task);
                starts.add(readStarts.get(i));
            }
            out.add(new SlotPartition(slot.getKey(), List.copyOf(mine), List.copyOf(starts)));
        }
        return List.copyOf(out);
    }

    private static String string(JsonNode node, String name, int i, String otherwise) {
        JsonNode value = node.get(name);
        if (value == null || value.isNull()) {
            return otherwise;
        }
        if (!value.isTextual() || value.asText().isEmpty()) {
            throw new IllegalArgumentException("option 'tasks': task " + i + " field '" + name
                    + "' must be a non-empty string, got " + OptionValues.excerpt(value));
        }
        return value.asText();
    }

    private static long number(JsonNode node, String name, int i, long least) {
        JsonNode value = node.get(name);
        if (value == null || !value.isIntegralNumber() || !value.canConvertToLong() || value.asLong() < least
                || (name.equals("partition") || name.equals("slot")) && !value.canConvertToInt()) {
            throw new IllegalArgumentException("option 'tasks': task " + i + " field '" + name + "' must be a whole number"
                    + (least == Long.MIN_VALUE ? "" : " >= " + least) + ", got " + OptionValues.excerpt(value));
        }
        return value.asLong();
    }

    private static boolean bool(JsonNode node, String name, int i, boolean otherwise) {
        JsonNode value = node.get(name);
        if (value == null || value.isNull()) {
            return otherwise;
        }
        if (!value.isBoolean()) {
            throw new IllegalArgumentException("option 'tasks': task " + i + " field '" + name
                    + "' must be true or false, got " + OptionValues.excerpt(value));
        }
        return value.asBoolean();
    }


}
