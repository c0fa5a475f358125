package dev.mirrorflow.kafka.write;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Future;
import java.util.stream.Collectors;

import dev.mirrorflow.digest.RangeDigest;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminResults;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.Partitioner;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

/**
 * The slot writer's logic on Kafka's {@code MockProducer} and {@code MockConsumer}: doubles,
 * because a unit test has no broker. The Python suite runs the writer on real brokers (fencing,
 * commit markers, paused brokers, retention); here the spans, positions, chunking, resume,
 * careful mode, retention and failure messages are pinned. MockProducer gives each partition's
 * records consecutive offsets and writes no transaction markers.
 */
class SlotWriterTest {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String SPANS = "mirrorflow-spans.a.internal";
    private static final String GROUP = "__mirrorflow.a";
    /** The group MockConsumer's metadata names: the offsets go with the progress consumer's metadata. */
    private static final String METADATA_GROUP = "dummy.group.id";
    private static final WriterConfig CONFIG = new WriterConfig("b", "127.0.0.1:9092", SPANS, GROUP, 64L << 20, SchemaIds.NONE);

    /** Every record's partition is given, but span records are not: the spans topic has one. */
    public static final class FirstPartition implements Partitioner {
        @Override
        public int partition(String topic, Object key, byte[] keyBytes, Object value, byte[] valueBytes, Cluster c) {
            return 0;
        }

        @Override
        public void close() {
        }

        @Override
        public void configure(Map<String, ?> configs) {
        }
    }

    private static Cluster cluster() {
        Node node = new Node(1, "localhost", 9092);
        List<PartitionInfo> partitions = new ArrayList<>();
        for (String topic : List.of("a.orders", "a.clicks", SPANS)) {
            for (int p = 0; p < (topic.equals(SPANS) ? 1 : 2); p++) {
                partitions.add(new PartitionInfo(topic, p, node, new Node[] {node}, new Node[] {node}));
            }
        }
        return new Cluster("c", List.of(node), partitions, Set.of(), Set.of());
    }

    static class Producing extends MockProducer<byte[], byte[]> {
        Producing() {
            super(cluster(), true, new FirstPartition(), new ByteArraySerializer(), new ByteArraySerializer());
        }

        int aborts;

        @Override
        public void abortTransaction() {
            aborts++;
            super.abortTransaction();
        }
    }

    /** The target's clients: the given producers in turn, a consumer holding the progress group's positions. */
    static final class Clients implements WriteClients {
        final List<MockProducer<byte[], byte[]>> producers = new ArrayList<>();
        final List<Map<String, Object>> settings = new ArrayList<>();
        final MockConsumer<byte[], byte[]> consumer = new MockConsumer<>("earliest");
        final List<Map<TopicPartition, OffsetAndMetadata>> adminCommits = new ArrayList<>();

        Clients(MockProducer<byte[], byte[]> first, MockProducer<byte[], byte[]> second) {
            this(first);
            producers.add(second);
        }

        Clients(MockProducer<byte[], byte[]> producer) {
            this();
            producers.add(producer);
        }

        Clients() {
            Cluster cluster = cluster();
            for (String topic : cluster.topics()) {
                consumer.updatePartitions(topic, cluster.partitionsForTopic(topic));
            }
        }

        final Map<TopicPartition, OffsetAndMetadata> positions = new java.util.HashMap<>();

        /** A resume position committed to the progress group. */
        void committed(String topic, int partition, long offset, String planId) {
            positions.put(new TopicPartition(topic, partition), new OffsetAndMetadata(offset, planId));
        }

        @Override
        public Producer<byte[], byte[]> producer(Map<String, Object> config) {
            settings.add(config);
            return producers.remove(0);
        }

        @Override
        public Consumer<byte[], byte[]> progressConsumer(String group) {
            assertEquals(GROUP, group);
            return new MockConsumer<>("earliest") {
                @Override
                public synchronized Map<TopicPartition, OffsetAndMetadata> committed(Set<TopicPartition> partitions,
                                                                                     java.time.Duration timeout) {
                    Map<TopicPartition, OffsetAndMetadata> out = new java.util.HashMap<>();
                    partitions.stream().filter(positions::containsKey).forEach(tp -> out.put(tp, positions.get(tp)));
                    return out;
                }

                @Override
                public Map<String, List<PartitionInfo>> listTopics(java.time.Duration timeout) {
                    return consumer.listTopics();
                }
            };
        }

        @Override
        @SuppressWarnings("unchecked")
        public Admin admin() {
            return (Admin) Proxy.newProxyInstance(Admin.class.getClassLoader(), new Class<?>[] {Admin.class},
                    (proxy, method, args) -> switch (method.getName()) {
                        case "alterConsumerGroupOffsets" -> {
                            assertEquals(GROUP, args[0]);
                            adminCommits.add((Map<TopicPartition, OffsetAndMetadata>) args[1]);
                            yield AdminResults.alteredOffsets();
                        }
                        case "close" -> null;
                        default -> throw new UnsupportedOperationException(method.getName());
                    });
        }
    }

    private static WriteTask task(String topic, int partition, long start, long end, int chunk) {
        return new WriteTask("a->b", "plan-1", topic, partition, "a." + topic, start, end, 0, true, "requested", chunk,
                start, 0, 0);
    }

    private static SlotWriter writer(Clients clients, SourceLogStart logStart, WriteTask... tasks) {
        SlotWriter writer = new SlotWriter(List.of(tasks), CONFIG, Map.of("bootstrap.servers", "127.0.0.1:9092"),
                clients, logStart, SlotWriterTest::source, t -> SourceDigest.NONE);
        writer.open();
        return writer;
    }

    /** The source the tests' records come from, read again: every offset holds {@link #record} at timestamp 1. */
    private static Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> source(Map<TopicPartition, long[]> spans) {
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> out = new HashMap<>();
        spans.forEach((tp, span) -> {
            List<ConsumerRecord<byte[], byte[]>> records = new ArrayList<>();
            for (long offset = span[0]; offset <= span[1]; offset++) {
                records.add(record(tp.topic(), tp.partition(), offset, 1));
            }
            out.put(tp, records);
        });
        return out;
    }

    static ConsumerRecord<byte[], byte[]> record(String topic, int partition, long offset, long timestamp) {
        byte[] value = (topic + "-" + partition + "-" + offset).getBytes(StandardCharsets.UTF_8);
        return new ConsumerRecord<>(topic, partition, offset, timestamp, TimestampType.CREATE_TIME, 1, value.length,
                new byte[] {(byte) offset}, value, new RecordHeaders(), Optional.empty());
    }

    private static List<ProducerRecord<byte[], byte[]>> sent(MockProducer<byte[], byte[]> producer, String topic) {
        return producer.history().stream().filter(r -> r.topic().equals(topic)).collect(Collectors.toList());
    }

    /** The spans sent, each span record's in order. */
    private static List<JsonNode> spans(MockProducer<byte[], byte[]> producer) throws Exception {
        List<JsonNode> out = new ArrayList<>();
        for (ProducerRecord<byte[], byte[]> r : sent(producer, SPANS)) {
            JSON.readTree(r.value()).get("spans").forEach(out::add);
        }
        return out;
    }

    @Test
    void writesRecordsWithSpansAndPositionsInEachTransaction() throws Exception {
        Producing producer = new Producing();
        Clients clients = new Clients(producer);
        SlotWriter writer = writer(clients, (t, p) -> 0, task("orders", 0, 0, 1000, 300));
        assertEquals("mirrorflow|a->b|write-0", clients.settings.get(0).get("transactional.id"));
        // Upstream offsets with gaps (a compacted source): 0, 2, ..., 498, then 500..749.
        for (long offset = 0; offset < 500; offset += 2) {
            writer.write(record("orders", 0, offset, 1000 + offset));
        }
        for (long offset = 500; offset < 750; offset++) {
            writer.write(record("orders", 0, offset, 1000 + offset));
        }
        RangeResult result = writer.close().get(0);

        List<ProducerRecord<byte[], byte[]>> data = sent(producer, "a.orders");
        assertEquals(500, data.size());
        assertEquals("orders-0-498", new String(data.get(249).value(), StandardCharsets.UTF_8));
        assertEquals(1498L, data.get(249).timestamp());
        assertEquals(2, producer.commitCount());
        List<JsonNode> spans = spans(producer);
        assertEquals(2, spans.size());
        assertEquals("{\"spans\":[{\"plan\":\"plan-1\",\"topic\":\"orders\",\"partition\":0,\"remote\":\"a.orders\","
                + "\"u\":[550,749],\"d\":[300,499],\"n\":200,\"syncs\":[[550,300]]}]}",
                new String(sent(producer, SPANS).get(1).value(), StandardCharsets.UTF_8));
        assertEquals("plan-1/orders/0/a.orders/300", new String(sent(producer, SPANS).get(1).key(), StandardCharsets.UTF_8));
        assertEquals("[0,549]", spans.get(0).get("u").toString());
        assertEquals("[0,299]", spans.get(0).get("d").toString());
        assertEquals("[0,0]", spans.get(0).get("syncs").get(0).toString());
        assertEquals("[2,1]", spans.get(0).get("syncs").get(1).toString());
        assertEquals("[500,250]", spans.get(0).get("syncs").get(250).toString());
        // Each commit carried the range's next upstream offset with the plan's id.
        List<Map<String, Map<TopicPartition, OffsetAndMetadata>>> positions = producer.consumerGroupOffsetsHistory();
        assertEquals(List.of(
                Map.of(METADATA_GROUP, Map.of(new TopicPartition("a.orders", 0), new OffsetAndMetadata(550, "plan-1"))),
                Map.of(METADATA_GROUP, Map.of(new TopicPartition("a.orders", 0), new OffsetAndMetadata(750, "plan-1")))),
                positions);

        JsonNode json = JSON.readTree(result.toJson());
        assertEquals(List.of("topic", "partition", "remote_topic", "start", "end", "resumed_from", "records_written",
                "bytes_written", "first_downstream", "last_downstream", "transactional", "at_least_once", "restamped",
                "gaps", "record_age_ms", "replication_latency_ms", "write_seconds", "spans", "source_digest",
                "schema_ids"), toList(json.fieldNames()));
        assertEquals(500, json.get("records_written").asLong());
        assertEquals(0, json.get("first_downstream").asLong());
        assertEquals(499, json.get("last_downstream").asLong());
        assertTrue(json.get("transactional").asBoolean());
        assertTrue(json.get("at_least_once").isNull());
        assertEquals(2, json.get("spans").size());
        assertEquals("{\"spans\":[" + json.get("spans").get(0).asText() + "]}",
                new String(sent(producer, SPANS).get(0).value(), StandardCharsets.UTF_8));
        long payload = data.stream().mapToLong(r -> r.key().length + r.value().length).sum();
        assertEquals(payload, json.get("bytes_written").asLong());
        assertTrue(json.get("source_digest").isNull());  // upstream offsets with gaps
        assertEquals(3, json.get("record_age_ms").size());
        assertEquals("[]", json.get("schema_ids").toString());
        assertTrue(producer.closed());
    }

    private static List<String> toList(java.util.Iterator<String> names) {
        List<String> out = new ArrayList<>();
        names.forEachRemaining(out::add);
        return out;
    }

    @Test
    void resumesWhereThisPlansPositionSaysOnly() {
        Producing producer = new Producing();
        Clients clients = new Clients(producer);
        clients.committed("a.orders", 0, 600, "plan-1");
        clients.committed("a.orders", 1, 900, "plan-0");  // an older plan's: ignored
        WriteTask second = new WriteTask("a->b", "plan-1", "orders", 1, "a.orders", 0, 1000, 0, true, "requested",
                100_000, 700, 0, 0);
        SlotWriter writer = writer(clients, (t, p) -> 0, task("orders", 0, 0, 1000, 100_000), second);
        for (long offset = 0; offset < 1000; offset++) {
            writer.write(record("orders", 0, offset, 5));
            writer.write(record("orders", 1, offset, 5));
        }
        List<RangeResult> results = writer.close();
        assertEquals(600, results.get(0).resumedFrom());
        assertEquals(400, results.get(0).recordsWritten());
        assertEquals(700, results.get(1).resumedFrom());  // written_until: the plan's spans
        assertEquals(300, results.get(1).recordsWritten());
        assertEquals(1, producer.commitCount());
        assertEquals(Map.of(METADATA_GROUP, Map.of(new TopicPartition("a.orders", 0), new OffsetAndMetadata(1000, "plan-1"),
                new TopicPartition("a.orders", 1), new OffsetAndMetadata(1000, "plan-1"))),
                producer.consumerGroupOffsetsHistory().get(0));
    }

    @Test
    void oneTransactionSpansEveryRangeOfTheSlotAndResultsComeInTaskOrder() throws Exception {
        Producing producer = new Producing();
        Clients clients = new Clients(producer);
        SlotWriter writer = writer(clients, (t, p) -> 0, task("orders", 0, 0, 3, 100), task("orders", 1, 0, 3, 100),
                task("clicks", 0, 0, 3, 100), task("clicks", 1, 0, 3, 100));
        for (long offset = 0; offset < 3; offset++) {
            writer.write(record("clicks", 0, offset, 1));
            writer.write(record("orders", 1, offset, 1));
            writer.write(record("orders", 0, offset, 1));
        }
        List<RangeResult> results = writer.close();
        assertEquals(List.of("orders[0]", "orders[1]", "clicks[0]"),
                results.stream().map(r -> r.task().source()).toList());  // clicks[1] got no record
        assertEquals(1, producer.commitCount());
        assertEquals(1, sent(producer, SPANS).size());  // one span record for the transaction
        assertEquals(List.of("orders", "orders", "clicks"),
                spans(producer).stream().map(s -> s.get("topic").asText()).toList());
        assertEquals("plan-1/orders/0/a.orders/0", new String(sent(producer, SPANS).get(0).key(),
                StandardCharsets.UTF_8));
        for (RangeResult result : results) {
            assertEquals(3, result.recordsWritten());
        }
        WriteException refused = assertThrows(WriteException.class, () -> {
            Producing other = new Producing();
            SlotWriter again = writer(new Clients(other), (t, p) -> 0, task("orders", 0, 0, 3, 100));
            again.write(record("clicks", 0, 0, 1));
        });
        assertEquals("write slot 0 got records of clicks[0], which the plan dealt elsewhere", refused.getMessage());
    }

    /** Another producer writes the same remote partition (fan-in) every few records. */
    static final class Interleaved extends Producing {
        int sends;

        @Override
        public synchronized Future<RecordMetadata> send(ProducerRecord<byte[], byte[]> record, Callback callback) {
            Future<RecordMetadata> out = super.send(record, callback);
            if (record.topic().equals("a.orders") && ++sends % 7 == 3) {
                super.send(new ProducerRecord<>("a.orders", 0, null, "other".getBytes(StandardCharsets.UTF_8)), null);
            }
            return out;
        }
    }

    @Test
    void anotherProducersRecordsAreLeftOutOfTheSpans() throws Exception {
        Interleaved producer = new Interleaved();
        SlotWriter writer = writer(new Clients(producer), (t, p) -> 0, task("orders", 0, 0, 100, 100_000));
        for (long offset = 0; offset < 100; offset++) {
            writer.write(record("orders", 0, offset, 1));
        }
        RangeResult result = writer.close().get(0);
        assertTrue(writer.careful);
        assertEquals(1, producer.aborts);  // the transaction written again, remote offsets of every record kept
        assertEquals(100, result.recordsWritten());
        // MockProducer numbers on across the abort: the rewrite starts after the first attempt's offsets.
        List<ProducerRecord<byte[], byte[]>> landed = sent(producer, "a.orders");
        Set<Long> covered = new HashSet<>();
        long records = 0;
        for (JsonNode span : spans(producer)) {
            long first = span.get("d").get(0).asLong();
            long last = span.get("d").get(1).asLong();
            assertEquals(last - first + 1, span.get("n").asLong());
            records += span.get("n").asLong();
            for (long d = first; d <= last; d++) {
                covered.add(d);
            }
        }
        assertEquals(100, records);
        assertTrue(spans(producer).size() > 1);
        // The first attempt took offsets 0..113 (100 records, 14 of the other producer's), then was aborted.
        Set<Long> mine = new HashSet<>();
        Set<Long> others = new HashSet<>();
        for (int k = 0; k < landed.size(); k++) {
            boolean other = landed.get(k).key() == null;
            (other ? others : mine).add(114L + k);
        }
        assertEquals(100, mine.size());
        assertFalse(others.isEmpty());
        assertEquals(mine, covered);
    }

    @Test
    void recordsLostToRetentionFailTheWriteNamingThem() {
        Producing producer = new Producing();
        SlotWriter writer = writer(new Clients(producer), (t, p) -> 30, task("orders", 0, 10, 100, 100_000));
        DataLossException e = assertThrows(DataLossException.class, () -> writer.write(record("orders", 0, 30, 1)));
        assertEquals("source orders[0]: offsets 10..29 of the planned range 10..99 were removed by retention before "
                + "they were mirrored; nothing after them was written. Set a->b.failOnDataLoss = false to skip them",
                e.getMessage());
        assertTrue(sent(producer, "a.orders").isEmpty());
    }

    @Test
    void aRetentionGapIsRecordedWhenDataLossIsAccepted() throws Exception {
        WriteTask task = new WriteTask("a->b", "plan-1", "orders", 0, "a.orders", 10, 100, 0, false, "requested",
                100_000, 10, 0, 0);
        SlotWriter writer = writer(new Clients(new Producing()), (t, p) -> 30, task);
        for (long offset = 30; offset < 100; offset++) {
            writer.write(record("orders", 0, offset, 1));
        }
        RangeResult result = writer.close().get(0);
        assertEquals("[[10,30]]", JSON.readTree(result.toJson()).get("gaps").toString());
        assertEquals(70, result.recordsWritten());
    }

    @Test
    void aCompactionGapAtTheStartIsNotDataLoss() {
        SlotWriter writer = writer(new Clients(new Producing()), (t, p) -> 0, task("orders", 0, 10, 100, 100_000));
        writer.write(record("orders", 0, 30, 1));
        assertTrue(writer.close().get(0).gaps().isEmpty());
    }

    @Test
    void timestampsAtOrBeforeTheEpochAreWrittenAsThePlansTime() {
        Producing producer = new Producing();
        WriteTask task = new WriteTask("a->b", "plan-1", "orders", 0, "a.orders", 0, 3, 0, true, "requested",
                100_000, 0, 1_700_000_000_000L, 0);
        SlotWriter writer = writer(new Clients(producer), (t, p) -> 0, task);
        writer.write(record("orders", 0, 0, 0));
        writer.write(record("orders", 0, 1, -1));
        writer.write(record("orders", 0, 2, 42));
        assertEquals(2, writer.close().get(0).restamped());
        assertEquals(List.of(1_700_000_000_000L, 1_700_000_000_000L, 42L),
                sent(producer, "a.orders").stream().map(ProducerRecord::timestamp).toList());
    }

    @Test
    void aFencedWriterFailsNamingTheTransaction() {
        Producing producer = new Producing();
        SlotWriter writer = writer(new Clients(producer), (t, p) -> 0, task("orders", 0, 0, 100, 100_000));
        writer.write(record("orders", 0, 0, 1));
        producer.fenceProducer();
        WriterFencedException e = assertThrows(WriterFencedException.class,
                () -> writer.write(record("orders", 0, 1, 1)));
        assertTrue(e.getMessage().startsWith("writing orders[0] -> a.orders[0]: the transaction of upstream offsets "
                + "0..1: write slot 0's producer (mirrorflow|a->b|write-0) was fenced on cluster 'b' by a newer one "
                + "of the plan (another attempt of it) or for outliving transaction.timeout.ms; its open transaction "
                + "is aborted and this attempt stops, the newer attempt or the next run finishes the plan "
                + "(KafkaException: MockProducer is fenced."), e.getMessage());
        assertTrue(e.getMessage().contains("ProducerFencedException"), e.getMessage());
        writer.abort();
        writer.release();
    }

    /** A send refused at once for a cause that may pass, twice: written again each time; three times: failed. */
    static final class Flaky extends Producing {
        int failures;

        Flaky(int failures) {
            this.failures = failures;
        }

        @Override
        public synchronized Future<RecordMetadata> send(ProducerRecord<byte[], byte[]> record, Callback callback) {
            if (record.topic().equals("a.orders") && record.value() != null
                    && new String(record.value(), StandardCharsets.UTF_8).endsWith("-5") && failures > 0) {
                failures--;
                TimeoutException e = new TimeoutException("Expiring 1 record(s)");
                callback.onCompletion(null, e);
                return CompletableFuture.failedFuture(e);
            }
            return super.send(record, callback);
        }
    }

    @Test
    void aPassingFailureWritesTheTransactionAgain() {
        Flaky producer = new Flaky(2);
        SlotWriter writer = writer(new Clients(producer), (t, p) -> 0, task("orders", 0, 0, 10, 100_000));
        for (long offset = 0; offset < 10; offset++) {
            writer.write(record("orders", 0, offset, 1));
        }
        assertEquals(10, writer.close().get(0).recordsWritten());
        assertEquals(2, producer.aborts);
        assertEquals(10, sent(producer, "a.orders").size());
    }

    /**
     * Under a schema transfer a transaction written again maps each record's id once: the ids are
     * rewritten in the records' own arrays, and the transaction's records are read again from the
     * source, not taken from the attempt that failed (an id mapped twice is one the table lacks).
     */
    @Test
    void aTransactionWrittenAgainUnderASchemaTransferMapsEachIdOnce() {
        Flaky producer = new Flaky(1);
        WriterConfig transfer = new WriterConfig("b", "127.0.0.1:9092", SPANS, GROUP, 64L << 20,
                SchemaIds.parse("{\"a.orders\": {\"value\": {\"7\": 1001}}}", false));
        SlotWriter writer = new SlotWriter(List.of(task("orders", 0, 0, 10, 100_000)), transfer,
                Map.of("bootstrap.servers", "127.0.0.1:9092"), new Clients(producer), (t, p) -> 0,
                spans -> wire(source(spans)), t -> SourceDigest.NONE);
        writer.open();
        for (long offset = 0; offset < 10; offset++) {
            writer.write(wire(record("orders", 0, offset, 1)));
        }
        assertEquals(10, writer.close().get(0).recordsWritten());
        assertEquals(1, producer.aborts);
        List<ProducerRecord<byte[], byte[]>> sent = sent(producer, "a.orders");
        assertEquals(10, sent.size());
        for (int i = 0; i < 10; i++) {
            assertArrayEquals(wireValue(1001, "orders-0-" + i), sent.get(i).value());
        }
    }

    /** The records with their values in Confluent's wire format, schema id 7. */
    private static Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> wire(
            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> records) {
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> out = new HashMap<>();
        records.forEach((tp, list) -> out.put(tp, list.stream().map(SlotWriterTest::wire).toList()));
        return out;
    }

    /** {@code record} with its value in Confluent's wire format: schema id 7, then its text. */
    private static ConsumerRecord<byte[], byte[]> wire(ConsumerRecord<byte[], byte[]> record) {
        byte[] value = wireValue(7, new String(record.value(), StandardCharsets.UTF_8));
        return new ConsumerRecord<>(record.topic(), record.partition(), record.offset(), record.timestamp(),
                TimestampType.CREATE_TIME, 1, value.length, record.key(), value, new RecordHeaders(),
                Optional.empty());
    }

    private static byte[] wireValue(int id, String text) {
        byte[] body = text.getBytes(StandardCharsets.UTF_8);
        return java.nio.ByteBuffer.allocate(5 + body.length).put((byte) 0).putInt(id).put(body).array();
    }

    /**
     * A transaction written again is digested as its records were committed: the aborted attempt's
     * copies (on the target, skipped by a read_committed reader) are not in the range's digest.
     */
    @Test
    void aTransactionWrittenAgainIsDigestedAsItsCommittedRecordsOnly() {
        Map<String, Long> rewritten = digestOfTenRecords(new Flaky(1), 0);
        assertEquals(10L, rewritten.get("records"));
        // MockProducer numbers on across the abort: the first attempt's five records took offsets 0..4.
        assertEquals(5L, rewritten.get("first"));
        assertEquals(14L, rewritten.get("last"));
        // The same records written once, landing where the rewrite landed them.
        assertEquals(digestOfTenRecords(new Producing(), 5), rewritten);
    }

    /** The digest of offsets 0..9 of orders[0] written by {@code producer}, after {@code before} others' records. */
    private static Map<String, Long> digestOfTenRecords(Producing producer, int before) {
        for (int i = 0; i < before; i++) {
            producer.send(new ProducerRecord<>("a.orders", 0, null, new byte[0]));
        }
        SlotWriter writer = new SlotWriter(List.of(task("orders", 0, 0, 10, 100_000)), CONFIG, Map.of(),
                new Clients(producer), (t, p) -> 0, SlotWriterTest::source, t -> new RangeDigest(t.start(), true));
        writer.open();
        for (long offset = 0; offset < 10; offset++) {
            writer.write(record("orders", 0, offset, 1));
        }
        return writer.close().get(0).sourceDigest();
    }

    @Test
    void aTransactionIsWrittenAgainFromTheSourceAndFailsWhereTheSourceLostARecord() {
        List<String> reads = new ArrayList<>();
        SourceRecords compacted = spans -> {
            spans.forEach((tp, span) -> reads.add(tp + " " + span[0] + ".." + span[1]));
            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> out = source(spans);
            out.replaceAll((tp, records) -> records.stream().filter(r -> r.offset() != 2).toList());
            return out;
        };
        SlotWriter writer = new SlotWriter(List.of(task("orders", 0, 0, 10, 100_000)), CONFIG, Map.of(),
                new Clients(new Flaky(1)), (t, p) -> 0, compacted, t -> SourceDigest.NONE);
        writer.open();
        for (long offset = 0; offset < 5; offset++) {
            writer.write(record("orders", 0, offset, 1));
        }
        WriteException e = assertThrows(WriteException.class, () -> writer.write(record("orders", 0, 5, 1)));
        assertEquals(List.of("orders-0 0..5"), reads);  // the aborted transaction's offsets, read once
        assertEquals("writing orders[0] -> a.orders[0]: upstream offset 2 of an aborted transaction is no longer on "
                + "the source to be written again (retention or compaction since it was read); nothing of the "
                + "transaction was committed, and the task's retry reads the range again from its resume position",
                e.getMessage());
    }

    @Test
    void aFailureThatDoesNotPassFailsAfterThreeAttempts() {
        Flaky producer = new Flaky(3);
        SlotWriter writer = writer(new Clients(producer), (t, p) -> 0, task("orders", 0, 0, 10, 100_000),
                task("clicks", 0, 0, 10, 100_000));
        writer.write(record("clicks", 0, 0, 1));
        for (long offset = 0; offset < 5; offset++) {
            writer.write(record("orders", 0, offset, 1));
        }
        WriteException e = assertThrows(WriteException.class, () -> writer.write(record("orders", 0, 5, 1)));
        assertEquals("writing orders[0] -> a.orders[0]: the transaction of upstream offsets 0..5 (and of 1 more "
                + "ranges of write slot 0) failed: orders[0] -> a.orders[0] offset 5: TimeoutException: Expiring 1 "
                + "record(s)", e.getMessage());
    }

    @Test
    void requiredExactlyOnceFailsWhereTheTargetRefusesTransactions() {
        Producing refusing = new Producing();
        refusing.initTransactionException = new TransactionalIdAuthorizationException("denied");
        WriteTask task = new WriteTask("a->b", "plan-1", "orders", 0, "a.orders", 0, 10, 0, true, "required",
                100_000, 0, 0, 0);
        SlotWriter writer = new SlotWriter(List.of(task), CONFIG, Map.of(), new Clients(refusing), (t, p) -> 0,
                SlotWriterTest::source, t -> SourceDigest.NONE);
        TransactionsRefusedException e = assertThrows(TransactionsRefusedException.class, writer::open);
        assertEquals("flow a->b: exactly.once.support = required, but cluster 'b' refuses the flow's transactions "
                + "(mirrorflow|a->b|write-0, writing orders[0] -> a.orders[0]: TransactionalIdAuthorizationException: "
                + "denied); nothing was written; grant WRITE and DESCRIBE on the TransactionalId prefix 'mirrorflow|' "
                + "(docs/security.md)", e.getMessage());
    }

    @Test
    void requestedExactlyOnceFallsBackToAtLeastOnce() throws Exception {
        Producing refusing = new Producing();
        refusing.initTransactionException = new TransactionalIdAuthorizationException("denied");
        Producing idempotent = new Producing();
        Clients clients = new Clients(refusing, idempotent);
        SlotWriter writer = writer(clients, (t, p) -> 0, task("orders", 0, 0, 4, 2));
        for (long offset = 0; offset < 4; offset++) {
            writer.write(record("orders", 0, offset, 1));
        }
        RangeResult result = writer.close().get(0);
        assertFalse(clients.settings.get(1).containsKey("transactional.id"));
        assertEquals("true", clients.settings.get(1).get("enable.idempotence"));
        JsonNode json = JSON.readTree(result.toJson());
        assertFalse(json.get("transactional").asBoolean());
        assertEquals("cluster 'b' refuses transactions: TransactionalIdAuthorizationException: denied",
                json.get("at_least_once").asText());
        assertEquals(4, result.recordsWritten());
        assertEquals(List.of(Map.of(new TopicPartition("a.orders", 0), new OffsetAndMetadata(2, "plan-1")),
                Map.of(new TopicPartition("a.orders", 0), new OffsetAndMetadata(4, "plan-1"))), clients.adminCommits);
        assertEquals(2, spans(idempotent).size());
    }

    @Test
    void aMissingSpansTopicFailsTheOpenByName() {
        Clients clients = new Clients(new Producing());
        clients.consumer.updatePartitions(SPANS, List.of());
        SlotWriter writer = new SlotWriter(List.of(task("orders", 0, 0, 10, 10)), CONFIG, Map.of(), clients,
                (t, p) -> 0, SlotWriterTest::source, t -> SourceDigest.NONE);
        WriteException e = assertThrows(WriteException.class, writer::open);
        assertEquals("writing orders[0] -> a.orders[0]: cannot write its span records to mirrorflow-spans.a.internal "
                + "on cluster 'b': Unknown topic or partition (the topic does not exist); nothing of the transaction "
                + "was committed", e.getMessage());
        writer.release();
    }

    @Test
    void aSlotTakesOneFlowsOneSlot() {
        WriteTask other = new WriteTask("a->b", "plan-1", "orders", 1, "a.orders", 0, 10, 0, true, "requested", 10, 0,
                0, 4);
        assertThrows(IllegalArgumentException.class, () -> new SlotWriter(List.of(task("orders", 0, 0, 10, 10), other),
                CONFIG, Map.of(), new Clients(), (t, p) -> 0, SlotWriterTest::source,
                t -> SourceDigest.NONE));
    }
}
