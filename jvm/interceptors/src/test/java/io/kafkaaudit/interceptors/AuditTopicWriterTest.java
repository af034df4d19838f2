package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.junit.jupiter.api.Test;

/** The audit producer's configuration: the host's connection, the state's size limit, overrides, then the fixed part. */
class AuditTopicWriterTest {
    @Test
    void aStateOfSixteenMebibytesFitsARequestAndTheHostsOwnSettingsStayTheHosts() {
        Map<String, Object> c = AuditTopicWriter.producerConfig(
                Map.of("bootstrap.servers", "b:9092", "security.protocol", "SSL", "max.request.size", 1_000,
                        "compression.type", "zstd"),
                Map.of(), "app.kafka-audit");
        assertEquals(16 * 1024 * 1024 + 64 * 1024, c.get(ProducerConfig.MAX_REQUEST_SIZE_CONFIG));
        assertEquals("b:9092", c.get("bootstrap.servers"));
        assertEquals("SSL", c.get("security.protocol"));
        assertFalse(c.containsKey("compression.type")); // the application's producer settings are not the audit's
    }

    @Test
    void kafkaAuditProducerOverridesWinButNotTheDeliveryGuarantees() {
        Map<String, Object> c = AuditTopicWriter.producerConfig(Map.of("bootstrap.servers", "b:9092"),
                Map.of("max.request.size", 4_000_000, "acks", "1", "interceptor.classes", "x.Y"), "app.kafka-audit");
        assertEquals(4_000_000, c.get(ProducerConfig.MAX_REQUEST_SIZE_CONFIG));
        assertEquals("all", c.get("acks"));
        assertEquals(Boolean.TRUE, c.get("enable.idempotence"));
        assertEquals(List.of(), c.get("interceptor.classes"));
    }
}
