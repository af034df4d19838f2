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
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;

/**
 * Runs the consumer interceptor's counting on synthetic polls while the client is being constructed, so that the
 * JIT compiles it (C2, after about 10,000 calls of a method) before the application's first poll.
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

    private JitWarmUp() {}

    /** A sink that sends nothing (and reports every send as done). */
    private static final class NoSink implements ProducerAuditor.Sink {
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
     */
    static void consumerCounting(AuditSettings settings, InterceptorMetrics metrics) {
        try {
            long[] clock = {System.currentTimeMillis()};
            ConsumerAuditor a = new ConsumerAuditor(settings, "kafka-audit.warm-up", new NoSink(),
                    (keys, budget) -> Map.of(), () -> clock[0], new InterceptorMetrics());
            byte[] id = AuditStamp.newProducerId();
            long[] offsets = new long[3];
            long seq = 0;
            long step = Math.max(1, settings.windowMs() / (POLLS / 4)); // 4 windows over the warm-up
            for (int poll = 0; poll < POLLS; poll++) {
                Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> m = new HashMap<>();
                for (int p = 0; p < 3; p++) {
                    List<ConsumerRecord<byte[], byte[]>> list = new ArrayList<>(RECORDS_PER_PARTITION);
                    for (int i = 0; i < RECORDS_PER_PARTITION; i++) {
                        seq += i % 128 == 0 ? 300 : 1; // runs of 128, as batches of a sticky partitioner
                        list.add(record(p, offsets[p]++, clock[0], i % 97 == 0 ? null : AuditStamp.encodeV2(id, seq)));
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
