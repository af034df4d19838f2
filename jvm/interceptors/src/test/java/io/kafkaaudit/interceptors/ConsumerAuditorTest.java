package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The application consumer tier: AuditedConsumer's counts (received, unique, duplicated, unaudited, late). */
class ConsumerAuditorTest {
    static final long W = 60_000;
    final AtomicLong now = new AtomicLong(10 * W);
    final ProducerAuditorTest.ListSink sink = new ProducerAuditorTest.ListSink();
    final InterceptorMetrics metrics = new InterceptorMetrics();
    final ConsumerAuditor auditor = member();

    /** A member of the group "billing" sharing the audit topic and the state topic with the others. */
    ConsumerAuditor member() {
        return new ConsumerAuditor(AuditSettings.from(Map.of(), 1_000, 30_000), "billing", sink,
                (keys, budget) -> new java.util.HashMap<>(sink.states), now::get, metrics);
    }
    long offset;

    ConsumerRecord<byte[], byte[]> rec(long ts, Header... headers) {
        return new ConsumerRecord<>("orders", 0, offset++, ts, TimestampType.CREATE_TIME, -1, 10, null, new byte[10],
                new RecordHeaders(headers), Optional.empty());
    }

    static Header v2(long seq) {
        return new RecordHeader(AuditStamp.KEY, AuditStamp.encodeV2(new byte[] {1, 2, 3, 4, 5, 6, 7, 8}, seq));
    }

    void consume(List<ConsumerRecord<byte[], byte[]>> records) {
        consume(auditor, records);
    }

    void consume(ConsumerAuditor a, List<ConsumerRecord<byte[], byte[]>> records) {
        a.onConsume(new ConsumerRecords<>(Map.of(new TopicPartition("orders", 0), records),
                Map.<TopicPartition, OffsetAndMetadata>of()));
    }

    /** A header as built by an application, or as the consumer parses it from a fetch (read in place). */
    static Header header(boolean fetched, String key, byte[] value) {
        return fetched ? StampHeaderTest.fetched(key, value) : new RecordHeader(key, value);
    }

    @ParameterizedTest(name = "headers as fetched: {0}")
    @ValueSource(booleans = {false, true})
    void countsUniqueDuplicatedUnauditedAndDeadLettersBadStamps(boolean fetched) throws Exception {
        long t = 10 * W + 5;
        byte[] id = {1, 2, 3, 4, 5, 6, 7, 8};
        List<ConsumerRecord<byte[], byte[]>> batch = new ArrayList<>();
        batch.add(rec(t, header(fetched, AuditStamp.KEY, AuditStamp.encodeV2(id, 1))));
        batch.add(rec(t, new RecordHeader("traceparent", new byte[3]), header(fetched, AuditStamp.KEY, AuditStamp.encodeV2(id, 2))));
        batch.add(rec(t, header(fetched, AuditStamp.KEY, AuditStamp.encodeV2(id, 2)))); // a duplicate
        batch.add(rec(t, header(fetched, "~b", AuditStamp.encodeV2(id, 3)))); // unaudited: not a stamp key
        batch.add(rec(t, header(fetched, AuditStamp.KEY_V1, AuditStamp.encode("app@h.1.x", 9))));
        batch.add(rec(t, header(fetched, AuditStamp.KEY, new byte[] {1, 2, 3}))); // malformed
        consume(batch);
        assertEquals(3, auditor.flush()); // three buckets: the v2 producer, the v1 producer, unaudited
        List<GenericRecord> byPid = sink.records.stream().filter(r -> "~0102030405060708".equals(String.valueOf(r.get("producer_id")))).toList();
        assertEquals(1, byPid.size());
        GenericRecord r = byPid.get(0);
        assertEquals(3L, r.get("received"));
        assertEquals(2L, r.get("unique"));
        assertEquals(1L, r.get("duplicated"));
        assertEquals("consumer:billing", r.get("tier").toString());
        assertEquals("billing", r.get("source").toString());
        assertEquals(0, r.get("partition"));
        GenericRecord unaudited = sink.records.stream().filter(x -> x.get("producer_id") == null).findFirst().orElseThrow();
        assertEquals(1L, unaudited.get("unaudited"));
        assertTrue(sink.records.stream().anyMatch(x -> "app@h.1.x".equals(String.valueOf(x.get("producer_id")))));
        assertEquals(1, metrics.getMalformedStamps());
        assertEquals(1, metrics.getDeadLetters());
        if (r.getSchema().getField("read_offsets") != null) {
            GenericRecord pos = (GenericRecord) ((List<?>) r.get("read_offsets")).get(0);
            assertEquals(6L, pos.get("offset"));
        }
    }

    @Test
    void aMirrorMaker2CopyIsCountedUnderItsSourceTopic() {
        ConsumerAuditor a = new ConsumerAuditor(AuditSettings.from(Map.of("kafka.audit.replication.sources", "A"), 1_000,
                30_000), "billing", sink, (keys, budget) -> new java.util.HashMap<>(sink.states), now::get, metrics);
        ConsumerRecord<byte[], byte[]> copy = new ConsumerRecord<>("A.orders", 2, 7, 10 * W + 5, TimestampType.CREATE_TIME,
                -1, 10, null, new byte[10], new RecordHeaders(new Header[] {v2(1)}), Optional.empty());
        a.onConsume(new ConsumerRecords<>(Map.of(new TopicPartition("A.orders", 2), List.of(copy)),
                Map.<TopicPartition, OffsetAndMetadata>of()));
        assertEquals(1, a.flush());
        GenericRecord r = sink.records.get(0);
        assertEquals("orders", r.get("topic").toString());
        assertEquals(2, r.get("partition"));
        assertEquals(1L, r.get("unique"));
        assertTrue(sink.states.keySet().stream().anyMatch(k -> k.contains("A.orders")), "state stays the copy's partition's");
    }

    @Test
    void windowsCloseOnTheWatermarkThenLateMessagesAreCounted() {
        consume(List.of(rec(10 * W + 1, v2(1))));
        consume(List.of(rec(11 * W + 30_000, v2(2)))); // watermark: window 10 ends + grace passed
        auditor.flush();
        GenericRecord closed = sink.finals().stream().filter(r -> (Long) r.get("window_start_ms") == 10 * W).findFirst().orElseThrow();
        assertEquals(1L, closed.get("unique"));
        consume(List.of(rec(10 * W + 2, v2(3))));
        sink.records.clear();
        auditor.flush();
        GenericRecord late = sink.records.stream().filter(r -> (Long) r.get("window_start_ms") == 10 * W).findFirst().orElseThrow();
        assertEquals(1L, late.get("late"));
        assertEquals(1L, late.get("received"));
        assertEquals(true, late.get("final"));
    }

    @Test
    void aRestartedMemberContinuesTheGroupsCountsFromTheStateTopic() {
        long t = 10 * W + 5;
        consume(List.of(rec(t, v2(1)), rec(t, v2(2)), rec(t, v2(3))));
        auditor.flush(); // snapshots, then the state
        offset = 2; // the restarted member re-reads from offset 2: sequence 3 again, then 4
        ConsumerAuditor restarted = member();
        consume(restarted, List.of(rec(t, v2(3)), rec(t, v2(4))));
        sink.records.clear();
        restarted.flush();
        GenericRecord r = sink.records.stream().filter(x -> x.get("producer_id") != null).findFirst().orElseThrow();
        assertEquals(5L, r.get("received"));
        assertEquals(4L, r.get("unique"));
        assertEquals(1L, r.get("duplicated"));
        GenericRecord pos = (GenericRecord) ((List<?>) r.get("read_offsets")).get(0);
        assertEquals(4L, pos.get("offset"));
    }

    @Test
    void aMemberThatLostItsPartitionLeavesItsCountsToTheNewOwner() {
        long t = 10 * W + 5;
        consume(List.of(rec(t, v2(1)), rec(t, v2(2))));
        auditor.flush();
        ConsumerAuditor owner = member(); // the partition moved: the new owner reads on
        consume(owner, List.of(rec(t, v2(3))));
        owner.flush();
        now.set(11 * W + 40_000); // both idle, the window's end + grace passed on the wall clock
        sink.records.clear();
        auditor.flush(); // reads the state: the owner counted further, so it forgets the partition
        assertTrue(sink.finals().isEmpty(), "no final with the old counts");
        owner.flush();
        GenericRecord f = sink.finals().stream().filter(x -> x.get("producer_id") != null).findFirst().orElseThrow();
        assertEquals(3L, f.get("unique"));
        assertEquals(3L, f.get("received"));
    }

    @Test
    void stateBytesAreThePortableRoaringFormatPyroaringReads() throws Exception {
        // pyroaring: BitMap64([1, 2, 3, 1000, 2**40 + 5]).serialize().hex()
        byte[] py = java.util.HexFormat.of().parseHex("0200000000000000000000003a300000010000000000030010000000010002000300"
                + "e803000100003a3000000100000000000000100000000500");
        ConsumerPartition.Bucket b = new ConsumerPartition.Bucket();
        ConsumerStateCodec.readPortable(java.nio.ByteBuffer.wrap(py), b);
        assertEquals(5, b.unique("~x"));
        assertTrue(!b.add(1L << 40 | 5) && !b.add(1000) && b.add(4));
        ConsumerPartition.Bucket c = new ConsumerPartition.Bucket();
        for (long v : new long[] {1, 2, 3, 1000, (1L << 40) + 5}) {
            c.add(v);
        }
        c.settle();
        // Runs go in as ranges (RunContainers), so the bytes are not pyroaring's for the same set, but the same
        // portable format: tests/unit/test_counts.py decodes exactly these bytes with pyroaring.
        byte[] written = ConsumerStateCodec.portable(c.sequences, c.large);
        assertEquals("0200000000000000000000003b3000000100000300020001000200e8030000000100003a3000000100000000000000"
                + "100000000500", java.util.HexFormat.of().formatHex(written));
        ConsumerPartition.Bucket d = new ConsumerPartition.Bucket();
        ConsumerStateCodec.readPortable(java.nio.ByteBuffer.wrap(written), d);
        assertEquals(5, d.unique("~x"));
        assertTrue(!d.add(1L << 40 | 5) && !d.add(1000) && !d.add(2) && d.add(4));
    }

    @Test
    void aBucketCountsEverySequenceOnceWhateverTheOrder() {
        for (long seed = 1; seed <= 16; seed++) {
            java.util.Random rnd = new java.util.Random(seed);
            ConsumerPartition.Bucket b = new ConsumerPartition.Bucket();
            java.util.Set<Long> seen = new java.util.HashSet<>();
            long next = seed % 2 == 0 ? 0 : (1L << 32) - 300; // runs across the 32-bit boundary too
            for (int i = 0; i < 2_000; i++) {
                int pick = rnd.nextInt(10);
                long seq;
                if (pick < 6) {
                    seq = next++; // the next of a run
                } else if (pick < 7) {
                    next += 1 + rnd.nextInt(200); // a gap: the other partitions' sequences
                    seq = next++;
                } else if (pick < 9 && !seen.isEmpty()) {
                    seq = Math.max(0, next - 1 - rnd.nextInt(400)); // a copy or a late earlier one
                } else {
                    seq = rnd.nextInt(1_000_000); // anywhere
                }
                assertEquals(seen.add(seq), b.add(seq), "seed " + seed + " step " + i + " seq " + seq);
                if (i % 37 == 0) {
                    assertEquals(seen.size(), b.unique("~p"), "seed " + seed + " step " + i);
                }
                if (rnd.nextInt(500) == 0) {
                    b.settle(); // as a state write does, mid-stream
                }
            }
            b.settle();
            long inBitmaps = b.sequences.getLongCardinality() + (b.large == null ? 0 : b.large.getLongCardinality());
            assertEquals(seen.size(), inBitmaps, "seed " + seed);
            for (long v : seen) {
                assertTrue(v >>> 32 == 0 ? b.sequences.contains((int) v) : b.large.contains(v), "seed " + seed + " lost " + v);
            }
        }
    }

    @Test
    void snapshotsAndTheStateCarryTheFreshnessOfEveryMessageHeldLateOnesIncluded() throws Exception {
        long t = 10 * W + 5;
        now.set(t + 40); // consumed 40 ms after CreateTime: the 100 ms bucket
        consume(List.of(rec(t, v2(1)), rec(t, v2(2))));
        now.set(t + 31_000); // 31 s: the 60 s bucket
        consume(List.of(rec(t, v2(3))));
        auditor.flush();
        GenericRecord r = sink.records.stream().filter(x -> x.get("producer_id") != null).reduce((a, b) -> b).orElseThrow();
        List<?> fresh = (List<?>) r.get("freshness_counts");
        assertEquals(FreshnessHistogram.N_COUNTS, fresh.size());
        assertEquals(2L, fresh.get(0));
        assertEquals(1L, fresh.get(9));
        assertEquals(3L, fresh.stream().mapToLong(x -> (Long) x).sum());
        // the state keeps it; a state without the field (state.v1.avsc) reads as not measured
        ConsumerPartition st = ConsumerStateCodec.decode(sink.states.values().iterator().next(), W, 30_000);
        ConsumerPartition.Bucket b = st.open.values().stream().filter(x -> x.received == 3).findFirst().orElseThrow();
        assertEquals(2L, b.freshness[0]);
        assertEquals(1L, b.freshness[9]);
        byte[] current = sink.states.values().iterator().next();
        org.apache.avro.generic.GenericDatumReader<GenericRecord> v1Reader =
                new org.apache.avro.generic.GenericDatumReader<>(ConsumerStateCodec.V1_SCHEMA);
        GenericRecord v1Record = v1Reader.read(null, org.apache.avro.io.DecoderFactory.get().binaryDecoder(current, null));
        java.io.ByteArrayOutputStream v1 = new java.io.ByteArrayOutputStream();
        org.apache.avro.io.BinaryEncoder enc = org.apache.avro.io.EncoderFactory.get().directBinaryEncoder(v1, null);
        new org.apache.avro.generic.GenericDatumWriter<GenericRecord>(ConsumerStateCodec.V1_SCHEMA).write(v1Record, enc);
        enc.flush();
        assertTrue(v1.size() < current.length);
        ConsumerPartition old = ConsumerStateCodec.decode(v1.toByteArray(), W, 30_000);
        assertTrue(old.open.values().stream().allMatch(x -> x.freshness == null));
    }

    @Test
    void aLogAppendTimePartitionReportsNoFreshness() {
        long t = 10 * W + 5;
        consume(List.of(new ConsumerRecord<>("orders", 0, offset++, t, TimestampType.LOG_APPEND_TIME, -1, 10, null,
                new byte[10], new RecordHeaders(new Header[] {v2(1)}), Optional.empty())));
        auditor.flush();
        GenericRecord r = sink.records.stream().filter(x -> x.get("producer_id") != null).findFirst().orElseThrow();
        assertTrue(((List<?>) r.get("freshness_counts")).isEmpty());
    }
}
