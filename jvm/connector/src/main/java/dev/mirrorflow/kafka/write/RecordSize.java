package dev.mirrorflow.kafka.write;

import java.nio.charset.StandardCharsets;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * A record's size as the target broker measures it against a topic's {@code max.message.bytes}
 * (the tests' {@code helpers.record_size.batch_size}).
 *
 * <p>The broker refuses a record <em>batch</em> larger than the topic's limit, not a record. A
 * record alone in its batch takes the batch's fixed 61 bytes ({@code
 * DefaultRecordBatch.RECORD_BATCH_OVERHEAD}) and its own encoding ({@code DefaultRecord.writeTo}:
 * zigzag varints for the lengths, 0 for the offset and timestamp deltas of a batch's first
 * record). The writer keeps batches of several records below the smallest limit of its slot's
 * topics ({@link ProducerSettings}), so a record fits exactly when this size is at most its own
 * topic's limit; compression only makes a batch smaller.
 */
public final class RecordSize {

    /** {@code DefaultRecordBatch.RECORD_BATCH_OVERHEAD}. */
    public static final int BATCH_OVERHEAD = 61;
    /** Attributes, timestamp delta, offset delta: one byte each for a batch's first record. */
    private static final int RECORD_FIXED = 3;

    private RecordSize() {
    }

    /** Bytes of Kafka's zigzag varint of a 32-bit {@code value} ({@code ByteUtils.sizeOfVarint}). */
    public static int varintSize(int value) {
        int zigzag = (value << 1) ^ (value >> 31);
        int size = 1;
        while ((zigzag & 0xffffff80) != 0) {
            zigzag >>>= 7;
            size++;
        }
        return size;
    }

    private static int bytesSize(byte[] data) {
        return data == null ? varintSize(-1) : varintSize(data.length) + data.length;
    }

    /** The size of a record batch holding only this record, uncompressed ({@code headers} may be null). */
    public static int batchSize(byte[] key, byte[] value, Header[] headers) {
        int count = headers == null ? 0 : headers.length;
        int body = RECORD_FIXED + bytesSize(key) + bytesSize(value) + varintSize(count);
        for (int i = 0; i < count; i++) {
            body += bytesSize(headers[i].key().getBytes(StandardCharsets.UTF_8)) + bytesSize(headers[i].value());
        }
        return BATCH_OVERHEAD + varintSize(body) + body;
    }

    /**
     * Fails, before it is sent, on a record that its remote topic would refuse, naming its offset,
     * its size and the limit (as the first, Python writer did). A cheap bound spares the
     * exact size of every record well within the limit.
     *
     * @param cluster how messages name the target: {@code 'b'}
     */
    static void check(WriteTask task, ConsumerRecord<byte[], byte[]> record, String cluster) {
        long limit = task.maxMessageBytes();
        if (limit <= 0) {
            return;
        }
        long bound = BATCH_OVERHEAD + 5 * 4 + RECORD_FIXED + (record.key() == null ? 0 : record.key().length)
                + (record.value() == null ? 0 : record.value().length);
        Header[] headers = record.headers().toArray();
        for (Header header : headers) {
            bound += 10 + 3L * header.key().length() + (header.value() == null ? 0 : header.value().length);
        }
        if (bound <= limit) {
            return;
        }
        int size = batchSize(record.key(), record.value(), headers);
        if (size > limit) {
            throw new RecordTooLargeException("cannot write " + task.source() + " offset " + record.offset() + " to "
                    + task.remoteTopic() + ": the record is " + size + " bytes as a record batch, larger than "
                    + task.remoteTopic() + "'s max.message.bytes = " + limit + " on cluster " + cluster
                    + "; raise it there (config sync copies the source topic's), then rerun");
        }
    }
}
