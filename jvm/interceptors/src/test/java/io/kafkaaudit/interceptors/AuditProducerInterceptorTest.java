package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.header.Header;
import org.junit.jupiter.api.Test;

/** Never in the application's way: the interceptor as a client drives it, with an unreachable audit topic. */
class AuditProducerInterceptorTest {
    static Map<String, Object> config() {
        return Map.of("bootstrap.servers", "127.0.0.1:1", "client.id", "unit",
                "key.serializer", "org.apache.kafka.common.serialization.StringSerializer",
                "value.serializer", "org.apache.kafka.common.serialization.StringSerializer",
                "kafka.audit.producer.max.block.ms", "200", "kafka.audit.producer.delivery.timeout.ms", "1000",
                "kafka.audit.producer.request.timeout.ms", "500");
    }

    @Test
    void stampsFirstKeepsHeadersAndSetsTheCreateTime() {
        AuditProducerInterceptor<String, String> i = new AuditProducerInterceptor<>();
        i.configure(config());
        assertEquals(0, i.metrics().getInternalErrors(), "warm-up (a snapshot encoded, the audit producer created)");
        try {
            ProducerRecord<String, String> r = new ProducerRecord<>("t", "k", "v");
            r.headers().add("app", new byte[] {1});
            long before = System.currentTimeMillis();
            ProducerRecord<String, String> out = i.onSend(r);
            Header[] h = out.headers().toArray();
            assertEquals(AuditStamp.KEY, h[0].key());
            assertEquals("app", h[1].key());
            assertEquals(1, r.headers().toArray().length, "the application's record is not modified");
            assertTrue(out.timestamp() >= before);
            assertEquals(i.producerId(), AuditStamp.idText(h[0].value(), 0));
            assertEquals("k", out.key());
        } finally {
            i.close();
        }
    }

    @Test
    void nothingThrowsAndCloseIsBoundedWithAnUnreachableAuditTopic() {
        AuditProducerInterceptor<String, String> i = new AuditProducerInterceptor<>();
        i.configure(config());
        i.onSend(new ProducerRecord<>("t", "v"));
        i.onAcknowledgement(null, null, null);
        i.onAcknowledgement(null, new RuntimeException("x"));
        assertSame(null, i.onSend(null));
        long start = System.nanoTime();
        i.close();
        assertTrue((System.nanoTime() - start) / 1_000_000 < AuditProducerInterceptor.CLOSE_TIMEOUT_MS + 10_000);
        assertTrue(i.metrics().getSnapshotFailures() >= 1, "the final snapshot could not be sent: counted");
    }

    @Test
    void badSettingsNameTheKeyAndAllowedValues() {
        ConfigException e = org.junit.jupiter.api.Assertions.assertThrows(ConfigException.class,
                () -> AuditSettings.from(Map.of("kafka.audit.window.ms", "soon"), 1, 1));
        assertTrue(e.getMessage().contains("kafka.audit.window.ms") && e.getMessage().contains("allowed values"), e.getMessage());
    }
}
