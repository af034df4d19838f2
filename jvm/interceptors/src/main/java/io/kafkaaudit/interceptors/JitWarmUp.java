package io.kafkaaudit.interceptors;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;

/**
 * Runs the interceptors' counting on synthetic records while the client is being constructed, so that the JIT
 * compiles it (C2, after about 10,000 calls of a method) before the application's first poll or send: the
 * consumer's ({@link #consumerCounting}) and the producer's ({@link #producerCounting}).
 *
 * <p>C2 compiles only the branches its profile saw taken; a branch the warm-up never took becomes a trap that
 * throws the compiled code away when the application first takes it, to be compiled again on the CPU the
 * application and the broker need. So the synthetic records cover what real ones do (CreateTimes of many ages,
 * several producers, wrapped sequence rings, failures); {@code -XX:+LogCompilation}'s {@code uncommon_trap}
 * entries of an audited {@code kafka-consumer-perf-test} / {@code kafka-producer-perf-test} run show what is left.
 *
 * <p>Without it the counting ran in the JIT's profiling tier (C1) through the application's first second of
 * reading, several times slower, and was compiled again when the first window closed (a branch never taken
 * before). The synthetic polls look like fetched ones: 3 partitions of {@link #RECORDS_PER_PARTITION} records
 * with v2 stamp headers as slices of one buffer (as kafka-clients parses them), runs of consecutive sequences
 * with gaps, a few unstamped records, CreateTimes over several windows; they are counted by a throwaway
 * {@link ConsumerAuditor} whose sink and state source do nothing, so nothing of it reaches the audit topic or
 * the interceptor's counts. About 50,000 records: tens of milliseconds, once.
 */
final class JitWarmUp {
    /** Records per synthetic partition and poll. */
    static final int RECORDS_PER_PARTITION = 500;
    /** Synthetic polls counted. */
    static final int POLLS = 32;
    /**
     * How old each synthetic poll's newest record is (ms before the clock; one poll in {@code LAG_MS.length}, in
     * no order): a range of latencies and freshness buckets, the clock's own ms included, records in windows
     * before, after and already closed behind the previous poll's. C2 compiles only the branches the warm-up
     * took: with every CreateTime equal to the clock, the first real poll (records seconds old, CreateTimes
     * rising into the next window) hit {@code unstable_if} traps in the histograms and the window lookup
     * ({@code -XX:+LogCompilation}), which threw the whole compiled counting away to be compiled again inside
     * the application's reading. Likewise a new producer id in every poll, for the producer-id caches' miss branches.
     */
    private static final long[] LAG_MS = {0, 2_000, 40, 70_000, 300, 4_000_000, 12_000, 700_000};

    private JitWarmUp() {}

    /** A sink that sends nothing (and reports every send as done); also lab/bench/java/ConsumerCountBench's. */
    static final class NoSink implements ProducerAuditor.Sink {
        @Override
        public boolean send(String topic, byte[] key, byte[] value, long timestampMs, Iterable<Header> headers,
                AuditTopicWriter.Outcome outcome) {
            return true;
        }

        @Override
        public void flush(Duration timeout) {}

        @Override
        public void close(Duration timeout) {}
    }

    /**
     * Count {@link #POLLS} synthetic polls with a throwaway auditor of the same settings; never throws.
     *
     * @param settings the interceptor's settings (window and grace as configured)
     * @param metrics where an unexpected error is counted
     * @return the throwaway auditor's counters (tests: nothing malformed, nothing dead-lettered)
     */
    static InterceptorMetrics consumerCounting(AuditSettings settings, InterceptorMetrics metrics) {
        InterceptorMetrics own = new InterceptorMetrics();
        try {
            long[] clock = {System.currentTimeMillis()};
            ConsumerAuditor a = new ConsumerAuditor(settings, "kafka-audit.warm-up", new NoSink(),
                    (keys, budget) -> Map.of(), () -> clock[0], own);
            byte[][] ids = {AuditStamp.newProducerId(), null};
            long[] offsets = new long[3];
            long seq = 0;
            long step = Math.max(1, settings.windowMs() / (POLLS / 4)); // 4 windows over the warm-up
            long spacing = Math.max(1, settings.windowMs() / 4 / RECORDS_PER_PARTITION); // a poll spans 1/4 window
            for (int poll = 0; poll < POLLS; poll++) {
                Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> m = new HashMap<>();
                long newest = clock[0] - LAG_MS[poll % LAG_MS.length];
                ids[1] = AuditStamp.newProducerId(); // a producer not seen before, in every poll
                ids[1][0] = (byte) (poll % 2 == 0 ? ids[1][0] | 0x80 : ids[1][0] & 0x7f); // negative and positive longs
                for (int p = 0; p < 3; p++) {
                    List<ConsumerRecord<byte[], byte[]>> list = new ArrayList<>(RECORDS_PER_PARTITION);
                    for (int i = 0; i < RECORDS_PER_PARTITION; i++) {
                        seq += i % 128 == 0 ? 300 : 1; // runs of 128, as batches of a sticky partitioner
                        byte[] id = ids[(i / 128 + poll) % 4 == 3 ? 1 : 0]; // one run in 4 from another producer
                        long createTime = newest - (RECORDS_PER_PARTITION - 1 - i) * spacing; // rising in a poll
                        byte[] stamp = i % 97 == 0 ? null : AuditStamp.encodeV2(id, seq);
                        list.add(record(p, offsets[p]++, createTime, stamp));
                    }
                    m.put(new TopicPartition("kafka-audit.warm-up", p), list);
                }
                a.onConsume(new ConsumerRecords<>(m, Map.<TopicPartition, OffsetAndMetadata>of()));
                clock[0] += step;
                if (poll % 8 == 7) {
                    a.flush(Duration.ZERO);
                }
            }
        } catch (RuntimeException | LinkageError e) {
            metrics.internalError("warming up the counting", e);
        }
        return own;
    }

    /** Records the producer warm-up sends and acknowledges. */
    static final int PRODUCER_RECORDS = 20_000;
    /**
     * Sequences of the warm-up auditor's ring at first, and at most: smaller than any real one, so that the warm-up
     * wraps it and grows it, as a real producer with many records in flight does.
     */
    private static final int PRODUCER_RING = 1_024;
    private static final int PRODUCER_RING_MAX = 4_096;

    /**
     * Run the producer interceptor's {@code onSend} ({@link AuditProducerInterceptor#stamped}) and
     * {@code onAcknowledgement} on {@link #PRODUCER_RECORDS} synthetic records with a throwaway auditor of the same
     * settings (its ring {@link #PRODUCER_RING} sequences; it sends nothing), so that C2 compiles them while the
     * client is being constructed; never throws. Without it they were compiled inside the application's first
     * seconds of sending, and compiled again when the ring of sequences first wrapped (an {@code unstable_if} trap
     * in {@code ProducerAuditor.onSend}, {@code -XX:+LogCompilation}), on the CPU the application and the broker
     * needed. The records: 3 partitions, CreateTimes given and not, some with a header of their own, bursts of
     * sends then their acknowledgements, one in 64 a failure.
     *
     * @param settings the interceptor's settings (window and grace as configured)
     * @param config the host producer's reported settings
     * @param metrics where an unexpected error is counted
     * @return the throwaway auditor's counters (tests: every acknowledgement attributed to its window)
     */
    static InterceptorMetrics producerCounting(AuditSettings settings, ProducerSettingsReport config,
            InterceptorMetrics metrics) {
        InterceptorMetrics own = new InterceptorMetrics();
        try {
            long[] clock = {System.currentTimeMillis()};
            AuditSettings small = settings.withInflightSlots(Math.min(PRODUCER_RING_MAX, settings.inflightSlots()));
            ProducerAuditor a = new ProducerAuditor(small, ProducerIdentity.of("kafka-audit.warm-up", clock[0]), config,
                    new NoSink(), () -> clock[0], own, PRODUCER_RING);
            String topic = "kafka-audit.warm-up";
            byte[] value = new byte[100];
            RecordHeaders appHeaders = new RecordHeaders();
            appHeaders.add("trace", new byte[8]);
            List<ProducerRecord<byte[], byte[]>> burst = new ArrayList<>();
            long[] offsets = new long[3];
            long step = Math.max(1, settings.windowMs() / 2_000); // 10 windows over the warm-up
            for (int i = 0; i < PRODUCER_RECORDS; i++) {
                Long ts = i % 3 == 0 ? null : clock[0] - (i % 5) * 7L;
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, null, ts, null, value,
                        i % 11 == 0 ? appHeaders : null);
                burst.add(AuditProducerInterceptor.stamped(a, r));
                // bursts of 1-200 in flight, and twice more than the ring holds (it grows)
                boolean wide = i > 5_000 && i < 5_000 + 2 * PRODUCER_RING_MAX;
                int inFlight = wide ? 1_500 * (1 + i / 8_000) : 1 + (i * 7) % 200;
                if (burst.size() >= inFlight) {
                    for (int j = 0; j < burst.size(); j++) {
                        ProducerRecord<byte[], byte[]> b = burst.get(j);
                        int p = (i + j) % 3;
                        boolean failed = (i + j) % 64 == 0;
                        // acknowledged 2 ms before its CreateTime (clocks) to seconds after it
                        long ackLag = (i + j) % 13 == 0 ? 2_500 + i % 3_000 : (i + j) % 7 - 2;
                        RecordMetadata md = failed
                                ? new RecordMetadata(new TopicPartition(topic, -1), -1, -1, -1, -1, -1)
                                : new RecordMetadata(new TopicPartition(topic, p), offsets[p]++, 0,
                                        clock[0] - ackLag, -1, value.length);
                        a.onAcknowledgement(md, failed ? new TimeoutException("warm-up") : null, b.headers());
                    }
                    burst.clear();
                }
                clock[0] += step;
                if (i % 2_000 == 1_999) {
                    a.tick(false);
                }
            }
        } catch (RuntimeException | LinkageError e) {
            metrics.internalError("warming up the producer counting", e);
        }
        return own;
    }

    /** A record as fetched: its stamp header's key and value are slices of one buffer, as kafka-clients parses. */
    private static ConsumerRecord<byte[], byte[]> record(int partition, long offset, long createTime, byte[] stamp) {
        RecordHeaders headers = new RecordHeaders();
        if (stamp != null) {
            byte[] key = AuditStamp.KEY.getBytes(java.nio.charset.StandardCharsets.UTF_8);
            ByteBuffer fetched = ByteBuffer.allocate(key.length + stamp.length).put(key).put(stamp);
            headers.add(new RecordHeader(fetched.slice(0, key.length), fetched.slice(key.length, stamp.length)));
        }
        return new ConsumerRecord<>("kafka-audit.warm-up", partition, offset, createTime, TimestampType.CREATE_TIME, -1, 100,
                null, new byte[0], headers, Optional.empty());
    }
}
