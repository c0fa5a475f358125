package dev.mirrorflow.kafka.write;

import java.nio.ByteBuffer;
import java.util.Set;
import java.util.TreeSet;

/**
 * What the records of one source partition carry in one part (key or value) for the schema
 * registry transfer, read before the write: the schema ids of those in Confluent's wire format
 * (byte 0 is 0, bytes 1-4 the id, as an unsigned number), and the first record that is not in
 * it, with its length and first byte. The driver maps each id once before the writers start
 * (Python {@code schema.ids_in_ranges.find_ids}, which reads these as rows) and refuses the
 * plan naming that first record. A null part (no key, a tombstone) is neither.
 */
public final class WireIds {

    private final Set<Long> ids = new TreeSet<>();
    private long lastId = -1;
    private long refusedOffset = -1;
    private int refusedLength;
    private Integer refusedFirst;

    /** Adds the part {@code data} of the record at {@code offset} (records in offset order). */
    public void add(long offset, byte[] data) {
        if (data == null) {
            return;
        }
        if (SchemaIds.isWire(data)) {
            long id = Integer.toUnsignedLong(ByteBuffer.wrap(data, 1, 4).getInt());
            if (id != lastId) {
                ids.add(id);
                lastId = id;
            }
        } else if (refusedOffset < 0) {
            refusedOffset = offset;
            refusedLength = data.length;
            refusedFirst = data.length == 0 ? null : data[0] & 0xff;
        }
    }

    /** The ids found, in ascending order. */
    public long[] ids() {
        return ids.stream().mapToLong(Long::longValue).toArray();
    }

    /** The offset of the first record not in the wire format, or null. */
    public Long refusedOffset() {
        return refusedOffset < 0 ? null : refusedOffset;
    }

    /** That record's length in bytes, or null. */
    public Integer refusedLength() {
        return refusedOffset < 0 ? null : refusedLength;
    }

    /** That record's first byte (0 to 255), or null (none, or no such record). */
    public Integer refusedFirst() {
        return refusedFirst;
    }
}
