package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericRecord;
import org.junit.jupiter.api.Test;

/** Avro single-object encoding as audit_record/codec.py writes it: C3 01 + CRC-64-AVRO fingerprint (codec.py's order) + body. */
class AuditRecordSchemaTest {
    @Test
    void singleObjectHeaderIsMagicAndFingerprintAsCodecPyWritesIt() throws Exception {
        AuditRecordSchema s = AuditRecordSchema.get();
        GenericRecord r = s.builder()
                .set("record_id", "r1").set("tier", "producer").set("source", "app").set("host", "h")
                .set("producer_id", "~0123456789abcdef").set("topic", "t").set("window_start_ms", 60_000L)
                .set("window_end_ms", 120_000L).set("emitted_at_ms", 1L).set("sent", 3L).build();
        byte[] out = s.encode(r);
        assertEquals((byte) 0xC3, out[0]);
        assertEquals((byte) 0x01, out[1]);
        long fp = SchemaNormalization.parsingFingerprint64(s.schema());
        assertEquals(fp, ByteBuffer.wrap(out, 2, 8).order(AuditRecordSchema.WRITTEN_FINGERPRINT_ORDER).getLong());
        GenericRecord back = s.decode(out);
        assertEquals(3L, back.get("sent"));
        assertEquals("~0123456789abcdef", back.get("producer_id").toString());
        assertNotNull(s.type("PartitionDelivery"));
    }

    @Test
    void namedTypesAreFoundAtAnyDepth() {
        AuditRecordSchema s = AuditRecordSchema.get();
        for (String name : new String[] {"PartitionDelivery", "ReadOffset", "NetworkStats", "ProducerIdentity",
                "ProducerConfig"}) {
            org.apache.avro.Schema t = s.type(name);
            assertNotNull(t, name);
            assertEquals("io.kafkaaudit." + name, t.getFullName());
        }
        org.junit.jupiter.api.Assertions.assertNull(s.type("NoSuchType"));
    }

    @Test
    void latencyBucketsMatchPython() {
        // audit_consumer/latency.py gives the same buckets, lower bounds and percentiles
        assertEquals(0, LatencyHistogram.bucketOf(0));
        assertEquals(4, LatencyHistogram.bucketOf(1));
        assertEquals(8, LatencyHistogram.bucketOf(2));
        assertEquals(10, LatencyHistogram.bucketOf(3));
        assertEquals(13, LatencyHistogram.bucketOf(5));
        assertEquals(5.0, LatencyHistogram.lowerBound(LatencyHistogram.bucketOf(5)));
        LatencyHistogram h = new LatencyHistogram();
        for (long x = 1; x <= 100; x++) {
            h.add(x);
        }
        assertEquals(48.0, h.percentile(0.5));
        assertEquals(96.0, h.percentile(0.99));
        assertEquals(100.0, h.max());
    }
}
