package io.kafkaaudit.interceptors;

import java.nio.ByteBuffer;
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
 * Benchmark (not a test): what the consumer interceptor's counting costs per record in isolation, without a
 * broker, a fetch or another process on the CPU (issue 38, the consumer's 0.9 target).
 *
 * <p>Each round builds polls as kafka-clients' fetch parses them (3 partitions x 167 records of 100 bytes, the v2
 * stamp header's key and value slices of one buffer, CreateTimes rising, one producer's sequences), first alone
 * (the baseline: what the client itself allocates per record), then counted by the parts of the interceptor named
 * by the mode, and prints ns per record for both and their difference:
 *
 * <ul>
 *   <li>{@code all}: {@code ConsumerAuditor.onConsume} (what {@code AuditConsumerInterceptor.onConsume} runs);
 *   <li>{@code flush}: {@code all}, and {@code ConsumerAuditor.flush} (snapshots and states encoded, sent nowhere)
 *       every {@code flushEvery} polls (third argument, default 2000; 12,000 polls are about one second of the
 *       perf tool's consumer at 6 million records/s, so the default flushes six times as often);
 *   <li>{@code stamp}: only {@code StampHeader.readFirstV2} per record (the stamp read in place);
 *   <li>{@code observe}: only {@code ConsumerPartition.observe} per record (the window's counters, the latency and
 *       freshness histograms, the run of sequences).
 * </ul>
 *
 * <p>In package {@code io.kafkaaudit.interceptors} to reach those package-private classes; compiled against the
 * jar the bootstrap builds:
 *
 * <pre>
 * CP=$(.venv/bin/python -c 'from kafka_plumbing.jvm import classpath; from kafka_plumbing.interceptor_jar import interceptor_jar; print(classpath("kafka") + ":" + str(interceptor_jar()))')
 * javac -cp "$CP" -d /tmp/ccb lab/bench/java/ConsumerCountBench.java
 * java -Xmx512m -cp "/tmp/ccb:$CP" io.kafkaaudit.interceptors.ConsumerCountBench all 5000
 * </pre>
 */
public final class ConsumerCountBench {
    private static final int PARTITIONS = 3;
    private static final int PER_PARTITION = 167; // about max.poll.records (500) a poll
    private static final int ROUNDS = 6;
    private static final byte[] ID = {1, 2, 3, 4, 5, 6, 7, 8};
    private static final byte[] KEY = AuditStamp.KEY.getBytes(java.nio.charset.StandardCharsets.UTF_8);

    private long sequence;
    private final long[] offsets = new long[PARTITIONS];
    private final byte[] payload = new byte[100];

    private ConsumerRecords<byte[], byte[]> poll(long createTime) {
        Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> m = new HashMap<>();
        for (int p = 0; p < PARTITIONS; p++) {
            List<ConsumerRecord<byte[], byte[]>> list = new ArrayList<>(PER_PARTITION);
            for (int i = 0; i < PER_PARTITION; i++) {
                byte[] stamp = AuditStamp.encodeV2(ID, sequence++);
                ByteBuffer fetched = ByteBuffer.allocate(KEY.length + stamp.length).put(KEY).put(stamp); // as one fetch
                ByteBuffer key = fetched.slice(0, KEY.length);
                ByteBuffer value = fetched.slice(KEY.length, stamp.length);
                RecordHeaders headers = new RecordHeaders(new Header[] {new RecordHeader(key, value)});
                list.add(new ConsumerRecord<>("bench", p, offsets[p]++, createTime + i / 50, TimestampType.CREATE_TIME,
                        -1, payload.length, null, payload, headers, Optional.empty()));
            }
            m.put(new TopicPartition("bench", p), list);
        }
        return new ConsumerRecords<>(m, Map.<TopicPartition, OffsetAndMetadata>of());
    }

    /**
     * Run the rounds and print a line per round.
     *
     * @param args mode ({@code all}, {@code flush}, {@code stamp} or {@code observe}), polls per round (default
     *     5000), and for {@code flush} the polls between flushes (default 2000)
     */
    public static void main(String[] args) {
        String mode = args.length > 0 ? args[0] : "all";
        int polls = args.length > 1 ? Integer.parseInt(args[1]) : 5_000;
        int flushEvery = args.length > 2 ? Integer.parseInt(args[2]) : 2_000;
        long flushNs = 0;
        int flushes = 0;
        AuditSettings settings = AuditSettings.from(Map.of("bootstrap.servers", "127.0.0.1:1"), 1_000, 30_000);
        ConsumerAuditor auditor = new ConsumerAuditor(settings, "bench", new JitWarmUp.NoSink(),
                (keys, budget) -> Map.of(), System::currentTimeMillis, new InterceptorMetrics());
        ConsumerPartition[] states = new ConsumerPartition[PARTITIONS];
        for (int p = 0; p < PARTITIONS; p++) {
            states[p] = new ConsumerPartition("bench", p, settings.windowMs(), settings.graceMs());
        }
        ConsumerCountBench bench = new ConsumerCountBench();
        long[] stamp = new long[2];
        long keep = 0; // consumed, so that the JIT cannot drop the work
        double perRound = (double) polls * PARTITIONS * PER_PARTITION;
        System.out.printf("mode %s, %d polls of %d records a round (the first rounds warm the JIT up)%n", mode, polls,
                PARTITIONS * PER_PARTITION);
        System.out.println("round | baseline: records built, ns/record | built + counted | counting, ns/record");
        for (int round = 1; round <= ROUNDS; round++) {
            long t0 = System.nanoTime();
            for (int i = 0; i < polls; i++) {
                keep += bench.poll(System.currentTimeMillis()).count();
            }
            long t1 = System.nanoTime();
            for (int i = 0; i < polls; i++) {
                ConsumerRecords<byte[], byte[]> records = bench.poll(System.currentTimeMillis());
                switch (mode) {
                    case "all" -> auditor.onConsume(records);
                    case "flush" -> {
                        auditor.onConsume(records);
                        if (i % flushEvery == flushEvery - 1) {
                            long f = System.nanoTime();
                            keep += auditor.flush();
                            flushNs += System.nanoTime() - f;
                            flushes++;
                        }
                    }
                    case "stamp" -> {
                        for (ConsumerRecord<byte[], byte[]> r : records) {
                            if (StampHeader.readFirstV2(r.headers(), stamp)) {
                                keep += stamp[1];
                            }
                        }
                    }
                    case "observe" -> {
                        for (ConsumerRecord<byte[], byte[]> r : records) {
                            states[r.partition()].observe(r.timestamp(), "bench", r.offset(), 100, 5);
                        }
                    }
                    default -> throw new IllegalArgumentException("mode: all, flush, stamp or observe, not " + mode);
                }
                keep += records.count();
            }
            long t2 = System.nanoTime();
            System.out.printf("%5d | %34.1f | %15.1f | %18.1f%n", round, (t1 - t0) / perRound, (t2 - t1) / perRound,
                    ((t2 - t1) - (t1 - t0)) / perRound);
        }
        if (flushes > 0) {
            System.out.printf("%d flushes, %.1f ms each on average (included in the rounds above)%n", flushes,
                    flushNs / 1e6 / flushes);
        }
        System.out.println("(checksum " + keep + ")");
    }
}
