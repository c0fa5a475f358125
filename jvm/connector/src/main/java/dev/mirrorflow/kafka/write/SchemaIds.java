package dev.mirrorflow.kafka.write;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Headers;

/**
 * The schema registry transfer's rewrite of the records a slot writes: in a key or value in
 * Confluent's wire format (byte 0 is 0, bytes 1-4 the schema id, big endian) the source
 * registry's id becomes the target registry's, and nothing else of the record changes, as the
 * SMT does under MirrorMaker 2. The Python driver maps the ids (the registries are control
 * plane: {@code mirrorflow.schema.ids_in_ranges}) and hands the table over: every id a scan of
 * the ranges found, or, where the flow's stored mappings cover the plan's topics, those, with no
 * scan. A record whose id a transferred part's table lacks, or whose part is not in the wire
 * format, is refused ({@link #UNMAPPED} in its message: the driver then scans the ranges, maps
 * what it finds or refuses the record by name, and writes again), never written with the source
 * registry's id. {@code include.message.headers = false} drops every record's headers.
 * The proof's digests are of the records as read, before this rewrite.
 *
 * <p>Both rewrites write the id into the array they are given, with no copy: it is the
 * consumer's own copy of the record's bytes (its {@code ByteArrayDeserializer} makes one per
 * record), which the writer has hashed before and nothing reads after, as the proof reads a
 * target record only to digest it: a copy of each, in the writer and again in the proof, would
 * be work for nothing.
 */
public final class SchemaIds implements Serializable {

    private static final long serialVersionUID = 1L;
    /** No transfer: every record as it is read. */
    public static final SchemaIds NONE = new SchemaIds(Map.of(), false);
    private static final int HEADER = 5;
    /** In the message of every refusal of a record for the transfer: the driver's cue to scan. */
    public static final String UNMAPPED = "not mapped for the schema registry transfer";
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Map<String, Map<String, Map<Integer, Integer>>> table;
    private final boolean dropHeaders;

    /**
     * @param table       remote topic, then record part ({@code key}, {@code value}), then source
     *                    id to target id
     * @param dropHeaders whether the records are written without their headers
     */
    public SchemaIds(Map<String, Map<String, Map<Integer, Integer>>> table, boolean dropHeaders) {
        this.table = Map.copyOf(table);
        this.dropHeaders = dropHeaders;
    }

    /**
     * The table from its JSON, {@code {"remote topic": {"value": {"7": 1001}}}} (blank: no ids).
     *
     * @throws IllegalArgumentException naming the option on malformed JSON
     */
    public static SchemaIds parse(String json, boolean dropHeaders) {
        Map<String, Map<String, Map<Integer, Integer>>> table = new HashMap<>();
        if (json != null && !json.isBlank()) {
            try {
                JsonNode root = JSON.readTree(json);
                for (Iterator<Map.Entry<String, JsonNode>> topics = root.fields(); topics.hasNext(); ) {
                    Map.Entry<String, JsonNode> topic = topics.next();
                    Map<String, Map<Integer, Integer>> parts = new HashMap<>();
                    for (Iterator<Map.Entry<String, JsonNode>> it = topic.getValue().fields(); it.hasNext(); ) {
                        Map.Entry<String, JsonNode> part = it.next();
                        Map<Integer, Integer> ids = new HashMap<>();
                        for (Iterator<Map.Entry<String, JsonNode>> id = part.getValue().fields(); id.hasNext(); ) {
                            Map.Entry<String, JsonNode> pair = id.next();
                            ids.put(Integer.parseInt(pair.getKey()), pair.getValue().intValue());
                        }
                        parts.put(part.getKey(), Map.copyOf(ids));
                    }
                    table.put(topic.getKey(), Map.copyOf(parts));
                }
            } catch (JsonProcessingException | NumberFormatException e) {
                throw new IllegalArgumentException("option 'schemaIds' is not a JSON table of remote topic, part "
                        + "and source id to target id: " + e.getMessage().lines().findFirst().orElse(""));
            }
        }
        return new SchemaIds(table, dropHeaders);
    }

    /** The key {@code record} is written with (its own array, the id rewritten in place). */
    public byte[] key(WriteTask task, ConsumerRecord<byte[], byte[]> record) {
        return rewrite(task, "key", record.key(), record);
    }

    /** The value {@code record} is written with (its own array, the id rewritten in place). */
    public byte[] value(WriteTask task, ConsumerRecord<byte[], byte[]> record) {
        return rewrite(task, "value", record.value(), record);
    }

    /** The headers {@code record} is written with: none where they are dropped or there are none. */
    public Headers headers(ConsumerRecord<byte[], byte[]> record) {
        return dropHeaders || record.headers().toArray().length == 0 ? null : record.headers();
    }

    /**
     * {@code data}, the {@code part} of a record of {@code topic}, with its schema id replaced in
     * place where the table has it, else as it is (the proof's view of a target record, its target
     * id mapped back to the source's: Python's {@code schema.wire.rewrite_sql}).
     */
    public byte[] mapped(String topic, String part, byte[] data) {
        // The cheap tests first: this runs twice for every record the proof reads, and the
        // table's lookups were a tenth of a proof's samples where there was no table at all.
        if (table.isEmpty() || !isWire(data)) {
            return data;
        }
        Map<Integer, Integer> ids = table.getOrDefault(topic, Map.of()).get(part);
        if (ids == null) {
            return data;
        }
        Integer mapped = ids.get(ByteBuffer.wrap(data, 1, 4).getInt());
        return mapped == null ? data : withId(data, mapped);
    }

    static boolean isWire(byte[] data) {
        return data != null && data.length >= HEADER && data[0] == 0;
    }

    /** {@code data} with {@code id} written over its schema id (in place: see the class's note). */
    private static byte[] withId(byte[] data, int id) {
        ByteBuffer.wrap(data, 1, 4).putInt(id);
        return data;
    }

    private byte[] rewrite(WriteTask task, String part, byte[] data, ConsumerRecord<byte[], byte[]> record) {
        if (table.isEmpty() || data == null) {
            return data;
        }
        Map<Integer, Integer> ids = table.getOrDefault(task.remoteTopic(), Map.of()).get(part);
        if (ids == null) {
            return data;
        }
        if (!isWire(data)) {
            throw refused(record, "its " + part + " is not in Confluent's wire format, " + UNMAPPED);
        }
        int source = ByteBuffer.wrap(data, 1, 4).getInt();
        Integer target = ids.get(source);
        if (target == null) {
            throw refused(record, "schema id " + Integer.toUnsignedLong(source) + " of its " + part + " is "
                    + UNMAPPED);
        }
        return withId(data, target);
    }

    /** The refusal of {@code record}, its message made only when a record is refused. */
    private static WriteException refused(ConsumerRecord<byte[], byte[]> record, String why) {
        return new WriteException("source " + record.topic() + "[" + record.partition() + "] offset "
                + record.offset() + ": " + why + "; nothing from it on is written");
    }
}
