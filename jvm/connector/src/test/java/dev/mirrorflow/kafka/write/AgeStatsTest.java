package dev.mirrorflow.kafka.write;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.Map;

import org.junit.jupiter.api.Test;

class AgeStatsTest {

    @Test
    void nothingMeasuredIsNull() {
        assertNull(new AgeStats().summary());
        AgeStats stats = new AgeStats();
        stats.add(5, new AgeStats.Timestamps());
        assertNull(stats.summary());
    }

    /** As Python's {@code AgeStats.add(2000, TimestampStats(3, 1000, 1003, 3004))}: min 997, max 1000, avg 998.7. */
    @Test
    void foldsTimestampsMeasuredAtOneMoment() {
        AgeStats.Timestamps stamps = new AgeStats.Timestamps();
        stamps.add(1000);
        stamps.add(1001);
        stamps.add(1003);
        AgeStats stats = new AgeStats();
        stats.add(2000, stamps);
        assertEquals(Map.of("min", 997.0, "max", 1000.0, "avg", 998.7), stats.summary());
    }

    @Test
    void perRecordAges() {
        AgeStats stats = new AgeStats();
        stats.add(100, 90);
        stats.add(200, 150);
        stats.add(300, 299);
        assertEquals(Map.of("min", 1.0, "max", 50.0, "avg", 20.3), stats.summary());
    }
}
