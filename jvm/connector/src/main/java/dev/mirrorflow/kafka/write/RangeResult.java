package dev.mirrorflow.kafka.write;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * What one attempt's writer did for one range: the fields of the Python
 * {@code write_task.RangeResult}, with the same names and meanings in {@link #toJson()} (the
 * driver reads it as {@code RangeResult.to_dict()} would give it). The ledger holds what every
 * attempt wrote; this holds this attempt's figures and findings.
 */
public final class RangeResult {

    private static final ObjectMapper JSON = new ObjectMapper();

    final WriteTask task;
    long resumedFrom;
    long recordsWritten;
    long bytesWritten;
    Long firstDownstream;
    Long lastDownstream;
    boolean transactional;
    String atLeastOnce;
    long restamped;
    final List<long[]> gaps = new ArrayList<>();
    Map<String, Double> recordAgeMs;
    Map<String, Double> replicationLatencyMs;
    double writeSeconds;
    final List<String> spans = new ArrayList<>();
    Map<String, Long> sourceDigest;

    RangeResult(WriteTask task) {
        this.task = task;
        this.resumedFrom = task.start();
    }

    /** The fields in {@code RangeResult.to_dict()}'s order. */
    public Map<String, Object> toMap() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topic", task.topic());
        out.put("partition", task.partition());
        out.put("remote_topic", task.remoteTopic());
        out.put("start", task.start());
        out.put("end", task.end());
        out.put("resumed_from", resumedFrom);
        out.put("records_written", recordsWritten);
        out.put("bytes_written", bytesWritten);
        out.put("first_downstream", firstDownstream);
        out.put("last_downstream", lastDownstream);
        out.put("transactional", transactional);
        out.put("at_least_once", atLeastOnce);
        out.put("restamped", restamped);
        List<List<Long>> gapList = new ArrayList<>();
        for (long[] gap : gaps) {
            gapList.add(List.of(gap[0], gap[1]));
        }
        out.put("gaps", gapList);
        out.put("record_age_ms", recordAgeMs);
        out.put("replication_latency_ms", replicationLatencyMs);
        out.put("write_seconds", writeSeconds);
        out.put("spans", spans);
        out.put("source_digest", sourceDigest);
        out.put("schema_ids", List.of());
        return out;
    }

    /** {@link #toMap()} as JSON. */
    public String toJson() {
        try {
            return JSON.writeValueAsString(toMap());
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("a range result is plain data", e);
        }
    }

    /** Records written by this attempt. */
    public long recordsWritten() {
        return recordsWritten;
    }

    /** The span records this attempt committed (their JSON). */
    public List<String> spans() {
        return List.copyOf(spans);
    }

    /** The proof's aggregates, or null. */
    public Map<String, Long> sourceDigest() {
        return sourceDigest;
    }

    /** The gaps retention left, {@code [from, to)} each. */
    public List<long[]> gaps() {
        return List.copyOf(gaps);
    }

    /** Where this attempt resumed. */
    public long resumedFrom() {
        return resumedFrom;
    }

    /** How many timestamps were restamped. */
    public long restamped() {
        return restamped;
    }

    /** Why the range was written without transactions, or null. */
    public String atLeastOnce() {
        return atLeastOnce;
    }

    /** The range. */
    public WriteTask task() {
        return task;
    }
}
