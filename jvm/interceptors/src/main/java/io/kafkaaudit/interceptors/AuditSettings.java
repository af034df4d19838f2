package io.kafkaaudit.interceptors;

import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;

/**
 * The interceptors' own settings, read from the host client's configuration (keys starting with
 * {@value #PREFIX}; the client passes every key it was given to {@code configure}).
 *
 * <table>
 *   <caption>Settings</caption>
 *   <tr><th>key</th><th>default</th><th>meaning</th></tr>
 *   <tr><td>kafka.audit.topic</td><td>__kafka_audit</td><td>the audit topic the snapshots go to</td></tr>
 *   <tr><td>kafka.audit.state.topic</td><td>__kafka_audit_state</td><td>consumer: the per-partition state (compacted), shared with AuditedConsumer</td></tr>
 *   <tr><td>kafka.audit.dlq.topic</td><td>__kafka_audit_dlq</td><td>dead letters (consumer: malformed stamps)</td></tr>
 *   <tr><td>kafka.audit.window.ms</td><td>60000</td><td>window length, ms (equal to every other tier's)</td></tr>
 *   <tr><td>kafka.audit.snapshot.interval.ms</td><td>5000 (producer), 1000 (consumer)</td><td>cumulative snapshots of changed windows at least this often</td></tr>
 *   <tr><td>kafka.audit.grace.ms</td><td>10000 (producer), 30000 (consumer)</td><td>a window closes no earlier than this long after its end</td></tr>
 *   <tr><td>kafka.audit.delivery.margin.ms</td><td>5000</td><td>producer: a window whose messages are not all
 *       acknowledged or failed closes at its end + {@code delivery.timeout.ms} + this margin</td></tr>
 *   <tr><td>kafka.audit.max.windows</td><td>1000</td><td>windows (topic, window[, partition]) tracked at once; beyond, the oldest is dropped and counted</td></tr>
 *   <tr><td>kafka.audit.inflight.slots</td><td>1048576</td><td>producer: at most this many sequences remembered for the acknowledgements (2 bytes each; the ring starts at 65536 and doubles while needed)</td></tr>
 *   <tr><td>kafka.audit.enabled</td><td>true</td><td>false: the interceptor passes records through untouched</td></tr>
 *   <tr><td>kafka.audit.replication.*</td><td></td><td>consumer: MirrorMaker 2 copies counted under their source
 *       topic ({@link ReplicationNaming}: policy, sources, separator)</td></tr>
 *   <tr><td>kafka.audit.producer.*</td><td></td><td>client settings of the interceptor's own producer, overriding
 *       those taken from the host client (bootstrap.servers, security.protocol, ssl.*, sasl.*)</td></tr>
 * </table>
 *
 * @param auditTopic the audit topic
 * @param dlqTopic the dead-letter topic
 * @param stateTopic the consumer tier's state topic
 * @param windowMs window length, ms
 * @param snapshotIntervalMs snapshot interval, ms
 * @param graceMs grace after a window's end, ms
 * @param deliveryMarginMs producer: margin after the delivery timeout, ms
 * @param maxWindows the cap on tracked windows
 * @param inflightSlots producer: the sequence ring's size (a power of two)
 * @param enabled whether the interceptor audits
 * @param producerOverrides client settings of the audit producer ({@value #PRODUCER_PREFIX} stripped)
 * @param replication consumer: how MirrorMaker 2 names copies (the topic a copy's counts are reported under)
 */
public record AuditSettings(
        String auditTopic,
        String dlqTopic,
        String stateTopic,
        long windowMs,
        long snapshotIntervalMs,
        long graceMs,
        long deliveryMarginMs,
        int maxWindows,
        int inflightSlots,
        boolean enabled,
        Map<String, Object> producerOverrides,
        ReplicationNaming replication) {

    /** Prefix of every interceptor setting. */
    public static final String PREFIX = "kafka.audit.";
    /** Prefix of the audit producer's client settings. */
    public static final String PRODUCER_PREFIX = PREFIX + "producer.";
    /** Default audit topic (Python's {@code audit_record.DEFAULT_AUDIT_TOPIC}). */
    public static final String DEFAULT_AUDIT_TOPIC = "__kafka_audit";
    /** Default dead-letter topic ({@code audit_record.dead_letter.DEFAULT_DLQ_TOPIC}). */
    public static final String DEFAULT_DLQ_TOPIC = "__kafka_audit_dlq";
    /** Default state topic ({@code audit_consumer.settings.DEFAULT_STATE_TOPIC}). */
    public static final String DEFAULT_STATE_TOPIC = "__kafka_audit_state";
    /** Default window, ms ({@code audit_record.windows.DEFAULT_WINDOW_MS}). */
    public static final long DEFAULT_WINDOW_MS = 60_000;
    /** Default delivery margin, ms ({@code audit_record.finality.DEFAULT_DELIVERY_MARGIN_MS}). */
    public static final long DEFAULT_DELIVERY_MARGIN_MS = 5_000;

    /**
     * Read the settings from a client's configuration.
     *
     * @param configs what the client passed to {@code configure}
     * @param defaultSnapshotIntervalMs the component's default snapshot interval, ms
     * @param defaultGraceMs the component's default grace, ms
     * @throws ConfigException naming the key and the allowed values when a value is invalid
     */
    public static AuditSettings from(Map<String, ?> configs, long defaultSnapshotIntervalMs, long defaultGraceMs) {
        Map<String, Object> overrides = new HashMap<>();
        for (Map.Entry<String, ?> e : configs.entrySet()) {
            if (e.getKey().startsWith(PRODUCER_PREFIX) && e.getValue() != null) {
                overrides.put(e.getKey().substring(PRODUCER_PREFIX.length()), e.getValue());
            }
        }
        int slots = (int) number(configs, "inflight.slots", 1 << 20, 1024, 1 << 26);
        return new AuditSettings(
                text(configs, "topic", DEFAULT_AUDIT_TOPIC),
                text(configs, "dlq.topic", DEFAULT_DLQ_TOPIC),
                text(configs, "state.topic", DEFAULT_STATE_TOPIC),
                number(configs, "window.ms", DEFAULT_WINDOW_MS, 1, Long.MAX_VALUE / 4),
                number(configs, "snapshot.interval.ms", defaultSnapshotIntervalMs, 1, Long.MAX_VALUE / 4),
                number(configs, "grace.ms", defaultGraceMs, 0, Long.MAX_VALUE / 4),
                number(configs, "delivery.margin.ms", DEFAULT_DELIVERY_MARGIN_MS, 0, Long.MAX_VALUE / 4),
                (int) number(configs, "max.windows", 1000, 1, 30_000),
                Integer.highestOneBit(slots),
                bool(configs, "enabled", true),
                Map.copyOf(overrides),
                ReplicationNaming.from(configs));
    }

    private static String text(Map<String, ?> configs, String key, String dflt) {
        Object v = configs.get(PREFIX + key);
        if (v == null) {
            return dflt;
        }
        String s = v.toString().trim();
        if (s.isEmpty()) {
            throw new ConfigException(PREFIX + key, v, "allowed values: a non-empty topic name");
        }
        return s;
    }

    private static long number(Map<String, ?> configs, String key, long dflt, long min, long max) {
        Object v = configs.get(PREFIX + key);
        if (v == null) {
            return dflt;
        }
        long n;
        try {
            n = v instanceof Number num ? num.longValue() : Long.parseLong(v.toString().trim());
        } catch (NumberFormatException e) {
            throw new ConfigException(PREFIX + key, v, "allowed values: a whole number from " + min + " to " + max);
        }
        if (n < min || n > max) {
            throw new ConfigException(PREFIX + key, v, "allowed values: a whole number from " + min + " to " + max);
        }
        return n;
    }

    /** @return these settings with the producer's sequence ring at most {@code slots} (a power of two) */
    AuditSettings withInflightSlots(int slots) {
        return new AuditSettings(auditTopic, dlqTopic, stateTopic, windowMs, snapshotIntervalMs, graceMs,
                deliveryMarginMs, maxWindows, slots, enabled, producerOverrides, replication);
    }

    private static boolean bool(Map<String, ?> configs, String key, boolean dflt) {
        Object v = configs.get(PREFIX + key);
        if (v == null) {
            return dflt;
        }
        if (v instanceof Boolean b) {
            return b;
        }
        String s = v.toString().trim().toLowerCase(java.util.Locale.ROOT);
        if (s.equals("true") || s.equals("false")) {
            return Boolean.parseBoolean(s);
        }
        throw new ConfigException(PREFIX + key, v, "allowed values: true, false");
    }
}
