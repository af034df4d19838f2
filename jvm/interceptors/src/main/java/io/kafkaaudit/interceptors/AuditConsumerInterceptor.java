package io.kafkaaudit.interceptors;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Audits a Java consumer by configuration alone:
 * {@code interceptor.classes=io.kafkaaudit.interceptors.AuditConsumerInterceptor} (the application consumer
 * tier {@code consumer:<group.id>}, docs/DESIGN.md "JVM interceptors"). Counting is {@link ConsumerAuditor}'s;
 * snapshots are written from a daemon timer thread every {@code kafka.audit.snapshot.interval.ms} and after
 * each {@code onCommit}, never on the application's thread. Records pass through untouched; no exception
 * leaves {@code onConsume}, {@code onCommit} or {@code close}. A consumer without {@code group.id} is not
 * audited (logged).
 *
 * @param <K> the client's key type
 * @param <V> the client's value type
 */
public class AuditConsumerInterceptor<K, V> implements ConsumerInterceptor<K, V> {
    private static final Logger LOG = LoggerFactory.getLogger(AuditConsumerInterceptor.class);
    /** Default snapshot interval, ms ({@code ConsumerAuditSettings.snapshot_interval_ms}). */
    public static final long DEFAULT_SNAPSHOT_INTERVAL_MS = 1_000;
    /** Default grace, ms ({@code ConsumerAuditSettings.grace_ms}). */
    public static final long DEFAULT_GRACE_MS = 30_000;
    /**
     * At {@code close()}, the longest wait for the group's state of partitions not read back yet (their counts
     * are reported only once it is read: 3 s lost a short-lived member's whole tier on a loaded host).
     */
    static final Duration CLOSE_STATE_READ_TIMEOUT = Duration.ofSeconds(10);

    private final InterceptorMetrics metrics = new InterceptorMetrics();
    private volatile ConsumerAuditor auditor;
    private ScheduledExecutorService timer;
    private AuditTopicWriter writer;
    private StateTopicReader reader;

    @Override
    public void configure(Map<String, ?> configs) {
        AuditSettings settings = AuditSettings.from(configs, DEFAULT_SNAPSHOT_INTERVAL_MS, DEFAULT_GRACE_MS);
        if (!settings.enabled()) {
            return;
        }
        Object g = configs.get("group.id");
        if (g == null || g.toString().isBlank()) {
            LOG.warn("kafka-audit consumer interceptor: no group.id, so no tier consumer:<group.id>; not auditing");
            return;
        }
        String group = g.toString();
        Object cid = configs.get("client.id");
        String clientId = cid == null || cid.toString().isBlank() ? "consumer-" + group : cid.toString();
        writer = new AuditTopicWriter(configs, settings, clientId + ".kafka-audit", metrics);
        ProducerAuditor.Sink sink = writer; // the audit topic writer is the auditor's sink
        reader = new StateTopicReader(configs, settings, clientId + ".kafka-audit-state", "consumer:" + group);
        auditor = new ConsumerAuditor(settings, group, sink, reader::read, System::currentTimeMillis, metrics);
        metrics.register("AuditConsumerInterceptor", clientId);
        writer.open();
        auditor.warmUp();
        JitWarmUp.consumerCounting(settings, metrics);
        timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "kafka-audit-consumer-" + clientId);
            t.setDaemon(true);
            return t;
        });
        long period = settings.snapshotIntervalMs();
        timer.scheduleWithFixedDelay(this::flush, period, period, TimeUnit.MILLISECONDS);
        LOG.info("kafka-audit consumer interceptor of {}: tier consumer:{}, audit topic {}, window {} ms",
                clientId, group, settings.auditTopic(), settings.windowMs());
    }

    private void flush() {
        ConsumerAuditor a = auditor;
        if (a == null) {
            return;
        }
        try {
            a.flush();
        } catch (RuntimeException | Error e) {
            metrics.internalError("flush", e);
        }
    }

    @Override
    public ConsumerRecords<K, V> onConsume(ConsumerRecords<K, V> records) {
        ConsumerAuditor a = auditor;
        if (a != null && records != null && !records.isEmpty()) {
            try {
                a.onConsume(records);
            } catch (RuntimeException | Error e) {
                metrics.internalError("onConsume", e);
            }
        }
        return records;
    }

    @Override
    public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {
        ScheduledExecutorService t = timer;
        if (auditor == null || t == null) {
            return;
        }
        try {
            t.execute(this::flush);
        } catch (RejectedExecutionException e) {
            // closing
        } catch (RuntimeException | Error e) {
            metrics.internalError("onCommit", e);
        }
    }

    @Override
    public void close() {
        ConsumerAuditor a = auditor;
        try {
            if (reader != null) {
                reader.abort(); // a state read of the timer's would hold the reader that the last flush needs
            }
            if (timer != null) {
                timer.shutdown();
                timer.awaitTermination(5, TimeUnit.SECONDS);
            }
            if (a != null) {
                a.flush(CLOSE_STATE_READ_TIMEOUT); // bounded: close() must not hang on an unreachable audit cluster
                writer.flush(Duration.ofSeconds(10));
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (RuntimeException | Error e) {
            metrics.internalError("close", e);
        } finally {
            auditor = null;
            if (reader != null) {
                reader.close();
            }
            if (writer != null) {
                writer.close(Duration.ofSeconds(5));
            }
            metrics.unregister();
        }
    }

    /** @return this interceptor's counters (also in JMX) */
    public InterceptorMetricsMBean metrics() {
        return metrics;
    }
}
