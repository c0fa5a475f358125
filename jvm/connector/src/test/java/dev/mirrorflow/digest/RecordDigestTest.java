package dev.mirrorflow.digest;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

/**
 * The JVM's record digests against constants computed once with PySpark 4.2.0 on a local[1]
 * session from the project's venv: {@code record_digest(F, F.lit(False))},
 * {@code record_digest(F, F.lit(True))} (timestamp 2023-11-14T22:13:20.123Z), with
 * {@code headers=False}, and {@code F.xxhash64(<digest with timestamp>, F.lit(17))}, and
 * {@code F.to_json("headers")}, over a DataFrame of the Kafka source's column types
 * ({@code key binary, value binary, headers array<struct<key string, value binary>>,
 * timestamp timestamp}), each row's {@code name} first:
 *
 * <pre>
 * out = df.select("name", F.to_json("headers"), record_digest(F, F.lit(False)),
 *                 record_digest(F, F.lit(True)), record_digest(F, F.lit(False), headers=False),
 *                 F.xxhash64(record_digest(F, F.lit(True)), F.lit(17).cast("long")))
 * </pre>
 */
class RecordDigestTest {

    private static final long MICROS = 1_700_000_000_123_000L;

    /** One pinned record: its columns and Spark's figures. */
    private record Pin(String name, byte[] key, byte[] value, Header[] headers, String json, long noTs, long withTs,
                       long noHeaders, long placed17) {
    }

    private static byte[] b(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    private static Header h(String key, byte[] value) {
        return new RecordHeader(key, value);
    }

    private static final Pin[] PINS = {
        new Pin("plain", b("k"), b("v"), null, null,
                516896085587383871L, -6882993234567985471L, 516896085587383871L, -1185757661042010546L),
        new Pin("null key", null, b("v"), null, null,
                -4022428422987110281L, 8647226218905978968L, -4022428422987110281L, -5182533540155248316L),
        new Pin("null value", b("k"), null, null, null,
                1534764270458605380L, 7054763402102923799L, 1534764270458605380L, 2903330147140734205L),
        new Pin("empty value", b("k"), new byte[0], null, null,
                3564700027579632837L, -6005564586458502553L, 3564700027579632837L, -2144134129874171165L),
        new Pin("null header value", b("k"), b("v"), new Header[] {h("a", b("1")), h("n", null)},
                "[{\"key\":\"a\",\"value\":\"MQ==\"},{\"key\":\"n\"}]",
                1164947734360790471L, 5042279927867908552L, 516896085587383871L, -7793057922241158498L),
        new Pin("unicode header key", b("k"), b("v"),
                new Header[] {h("\u043a\u043b\u044e\u0447-\u00e9-\ud83d\ude00", new byte[] {0, (byte) 255, 1})},
                "[{\"key\":\"\u043a\u043b\u044e\u0447-\u00e9-\ud83d\ude00\",\"value\":\"AP8B\"}]",
                8814514306816606239L, -1867691331865810206L, 516896085587383871L, -6332406145818507514L),
        new Pin("empty headers", b("k"), b("v"), new Header[0], "[]",
                5744869231637079258L, -7642925096982252585L, 516896085587383871L, 4106524455278620423L),
        new Pin("escaped header key", null, b("x".repeat(100)),
                new Header[] {h("q\"\n\t\u0001/\\", new byte[0]), h("z", new byte[] {(byte) 0xfb, (byte) 0xff, (byte) 0xfe})},
                "[{\"key\":\"q\\\"\\n\\t\\u0001/\\\\\",\"value\":\"\"},{\"key\":\"z\",\"value\":\"+//+\"}]",
                7944993502073886684L, 4427319321918412060L, 4826720957539194553L, 2690776808837686307L),
        new Pin("all null", null, null, null, null,
                -8665836826751506900L, -8665836826751506900L, -8665836826751506900L, 6612239862351003075L),
    };

    @Test
    void digestsAreSparkSqls() {
        for (Pin pin : PINS) {
            long noTs = RecordDigest.withoutTimestamp(pin.key(), pin.value(), pin.headers(), true);
            assertEquals(pin.noTs(), noTs, pin.name());
            if (pin.headers() != null) {
                assertEquals(pin.json(), HeadersJson.json(pin.headers()), pin.name());
            }
            assertEquals(pin.noHeaders(), RecordDigest.withoutTimestamp(pin.key(), pin.value(), pin.headers(), false),
                    pin.name());
            if (!pin.name().equals("all null")) {  // its timestamp is null: Spark's hash skips it
                assertEquals(pin.withTs(), RecordDigest.withTimestamp(noTs, MICROS), pin.name());
                assertEquals(pin.placed17(), RecordDigest.placement(pin.withTs(), 17), pin.name());
            } else {
                assertEquals(pin.withTs(), noTs, pin.name());
                assertEquals(pin.placed17(), RecordDigest.placement(noTs, 17), pin.name());
            }
        }
    }

    /** The writer's entry point: a record without headers has a null headers column, as Spark's Kafka source gives it. */
    @Test
    void aRecordsDigestAsTheWriterAddsIt() {
        Pin plain = PINS[0];
        Pin withHeaders = PINS[4];
        RangeDigest digest = new RangeDigest(0, true);
        long micros = 1_700_000_000_123_000L;
        digest.add(0, 17, digest.hash(new ConsumerRecord<>("t", 0, 0, 1_700_000_000_123L, TimestampType.CREATE_TIME, 1,
                1, plain.key(), plain.value(), new RecordHeaders(), Optional.empty())), micros);
        digest.add(1, 18, digest.hash(new ConsumerRecord<>("t", 0, 1, 1_700_000_000_123L, TimestampType.CREATE_TIME, 1,
                1, withHeaders.key(), withHeaders.value(), new RecordHeaders(withHeaders.headers()), Optional.empty())),
                micros);
        long xor = plain.placed17() ^ RecordDigest.placement(withHeaders.withTs(), 18);
        long xorNoTs = RecordDigest.placement(plain.noTs(), 17) ^ RecordDigest.placement(withHeaders.noTs(), 18);
        assertEquals(xor, digest.summary(2).get("xor"));
        assertEquals(xorNoTs, digest.summary(2).get("xor_no_ts"));
    }
}
