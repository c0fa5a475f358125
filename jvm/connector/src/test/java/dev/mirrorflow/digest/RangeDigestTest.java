package dev.mirrorflow.digest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.Map;

import org.junit.jupiter.api.Test;

class RangeDigestTest {

    @Test
    void aggregatesAWholeContiguousRange() {
        RangeDigest digest = new RangeDigest(10, true);
        long xor = 0;
        long xorNoTs = 0;
        for (long up = 10; up < 13; up++) {
            long noTs = 1000 + up;
            long micros = up * 1_000_000;
            digest.add(up, up + 90, noTs, micros);
            xor ^= RecordDigest.placement(RecordDigest.withTimestamp(noTs, micros), up + 90);
            xorNoTs ^= RecordDigest.placement(noTs, up + 90);
        }
        assertNull(digest.summary(14));  // not written to the end
        assertEquals(Map.of("records", 3L, "xor", xor, "xor_no_ts", xorNoTs, "first", 100L, "last", 102L),
                digest.summary(13));
    }

    @Test
    void aGapOrAResumeMakesItUnusable() {
        RangeDigest gap = new RangeDigest(0, true);
        gap.add(0, 0, 1, 1);
        gap.add(2, 1, 1, 1);
        assertFalse(gap.usable());
        assertNull(gap.summary(3));
        RangeDigest resumed = new RangeDigest(0, true);
        resumed.add(5, 0, 1, 1);
        assertNull(resumed.summary(6));
        assertNull(new RangeDigest(0, true).summary(0));  // nothing written
    }
}
