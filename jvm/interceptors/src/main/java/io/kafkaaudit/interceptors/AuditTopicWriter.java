package io.kafkaaudit.interceptors;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The interceptor's own producer to the audit topic: idempotent, {@code acks=all}, created by {@link #open()}
 * when the interceptor is configured (its I/O thread connects in the background: no network I/O on the caller's
 * thread), else on first use.
 *
 * <p>Its connection comes from the host client's configuration ({@code bootstrap.servers},
 * {@code client.dns.lookup}, {@code security.protocol}, {@code ssl.*}, {@code sasl.*}), overridden by
 * {@code kafka.audit.producer.*}; it never carries {@code interceptor.classes} (it must not audit itself), and it
 * places keyed records as librdkafka's clients do ({@link ConsistentRandomPartitioner}), whatever the overrides say.
 * A failed send is counted ({@link InterceptorMetrics#getSnapshotFailures()}) and reported to the caller's
 * callback, which marks the window to be sent again: snapshots are cumulative, so a later one heals it.
 */
public final class AuditTopicWriter implements AutoCloseable, ProducerAuditor.Sink {
    private static final Logger LOG = LoggerFactory.getLogger(AuditTopicWriter.class);

    /** Outcome of one send: {@code ok} or not, on the audit producer's I/O thread. */
    @FunctionalInterface
    public interface Outcome {
        /** @param ok whether the audit topic acknowledged the record */
        void done(boolean ok);
    }

    private final Map<String, Object> config;
    private final InterceptorMetrics metrics;
    private Producer<byte[], byte[]> producer;
    private boolean closed;

    /**
     * @param hostConfigs the host client's configuration
     * @param settings the interceptor's settings (for {@code kafka.audit.producer.*})
     * @param clientId the audit producer's {@code client.id}
     * @param metrics where failures are counted
     */
    public AuditTopicWriter(
            Map<String, ?> hostConfigs, AuditSettings settings, String clientId, InterceptorMetrics metrics) {
        this.config = producerConfig(hostConfigs, settings.producerOverrides(), clientId);
        this.metrics = metrics;
    }

    /**
     * The largest consumer state written, bytes ({@code kafka_plumbing.topics.STATE_MAX_MESSAGE_BYTES}): a
     * partition's sequence sets outgrow Kafka's default 1 MB with keyed traffic.
     */
    static final int MAX_STATE_BYTES = 16 * 1024 * 1024;

    /**
     * The audit producer's {@code max.request.size}, bytes: one state of {@link #MAX_STATE_BYTES} and its
     * overhead, as {@code kafka_plumbing.topics}' {@code STATE_PRODUCER_LIMITS}; below the state topic's
     * {@code max.message.bytes} (16 MiB + 128 KiB) and the default {@code buffer.memory} (32 MiB).
     */
    static final int MAX_REQUEST_SIZE = MAX_STATE_BYTES + 64 * 1024;

    /** @return the audit producer's client configuration (connection and security of the host, then overrides) */
    static Map<String, Object> producerConfig(Map<String, ?> host, Map<String, Object> overrides, String clientId) {
        Map<String, Object> c = new HashMap<>();
        for (Map.Entry<String, ?> e : host.entrySet()) {
            String k = e.getKey();
            if (e.getValue() != null && (k.equals("bootstrap.servers") || k.equals("client.dns.lookup")
                    || k.equals("security.protocol") || k.startsWith("ssl.") || k.startsWith("sasl."))) {
                c.put(k, e.getValue());
            }
        }
        c.put("client.id", clientId);
        c.put("linger.ms", 20);
        c.put("max.block.ms", 10_000);
        c.put("max.request.size", MAX_REQUEST_SIZE);
        c.putAll(overrides);
        c.put("acks", "all");
        c.put("enable.idempotence", true);
        c.put("interceptor.classes", List.of());
        c.put("partitioner.class", ConsistentRandomPartitioner.class); // keys where librdkafka's clients put them
        return c;
    }

    /**
     * Send one record to the audit (or dead-letter) topic; never throws.
     *
     * @return false if it could not even be handed to the producer (then {@code outcome} is called with false too)
     */
    @Override
    public boolean send(String topic, byte[] key, byte[] value, long timestampMs, Iterable<Header> headers, Outcome outcome) {
        Producer<byte[], byte[]> p;
        try {
            p = producer();
        } catch (RuntimeException | LinkageError e) {
            metrics.snapshotFailures.incrementAndGet();
            metrics.internalError("creating the audit producer", e);
            outcome.done(false);
            return false;
        }
        if (p == null) {
            outcome.done(false);
            return false;
        }
        try {
            p.send(new ProducerRecord<>(topic, null, timestampMs, key, value, headers), (md, err) -> {
                if (err == null) {
                    metrics.snapshotsSent.incrementAndGet();
                    outcome.done(true);
                } else {
                    long n = metrics.snapshotFailures.incrementAndGet();
                    if (n <= 10 || Long.bitCount(n) == 1) {
                        LOG.warn("kafka-audit snapshot to {} failed (#{}): {}; sent again from the cumulative counts",
                                topic, n, err.toString());
                    }
                    outcome.done(false);
                }
            });
            return true;
        } catch (RuntimeException e) { // max.block.ms (metadata of an unreachable audit topic), buffer full
            long n = metrics.snapshotFailures.incrementAndGet();
            if (n <= 10 || Long.bitCount(n) == 1) {
                LOG.warn("kafka-audit snapshot to {} not sent (#{}): {}", topic, n, e.toString());
            }
            outcome.done(false);
            return false;
        }
    }

    /** Create the producer now (the interceptor's {@code configure}); a failure is counted and retried on first use. */
    public void open() {
        try {
            producer();
        } catch (RuntimeException | LinkageError e) {
            metrics.internalError("creating the audit producer", e);
        }
    }

    private synchronized Producer<byte[], byte[]> producer() {
        if (closed) {
            return null;
        }
        if (producer == null) {
            producer = new KafkaProducer<>(config, new ByteArraySerializer(), new ByteArraySerializer());
        }
        return producer;
    }

    /** Wait until every record sent so far is acknowledged or failed, at most {@code timeout}. */
    @Override
    public void flush(Duration timeout) {
        Producer<byte[], byte[]> p;
        synchronized (this) {
            p = producer;
        }
        if (p == null) {
            return;
        }
        Thread t = new Thread(p::flush, "kafka-audit-flush");
        t.setDaemon(true);
        t.start();
        try {
            t.join(Math.max(1, timeout.toMillis()));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Close the producer, waiting at most {@code timeout} for what it holds. */
    @Override
    public void close(Duration timeout) {
        Producer<byte[], byte[]> p;
        synchronized (this) {
            closed = true;
            p = producer;
            producer = null;
        }
        if (p != null) {
            try {
                p.close(timeout);
            } catch (RuntimeException e) {
                metrics.internalError("closing the audit producer", e);
            }
        }
    }

    @Override
    public void close() {
        close(Duration.ofSeconds(10));
    }
}
