package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.NotLeaderOrFollowerException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.junit.jupiter.api.Test;

/** The producer tier's counting, finality and failure handling, with a fake clock and an in-memory audit topic. */
class ProducerAuditorTest {
    static final long W = 60_000;

    /** The audit topic: decoded snapshots, failing while {@code down}. */
    static final class ListSink implements ProducerAuditor.Sink {
        final List<GenericRecord> records = new ArrayList<>();
        final List<byte[]> deadLetters = new ArrayList<>();
        final Map<String, byte[]> states = new HashMap<>();
        boolean down;

        @Override
        public boolean send(String topic, byte[] key, byte[] value, long ts, Iterable<Header> headers,
                AuditTopicWriter.Outcome outcome) {
            if (down) {
                outcome.done(false);
                return false;
            }
            if (topic.equals(AuditSettings.DEFAULT_STATE_TOPIC)) {
                states.put(new String(key, java.nio.charset.StandardCharsets.UTF_8), value);
                outcome.done(true);
                return true;
            }
            if (topic.equals(AuditSettings.DEFAULT_DLQ_TOPIC)) {
                deadLetters.add(value);
                outcome.done(true);
                return true;
            }
            try {
                records.add(AuditRecordSchema.get().decode(value));
            } catch (Exception e) {
                throw new AssertionError(e);
            }
            outcome.done(true);
            return true;
        }

        @Override
        public void flush(Duration timeout) {}

        @Override
        public void close(Duration timeout) {}

        List<GenericRecord> finals() {
            return records.stream().filter(r -> (Boolean) r.get("final")).toList();
        }
    }

    final AtomicLong now = new AtomicLong(10 * W);
    final ListSink sink = new ListSink();
    final InterceptorMetrics metrics = new InterceptorMetrics();

    ProducerAuditor auditor(Map<String, Object> extra) {
        Map<String, Object> c = new HashMap<>(Map.of("bootstrap.servers", "localhost:1", "client.id", "app",
                "key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer",
                "value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer",
                "delivery.timeout.ms", "30000"));
        c.putAll(extra);
        AuditSettings s = AuditSettings.from(c, 5_000, 10_000);
        return new ProducerAuditor(s, ProducerIdentity.of("app", now.get()), ProducerSettingsReport.of(c), sink, now::get,
                metrics);
    }

    static RecordHeaders headers(byte[] stamp) {
        return new RecordHeaders(new Header[] {new RecordHeader(AuditStamp.KEY, stamp)});
    }

    static RecordMetadata ok(String topic, int p, long offset, long ts) {
        return new RecordMetadata(new TopicPartition(topic, p), offset, 0, ts, -1, 100);
    }

    static RecordMetadata failed(String topic) {
        return new RecordMetadata(new TopicPartition(topic, -1), -1, -1, -1, -1, -1);
    }

    @Test
    void countsPerWindowAndFinalOnceAccounted() {
        ProducerAuditor a = auditor(Map.of());
        long t0 = 10 * W + 5;
        List<byte[]> stamps = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            stamps.add(a.onSend("orders", t0 + i));
        }
        byte[] next = a.onSend("orders", 11 * W + 1); // the next window
        for (int i = 0; i < 4; i++) {
            a.onAcknowledgement(ok("orders", i % 2, 100 + i, t0 + i), null, headers(stamps.get(i)));
        }
        a.onAcknowledgement(failed("orders"), new TimeoutException("expired"), headers(stamps.get(4)));
        a.onAcknowledgement(ok("orders", 2, 7, 11 * W + 1), null, headers(next));

        now.set(11 * W + 10_000); // end + grace, accounted: final
        a.tick(false);
        List<GenericRecord> finals = sink.finals();
        assertEquals(1, finals.size());
        GenericRecord f = finals.get(0);
        assertEquals(5L, f.get("sent"));
        assertEquals(4L, f.get("acknowledged"));
        assertEquals(1L, f.get("failed"));
        assertEquals(1L, f.get("first_sequence"));
        assertEquals(5L, f.get("last_sequence"));
        assertEquals(400L, f.get("bytes"));
        assertEquals(10 * W, f.get("window_start_ms"));
        assertEquals("producer", f.get("tier").toString());
        assertEquals("app", f.get("source").toString());
        assertEquals(a.producerId(), f.get("producer_id").toString());
        assertNull(f.get("in_flight_bytes"));
        if (f.getSchema().getField("accounted") != null) {
            assertEquals(true, f.get("accounted"));
        }
        @SuppressWarnings("unchecked")
        List<GenericRecord> parts = (List<GenericRecord>) f.get("partitions");
        assertEquals(3, parts.size()); // -1 (the failure), 0, 1
        assertEquals(-1, parts.get(0).get("partition"));
        assertEquals(1L, ((Map<?, ?>) parts.get(0).get("failed_by_error")).values().iterator().next());
        assertEquals("REQUEST_TIMED_OUT", ((Map<?, ?>) parts.get(0).get("failed_by_error")).keySet().iterator().next().toString());
        if (parts.get(1).getSchema().getField("last_offset") != null) {
            assertEquals(102L, parts.get(1).get("last_offset"));
            assertEquals(103L, parts.get(2).get("last_offset"));
        }
        GenericRecord identity = (GenericRecord) f.get("producer_identity");
        assertEquals("kafka-audit-java", identity.get("library").toString());
        assertEquals(List.of("orders@" + 11 * W), a.windowKeys());
    }

    @Test
    void unaccountedWindowClosesAtTheDeliveryBound() {
        ProducerAuditor a = auditor(Map.of());
        a.onSend("t", 10 * W + 1);
        now.set(11 * W + 10_000);
        a.tick(false);
        assertTrue(sink.finals().isEmpty(), "waits for its acknowledgement");
        assertEquals(1, sink.records.size(), "a provisional snapshot of the changed window");
        now.set(11 * W + 30_000 + 5_000); // end + delivery.timeout.ms + margin
        a.tick(false);
        assertEquals(1, sink.finals().size());
        if (sink.finals().get(0).getSchema().getField("accounted") != null) {
            assertFalse((Boolean) sink.finals().get(0).get("accounted"));
        }
        assertEquals(0, a.openWindows());
    }

    @Test
    void failedSnapshotsAreSentAgainFromTheCumulativeCounts() {
        ProducerAuditor a = auditor(Map.of());
        byte[] s = a.onSend("t", 10 * W + 1);
        a.onAcknowledgement(ok("t", 0, 1, 10 * W + 1), null, headers(s));
        sink.down = true;
        now.set(11 * W + 10_000);
        a.tick(false);
        assertTrue(sink.records.isEmpty());
        assertEquals(1, a.openWindows(), "kept until the audit topic has its final snapshot");
        sink.down = false;
        now.addAndGet(1_000);
        a.tick(false);
        assertEquals(1, sink.finals().size());
        assertEquals(1L, sink.finals().get(0).get("sent"));
        assertEquals(0, a.openWindows());
    }

    @Test
    void windowsAreBoundedOldestDroppedAndCounted() {
        ProducerAuditor a = auditor(Map.of("kafka.audit.max.windows", "2"));
        a.onSend("a", 10 * W);
        a.onSend("b", 11 * W);
        a.onSend("c", 12 * W);
        assertEquals(1, metrics.getWindowsDropped());
        assertEquals(2, a.windowKeys().size());
        assertFalse(a.windowKeys().contains("a@" + 10 * W));
    }

    @Test
    void acknowledgementsWithoutOurStampAreCountedNotThrown() {
        ProducerAuditor a = auditor(Map.of());
        a.onSend("t", 10 * W);
        a.onAcknowledgement(ok("t", 0, 1, 1), null, new RecordHeaders());
        a.onAcknowledgement(ok("t", 0, 1, 1), null, null);
        a.onAcknowledgement(ok("t", 0, 1, 1), new NotLeaderOrFollowerException("x"), headers(AuditStamp.encodeV2(new byte[8], 1)));
        assertEquals(3, metrics.getUnattributedAcknowledgements());
        assertEquals("NOT_LEADER_OR_FOLLOWER", ProducerAuditor.errorName(new NotLeaderOrFollowerException("x")));
        assertEquals("IllegalStateException", ProducerAuditor.errorName(new IllegalStateException("x")));
    }

    @Test
    void clientsBefore40WithoutHeadersAreCountedByTimestampAndOldestWaitingWindow() {
        ProducerAuditor a = auditor(Map.of());
        a.onSend("t", 10 * W + 1);
        a.onSend("t", 10 * W + 2);
        a.onSend("t", 11 * W + 1);
        a.onAcknowledgementWithoutStamp(ok("t", 0, 5, 11 * W + 1), null); // by its timestamp
        a.onAcknowledgementWithoutStamp(failed("t"), new TimeoutException("expired")); // the oldest waiting window
        a.onAcknowledgementWithoutStamp(ok("t", 1, 6, 10 * W + 2), null);
        a.onAcknowledgementWithoutStamp(ok("u", 1, 6, 10 * W + 2), null); // a topic never sent to
        assertEquals(1, metrics.getUnattributedAcknowledgements());
        now.set(12 * W + 10_000);
        a.tick(false);
        assertEquals(2, sink.finals().size());
        for (GenericRecord f : sink.finals()) {
            long sent = (Long) f.get("sent");
            assertEquals(sent, (Long) f.get("acknowledged") + (Long) f.get("failed"));
        }
    }

    @Test
    void theRingGrowsWithTheRecordsInFlightUpToItsBound() {
        ProducerAuditor a = auditor(Map.of("kafka.audit.inflight.slots", Integer.toString(1 << 17)));
        assertEquals(ProducerAuditor.INITIAL_RING, a.ringSlots());
        List<byte[]> stamps = new ArrayList<>();
        for (int i = 0; i < 100_000; i++) { // one window, nothing acknowledged yet: every slot is needed
            stamps.add(a.onSend("t", 10 * W + 1));
        }
        assertEquals(1 << 17, a.ringSlots());
        for (byte[] s : stamps) {
            a.onAcknowledgement(ok("t", 0, 1, 10 * W + 1), null, headers(s));
        }
        assertEquals(0, metrics.getUnattributedAcknowledgements());
        for (int i = 0; i < 100_000; i++) { // beyond the bound the oldest are forgotten, and counted
            a.onSend("t", 10 * W + 2);
        }
        assertEquals(1 << 17, a.ringSlots());
    }

    @Test
    void aRecordForAClosedWindowContinuesItsCounts() {
        ProducerAuditor a = auditor(Map.of());
        byte[] s1 = a.onSend("t", 10 * W + 1);
        a.onAcknowledgement(ok("t", 0, 1, 10 * W + 1), null, headers(s1));
        now.set(11 * W + 10_000);
        a.tick(false);
        assertEquals(0, a.openWindows(), "closed, its final acknowledged");
        byte[] s2 = a.onSend("t", 10 * W + 7); // e.g. a copy keeping its source's CreateTime
        a.onAcknowledgement(ok("t", 0, 2, 10 * W + 7), null, headers(s2));
        now.addAndGet(20_000);
        a.tick(false);
        GenericRecord last = sink.finals().get(sink.finals().size() - 1);
        assertEquals(10 * W, last.get("window_start_ms"));
        assertEquals(2L, last.get("sent"), "never a snapshot restarting from 0 under the same key");
        assertEquals(2L, last.get("acknowledged"));
    }

    @Test
    void closeAllSendsFinalsForEveryWindow() {
        ProducerAuditor a = auditor(Map.of());
        a.onSend("t", 10 * W + 1);
        a.onSend("u", 10 * W + 2);
        a.closeAll(Duration.ofSeconds(1));
        assertEquals(2, sink.finals().size());
        assertEquals(0, a.openWindows());
    }

    /** The acknowledgement finds this instance's stamp wherever it is, and nothing that is not its own. */
    @Test
    void sequenceOfReadsOnlyThisInstancesStamp() {
        ProducerAuditor a = auditor(Map.of());
        ProducerAuditor other = auditor(Map.of());
        byte[] mine = a.onSend("orders", 10 * W);
        byte[] theirs = other.onSend("orders", 10 * W);
        Header trace = new RecordHeader("trace", new byte[] {1});
        assertEquals(1, a.sequenceOf(new RecordHeaders(new Header[] {new RecordHeader(AuditStamp.KEY, mine)})));
        assertEquals(1, a.sequenceOf(new RecordHeaders(new Header[] {trace, new RecordHeader(AuditStamp.KEY, mine)})));
        assertEquals(-1, a.sequenceOf(new RecordHeaders(new Header[] {new RecordHeader(AuditStamp.KEY, theirs)})));
        assertEquals(-1, a.sequenceOf(new RecordHeaders(new Header[] {trace})));
        assertEquals(-1, a.sequenceOf(null));
        byte[] bad = java.util.Arrays.copyOf(mine, mine.length);
        bad[bad.length - 1] |= (byte) 0x80; // a continuation bit on the last byte
        assertEquals(-1, a.sequenceOf(new RecordHeaders(new Header[] {new RecordHeader(AuditStamp.KEY, bad)})));
        assertEquals(-1, a.sequenceOf(new RecordHeaders(new Header[] {new RecordHeader(AuditStamp.KEY, new byte[8])})));
    }
}
