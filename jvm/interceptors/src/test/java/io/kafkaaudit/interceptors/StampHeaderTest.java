package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.List;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.junit.jupiter.api.Test;

/** Reading a stamp header in place gives what the public Header API gives, and moves nothing. */
class StampHeaderTest {
    /** A header as the consumer parses it: key and value are slices of one larger fetch buffer. */
    static RecordHeader fetched(String key, byte[] value) {
        byte[] k = key.getBytes(StandardCharsets.UTF_8);
        ByteBuffer fetch = ByteBuffer.allocate(7 + k.length + (value == null ? 0 : value.length) + 5);
        fetch.position(7);
        ByteBuffer keySlice = fetch.slice(7, k.length);
        fetch.put(k);
        ByteBuffer valueSlice = null;
        if (value != null) {
            valueSlice = fetch.slice(7 + k.length, value.length);
            fetch.put(value);
        }
        return new RecordHeader(keySlice, valueSlice);
    }

    /** A Header that is not Kafka's RecordHeader. */
    record Plain(String key, byte[] value) implements Header {}

    @Test
    void theClientInUseIsReadInPlace() {
        assertTrue(StampHeader.inPlace(), "kafka-clients' RecordHeader no longer has keyBuffer/valueBuffer: the "
                + "consumer interceptor falls back to Header.key()/value() (slower); update StampHeader");
    }

    @Test
    void everyVectorReadsTheSameInPlaceMaterializedAndThroughAnotherHeader() throws Exception {
        JsonNode vectors;
        try (InputStream in = getClass().getResourceAsStream("/kafka-audit/stamp_vectors.json")) {
            vectors = new ObjectMapper().readTree(in);
        }
        int n = 0;
        for (String group : List.of("valid", "malformed")) {
            for (JsonNode e : vectors.get(group)) {
                String key = e.get("key").asText();
                byte[] value = HexFormat.of().parseHex(e.get("value_hex").asText());
                int kind = key.equals(AuditStamp.KEY) ? StampHeader.V2 : key.equals(AuditStamp.KEY_V1) ? StampHeader.V1
                        : StampHeader.NONE;
                RecordHeader lazy = fetched(key, value);
                for (Header h : List.of(lazy, new RecordHeader(key, value), new Plain(key, value))) {
                    assertEquals(kind, StampHeader.kind(h), key);
                    ByteBuffer v = StampHeader.value(h);
                    int before = v.position();
                    assertArrayEquals(value, StampHeader.copy(v));
                    assertEquals(before, v.position(), "the slice's position moved");
                }
                // the application still reads the header it was given
                assertEquals(key, lazy.key());
                assertArrayEquals(value, lazy.value());
                n++;
            }
        }
        assertTrue(n >= 30, "vectors read: " + n);
    }

    @Test
    void otherKeysAndNullValues() {
        for (Header h : List.of(fetched("~b", new byte[9]), fetched("~", null), new RecordHeader("kafka-audit.stamq", null),
                new Plain("x", null))) {
            assertEquals(StampHeader.NONE, StampHeader.kind(h), h.toString());
        }
        assertNull(StampHeader.value(fetched("~a", null)));
        assertNull(StampHeader.copy(null));
    }

    @Test
    void varintAndIdAreReadAtAbsoluteIndexes() throws Exception {
        byte[] id = {1, 2, 3, 4, 5, 6, 7, (byte) 0xf8};
        RecordHeader h = fetched(AuditStamp.KEY, AuditStamp.encodeV2(id, 300));
        ByteBuffer v = StampHeader.value(h);
        assertEquals(300, AuditStamp.decodeVarint(v, v.position() + AuditStamp.ID_BYTES, 2));
        assertEquals(AuditStamp.idText(id, 0), AuditStamp.idText(AuditStamp.idBits(v, v.position())));
    }

    /**
     * The consumer's hot path reads every valid v2 vector in place as the general path does, and leaves to the
     * general path whatever it does not read (v1, malformed, the stamp not first, materialized, other Headers).
     */
    @Test
    void readFirstV2AgreesWithTheGeneralPathOrLeavesTheRecordToIt() throws Exception {
        JsonNode vectors;
        try (InputStream in = getClass().getResourceAsStream("/kafka-audit/stamp_vectors.json")) {
            vectors = new ObjectMapper().readTree(in);
        }
        long[] out = new long[2];
        int read = 0;
        for (String group : List.of("valid", "malformed")) {
            for (JsonNode e : vectors.get(group)) {
                String key = e.get("key").asText();
                byte[] value = HexFormat.of().parseHex(e.get("value_hex").asText());
                RecordHeader trace = fetched("trace", new byte[] {1});
                boolean fast = StampHeader.readFirstV2(new RecordHeaders(new Header[] {fetched(key, value), trace}), out);
                boolean validV2 = group.equals("valid") && key.equals(AuditStamp.KEY);
                assertEquals(validV2, fast, group + " " + key + " " + e.get("value_hex").asText());
                if (fast) {
                    AuditStamp.Decoded d = AuditStamp.decode(key, value);
                    assertEquals(d.producerId(), AuditStamp.idText(out[0]));
                    assertEquals(d.sequence(), out[1]);
                    read++;
                }
                // not the first header, materialized, or another Header implementation: the general path's
                assertFalse(StampHeader.readFirstV2(new RecordHeaders(new Header[] {trace, fetched(key, value)}), out));
                RecordHeader materialized = fetched(key, value);
                materialized.key();
                materialized.value();
                assertFalse(StampHeader.readFirstV2(new RecordHeaders(new Header[] {materialized}), out));
                assertFalse(StampHeader.readFirstV2(new RecordHeaders(new Header[] {new Plain(key, value)}), out));
            }
        }
        assertTrue(read >= 10, "valid v2 vectors read: " + read);
        assertFalse(StampHeader.readFirstV2(new RecordHeaders(), out));
    }
}
