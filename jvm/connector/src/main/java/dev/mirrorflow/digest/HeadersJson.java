package dev.mirrorflow.digest;

import java.io.IOException;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import org.apache.kafka.common.header.Header;

/**
 * A record's headers as Spark SQL's {@code to_json(headers)} writes them (the column of Spark's
 * Kafka source schema, {@code array<struct<key: string, value: binary>>}): what the proof's
 * record digest hashes.
 *
 * <p>Spark's {@code StructsToJson} drives a Jackson generator ({@code JacksonGenerator}) with a
 * default {@code JsonFactory}: compact output, Jackson's string escaping (the short escapes,
 * other control characters as {@code \}{@code u00XX}, non-ASCII as is), each struct's fields in
 * schema order, a null field left out ({@code spark.sql.jsonGenerator.ignoreNullFields}, true by
 * default), a binary value in Jackson's default Base64 variant (MIME without line feeds, padded).
 * The same generator is driven here the same way; the JUnit test pins the result against
 * digests computed by PySpark.
 */
public final class HeadersJson {

    private static final JsonFactory FACTORY = new JsonFactory();

    private HeadersJson() {
    }

    /** The JSON text of a (non-null) header array, as {@code to_json} gives it; {@code []} for an empty one. */
    public static String json(Header[] headers) {
        StringWriter out = new StringWriter(32 * (headers.length + 1));
        try (JsonGenerator gen = FACTORY.createGenerator(out)) {
            gen.writeStartArray();
            for (Header header : headers) {
                gen.writeStartObject();
                if (header.key() != null) {
                    gen.writeStringField("key", header.key());
                }
                if (header.value() != null) {
                    gen.writeFieldName("value");
                    gen.writeBinary(header.value());
                }
                gen.writeEndObject();
            }
            gen.writeEndArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);  // a StringWriter does not fail
        }
        return out.toString();
    }

    /** {@link #json} in UTF-8, as Spark's string value of it holds it. */
    public static byte[] utf8(Header[] headers) {
        return json(headers).getBytes(StandardCharsets.UTF_8);
    }
}
