package io.kafkaaudit.interceptors;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Audits a Java producer by configuration alone:
 * {@code interceptor.classes=io.kafkaaudit.interceptors.AuditProducerInterceptor} (the producer tier,
 * docs/DESIGN.md "JVM interceptors").
 *
 * <p>{@code onSend} returns a copy of the record with the audit stamp as its first header (v2: key {@code ~a},
 * this instance's 8 random id bytes and a varint sequence from 1) and its timestamp set to the CreateTime the
 * client would give it (the record's, else now), so the window counted is the window the brokers store; the
 * rest is {@link ProducerAuditor}'s. Snapshots go to {@code kafka.audit.topic} through the interceptor's own
 * idempotent producer ({@link AuditTopicWriter}) from a daemon timer thread.
 *
 * <p>Never in the application's way: no exception leaves {@code onSend}, {@code onAcknowledgement} or
 * {@code close} (a failure returns the record untouched and is counted in JMX,
 * {@code io.kafkaaudit:type=AuditProducerInterceptor}); memory is bounded by {@code kafka.audit.max.windows}
 * and {@code kafka.audit.inflight.slots}.
 *
 * @param <K> the client's key type
 * @param <V> the client's value type
 */
public class AuditProducerInterceptor<K, V> implements ProducerInterceptor<K, V> {
    private static final Logger LOG = LoggerFactory.getLogger(AuditProducerInterceptor.class);
    /** Default snapshot interval, ms ({@code ProducerAuditSettings.snapshot_interval_ms}). */
    public static final long DEFAULT_SNAPSHOT_INTERVAL_MS = 5_000;
    /** Default grace, ms ({@code ProducerAuditSettings.grace_ms}). */
    public static final long DEFAULT_GRACE_MS = 10_000;
    /** How long {@code close()} waits for the final snapshots, ms. */
    public static final long CLOSE_TIMEOUT_MS = 15_000;

    private final InterceptorMetrics metrics = new InterceptorMetrics();
    private volatile ProducerAuditor auditor;
    private ScheduledExecutorService timer;
    private AuditTopicWriter writer;

    @Override
    public void configure(Map<String, ?> configs) {
        AuditSettings settings = AuditSettings.from(configs, DEFAULT_SNAPSHOT_INTERVAL_MS, DEFAULT_GRACE_MS);
        if (!settings.enabled()) {
            return;
        }
        Object cid = configs.get("client.id");
        String clientId = cid == null || cid.toString().isBlank() ? "producer" : cid.toString();
        writer = new AuditTopicWriter(configs, settings, clientId + ".kafka-audit", metrics);
        ProducerAuditor.Sink sink = writer; // the audit topic writer is the auditor's sink
        long now = System.currentTimeMillis();
        ProducerSettingsReport report = ProducerSettingsReport.of(configs);
        auditor = new ProducerAuditor(settings, ProducerIdentity.of(clientId, now), report, sink,
                System::currentTimeMillis, metrics);
        metrics.register("AuditProducerInterceptor", clientId);
        writer.open();
        auditor.warmUp();
        JitWarmUp.producerCounting(settings, report, metrics);
        timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "kafka-audit-producer-" + clientId);
            t.setDaemon(true);
            return t;
        });
        long period = Math.max(10, Math.min(1_000, settings.snapshotIntervalMs()));
        timer.scheduleWithFixedDelay(this::tick, period, period, TimeUnit.MILLISECONDS);
        LOG.info("kafka-audit producer interceptor of {}: producer id {}, audit topic {}, window {} ms",
                clientId, auditor.producerId(), settings.auditTopic(), settings.windowMs());
    }

    private void tick() {
        ProducerAuditor a = auditor;
        if (a == null) {
            return;
        }
        try {
            a.tick(false);
        } catch (RuntimeException | Error e) { // never let the timer die
            metrics.internalError("tick", e);
        }
    }

    @Override
    public ProducerRecord<K, V> onSend(ProducerRecord<K, V> record) {
        ProducerAuditor a = auditor;
        if (a == null || record == null) {
            return record;
        }
        try {
            return stamped(a, record);
        } catch (RuntimeException | Error e) {
            metrics.internalError("onSend", e);
            return record;
        }
    }

    /**
     * Count {@code record} as sent and return its copy with the stamp as the first header and its CreateTime set
     * (the record's timestamp, else now).
     *
     * @throws RuntimeException whatever the record's own headers throw (the caller counts it)
     */
    static <K, V> ProducerRecord<K, V> stamped(ProducerAuditor a, ProducerRecord<K, V> record) {
        Long ts = record.timestamp();
        long timestamp = ts != null ? ts : System.currentTimeMillis();
        byte[] stamp = a.onSend(record.topic(), timestamp);
        Header[] old = record.headers().toArray();
        Header[] all = new Header[old.length + 1];
        all[0] = new RecordHeader(AuditStamp.KEY, stamp);
        System.arraycopy(old, 0, all, 1, old.length);
        return new ProducerRecord<>(record.topic(), record.partition(), timestamp, record.key(), record.value(),
                new RecordHeaders(all));
    }

    /**
     * What kafka-clients before 4.0 call (no headers, so no stamp to find the window by): see
     * {@link ProducerAuditor#onAcknowledgementWithoutStamp}. kafka-clients 4 call the three-argument form only.
     */
    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
        ProducerAuditor a = auditor;
        if (a == null) {
            return;
        }
        try {
            a.onAcknowledgementWithoutStamp(metadata, exception);
        } catch (RuntimeException | Error e) {
            metrics.internalError("onAcknowledgement", e);
        }
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception, Headers headers) {
        ProducerAuditor a = auditor;
        if (a == null) {
            return;
        }
        try {
            a.onAcknowledgement(metadata, exception, headers);
        } catch (RuntimeException | Error e) {
            metrics.internalError("onAcknowledgement", e);
        }
    }

    @Override
    public void close() {
        ProducerAuditor a = auditor;
        auditor = null;
        try {
            if (timer != null) {
                timer.shutdownNow();
            }
            if (a != null) {
                a.closeAll(Duration.ofMillis(CLOSE_TIMEOUT_MS));
                if (a.openWindows() > 0) {
                    LOG.warn("kafka-audit: {} window(s) closed without an acknowledged final snapshot", a.openWindows());
                }
            }
        } catch (RuntimeException | Error e) {
            metrics.internalError("close", e);
        } finally {
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

    /** @return the producer id of this instance's stamps (text form), or null when not auditing */
    public String producerId() {
        ProducerAuditor a = auditor;
        return a == null ? null : a.producerId();
    }
}
