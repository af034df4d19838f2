package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.InputStream;
import java.util.HexFormat;
import org.junit.jupiter.api.Test;

/** The shared stamp test vectors (audit_record/stamp_vectors.json, copied by the build), as Python checks them. */
class AuditStampTest {
    private static JsonNode vectors() throws Exception {
        try (InputStream in = AuditStampTest.class.getResourceAsStream("/kafka-audit/stamp_vectors.json")) {
            return new ObjectMapper().readTree(in);
        }
    }

    @Test
    void validVectorsEncodeAndDecode() throws Exception {
        JsonNode v = vectors();
        int n = 0;
        for (JsonNode e : v.get("valid")) {
            String pid = e.get("producer_id").asText();
            long seq = e.get("sequence").asLong();
            byte[] value = HexFormat.of().parseHex(e.get("value_hex").asText());
            String key = e.get("key").asText();
            assertEquals(key, AuditStamp.headerKey(pid));
            assertArrayEquals(value, AuditStamp.encode(pid, seq), pid + " " + seq);
            AuditStamp.Decoded d = AuditStamp.decode(key, value);
            assertEquals(pid, d.producerId());
            assertEquals(seq, d.sequence());
            assertEquals(e.get("key_plus_value_bytes").asInt(), key.length() + value.length);
            n++;
        }
        assertTrue(n >= 20, "vectors read: " + n);
    }

    @Test
    void malformedVectorsAreRejectedWithTheirReason() throws Exception {
        for (JsonNode e : vectors().get("malformed")) {
            byte[] value = HexFormat.of().parseHex(e.get("value_hex").asText());
            MalformedStampException x = assertThrows(MalformedStampException.class,
                    () -> AuditStamp.decode(e.get("key").asText(), value), e.get("note").asText());
            assertEquals(e.get("reason").asText(), x.reason(), e.get("note").asText());
        }
    }

    @Test
    void notAStampKeyAndNullValue() {
        MalformedStampException x = assertThrows(MalformedStampException.class, () -> AuditStamp.decode("other", new byte[9]));
        assertEquals("not_a_stamp_key", x.reason());
        assertEquals("too_short", assertThrows(MalformedStampException.class, () -> AuditStamp.decode("~a", null)).reason());
    }

    @Test
    void encodeV2MatchesEncodeForRandomIds() throws Exception {
        byte[] id = AuditStamp.newProducerId();
        String text = AuditStamp.idText(id, 0);
        for (long seq : new long[] {1, 127, 128, 1L << 42, Long.MAX_VALUE}) {
            assertArrayEquals(AuditStamp.encode(text, seq), AuditStamp.encodeV2(id, seq));
            assertEquals(seq, AuditStamp.decode(AuditStamp.KEY, AuditStamp.encodeV2(id, seq)).sequence());
        }
    }

    /** The consumer's hot-path decoder agrees with the checked one on the vectors and on random bytes. */
    @Test
    void decodeVarintOrMinusAgreesWithDecodeVarint() throws Exception {
        java.util.List<byte[]> values = new java.util.ArrayList<>();
        for (String part : new String[] {"valid", "malformed"}) {
            for (JsonNode e : vectors().get(part)) {
                values.add(HexFormat.of().parseHex(e.get("value_hex").asText()));
            }
        }
        java.util.Random random = new java.util.Random(38);
        for (int i = 0; i < 20_000; i++) {
            byte[] v = new byte[1 + random.nextInt(12)];
            random.nextBytes(v);
            for (int j = 0; j < v.length - 1 && random.nextBoolean(); j++) {
                v[j] |= (byte) 0x80; // continuation bits, so that long varints occur
            }
            values.add(v);
        }
        for (byte[] v : values) {
            java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(v);
            for (int offset = 0; offset < v.length; offset++) {
                int length = v.length - offset;
                long fast = AuditStamp.decodeVarintOrMinus(b, offset, length);
                long checked;
                try {
                    checked = AuditStamp.decodeVarint(b, offset, length);
                } catch (MalformedStampException x) {
                    checked = -1;
                }
                assertEquals(checked, fast < 0 ? -1 : fast, HexFormat.of().formatHex(v) + " at " + offset);
            }
        }
    }
}
