package dev.mirrorflow.spark;

import java.util.Locale;
import java.util.Map;

import dev.mirrorflow.kafka.read.RangeReadException;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * What the formats' option parsers share: each fault an {@link IllegalArgumentException} with a
 * one-line message naming the option (a Spark read shows it as it is).
 */
final class OptionValues {

    private static final ObjectMapper JSON = new ObjectMapper();

    private OptionValues() {
    }

    /** Option {@code name}'s JSON; {@code required} says what it must hold when it is missing. */
    static JsonNode json(String name, String text, String required) {
        if (text == null || text.isBlank()) {
            throw new IllegalArgumentException("option '" + name + "' is required: " + required);
        }
        try {
            return JSON.readTree(text);
        } catch (JsonProcessingException e) {
            String problem = RangeReadException.oneLine(e.getOriginalMessage());
            int detail = problem.indexOf(" (start marker at");
            throw new IllegalArgumentException("option '" + name + "' is not valid JSON at line "
                    + e.getLocation().getLineNr() + ", column " + e.getLocation().getColumnNr() + ": "
                    + (detail > 0 ? problem.substring(0, detail) : problem));
        }
    }

    /** Option {@code name} (names are case-insensitive), a whole number above 0, else {@code otherwise}. */
    static long positive(Map<String, String> lower, String name, long otherwise, String what) {
        String text = lower.get(name.toLowerCase(Locale.ROOT));
        if (text == null) {
            return otherwise;
        }
        try {
            long value = Long.parseLong(text.strip());
            if (value > 0) {
                return value;
            }
        } catch (NumberFormatException e) {
            // told below
        }
        throw new IllegalArgumentException("option '" + name + "' must be " + what + " > 0, got '"
                + RangeReadException.oneLine(text) + "'");
    }

    /** Option {@code name} (names are case-insensitive), {@code true} or {@code false}; {@code otherwise} when not given. */
    static boolean flag(Map<String, String> lower, String name, boolean otherwise) {
        String value = lower.get(name.toLowerCase(Locale.ROOT));
        if (value == null) {
            return otherwise;
        }
        return switch (value.strip().toLowerCase(Locale.ROOT)) {
            case "true" -> true;
            case "false" -> false;
            default -> throw new IllegalArgumentException("option '" + name + "' must be true or false, got '"
                    + RangeReadException.oneLine(value) + "'");
        };
    }

    /** A JSON value as a message quotes it: at most 120 characters. */
    static String excerpt(JsonNode node) {
        String text = node == null ? "nothing" : node.toString();
        return text.length() <= 120 ? text : text.substring(0, 117) + "...";
    }
}
