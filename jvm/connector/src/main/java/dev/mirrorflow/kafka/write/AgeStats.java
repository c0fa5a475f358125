package dev.mirrorflow.kafka.write;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Record ages in milliseconds: min, max and average of (a moment - the record's timestamp), as
 * the first, Python writer reported them ({@code {"min", "max", "avg"}}, each
 * rounded to 0.1 ms, or nothing when no record was measured). The writer measures each record
 * when it gets it ({@code record_age_ms}) and when its transaction commits
 * ({@code replication_latency_ms}, from {@link Timestamps} of the transaction's records).
 */
public final class AgeStats {

    private long count;
    private double min = Double.NaN;
    private double max = Double.NaN;
    private double total;

    /** One record of timestamp {@code timestampMs}, measured at {@code atMs}. */
    public void add(double atMs, long timestampMs) {
        double age = atMs - timestampMs;
        min = count == 0 ? age : Math.min(min, age);
        max = count == 0 ? age : Math.max(max, age);
        total += age;
        count++;
    }

    /** Every record of {@code stamps}, measured at {@code atMs}. */
    public void add(double atMs, Timestamps stamps) {
        if (stamps.count == 0) {
            return;
        }
        double young = atMs - stamps.max;
        double old = atMs - stamps.min;
        min = count == 0 ? young : Math.min(min, young);
        max = count == 0 ? old : Math.max(max, old);
        total += stamps.count * atMs - stamps.total;
        count += stamps.count;
    }

    /** {@code {"min": .., "max": .., "avg": ..}} or null when nothing was measured. */
    public Map<String, Double> summary() {
        if (count == 0) {
            return null;
        }
        Map<String, Double> out = new LinkedHashMap<>();
        out.put("min", round1(min));
        out.put("max", round1(max));
        out.put("avg", round1(total / count));
        return out;
    }

    private static double round1(double value) {
        return Math.round(value * 10) / 10.0;
    }

    /** Timestamps (ms) of records not yet measured: count, min, max, sum. */
    public static final class Timestamps {

        long count;
        long min = Long.MAX_VALUE;
        long max = Long.MIN_VALUE;
        double total;

        /** One more timestamp. */
        public void add(long timestampMs) {
            count++;
            min = Math.min(min, timestampMs);
            max = Math.max(max, timestampMs);
            total += timestampMs;
        }
    }
}
