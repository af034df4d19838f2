package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

/** The consumer interceptor as a client drives it: records pass through untouched, nothing thrown. */
class AuditConsumerInterceptorTest {
    static ConsumerRecords<String, String> records(Header... headers) {
        ConsumerRecord<String, String> r = new ConsumerRecord<>("t", 0, 5, System.currentTimeMillis(), TimestampType.CREATE_TIME,
                -1, 1, "k", "v", new RecordHeaders(headers), Optional.empty());
        return new ConsumerRecords<>(Map.of(new TopicPartition("t", 0), List.of(r)), Map.<TopicPartition, OffsetAndMetadata>of());
    }

    static Map<String, Object> config(String group) {
        Map<String, Object> c = new java.util.HashMap<>(Map.of("bootstrap.servers", "127.0.0.1:1", "client.id", "unit-c",
                "kafka.audit.producer.max.block.ms", "200", "kafka.audit.producer.delivery.timeout.ms", "1000",
                "kafka.audit.producer.request.timeout.ms", "500"));
        if (group != null) {
            c.put("group.id", group);
        }
        return c;
    }

    @Test
    void recordsPassThroughAndAuditFailuresAreCounted() {
        AuditConsumerInterceptor<String, String> i = new AuditConsumerInterceptor<>();
        i.configure(config("billing"));
        assertEquals(0, i.metrics().getInternalErrors(), "warm-up (a snapshot encoded, the audit producer created)");
        ConsumerRecords<String, String> in = records(new RecordHeader(AuditStamp.KEY, new byte[] {1}));
        assertSame(in, i.onConsume(in));
        assertSame(null, i.onConsume(null));
        i.onCommit(Map.of());
        i.onCommit(null);
        i.close();
        assertEquals(1, i.metrics().getMalformedStamps());
        assertTrue(i.metrics().getSnapshotFailures() >= 1, "the audit topic is unreachable: counted, not thrown");
    }

    @Test
    void withoutGroupIdOrWhenDisabledNothingIsAudited() {
        Map<String, Object> disabled = Map.of("group.id", "g", "kafka.audit.enabled", "false");
        for (Map<String, Object> c : List.of(config(null), disabled)) {
            AuditConsumerInterceptor<String, String> i = new AuditConsumerInterceptor<>();
            i.configure(c);
            ConsumerRecords<String, String> in = records();
            assertSame(in, i.onConsume(in));
            i.close();
            assertEquals(0, i.metrics().getSnapshotFailures() + i.metrics().getInternalErrors());
        }
    }
}
