package io.kafkaaudit.interceptors;

import java.util.Locale;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.kafka.clients.producer.ProducerConfig;

/**
 * The host producer's reliability settings, as the audit record's {@code producer_config} reports them.
 *
 * <p>Java names map onto the librdkafka-named fields where they mean the same: {@code acks},
 * {@code enable.idempotence}, {@code linger.ms}, {@code delivery.timeout.ms} (librdkafka's
 * {@code message.timeout.ms}: the bound after which a record fails), {@code retries}
 * ({@code message.send.max.retries}), {@code retry.backoff.ms}. {@code batch.num.messages} has no Java
 * counterpart ({@code batch.size} is bytes): it is sent null (audit record v9) with {@code batch_size_bytes};
 * against a schema before v9, where {@code batch_num_messages} is a non-null int, {@code producer_config} is
 * sent null rather than a made-up count.
 *
 * @param acks canonical acks: "0", "1" or "all"
 * @param enableIdempotence enable.idempotence as the client runs it
 * @param lingerMs linger.ms
 * @param deliveryTimeoutMs delivery.timeout.ms
 * @param retries retries
 * @param retryBackoffMs retry.backoff.ms
 * @param batchSizeBytes batch.size, bytes
 */
record ProducerSettingsReport(String acks, boolean enableIdempotence, double lingerMs, int deliveryTimeoutMs,
        int retries, int retryBackoffMs, int batchSizeBytes) {

    /** @return the settings a producer with these configs runs with (the client's defaults for what is unset) */
    static ProducerSettingsReport of(Map<String, ?> configs) {
        Map<String, Object> parsed;
        try {
            parsed = ProducerConfig.configDef().parse(configs);
        } catch (RuntimeException e) { // a config this client version does not know how to parse: defaults
            parsed = Map.of();
        }
        Object rawAcks = parsed.containsKey("acks") ? parsed.get("acks") : configs.get("acks");
        String acks = String.valueOf(rawAcks == null ? "all" : rawAcks)
                .trim().toLowerCase(Locale.ROOT);
        if (acks.equals("-1")) {
            acks = "all";
        }
        Object idem = configs.get("enable.idempotence");
        boolean idempotent = idem == null ? acks.equals("all") : Boolean.parseBoolean(idem.toString().trim());
        return new ProducerSettingsReport(
                acks,
                idempotent,
                number(parsed.get("linger.ms"), 5),
                (int) number(parsed.get("delivery.timeout.ms"), 120_000),
                (int) number(parsed.get("retries"), Integer.MAX_VALUE),
                (int) number(parsed.get("retry.backoff.ms"), 100),
                (int) number(parsed.get("batch.size"), 16_384));
    }

    private static double number(Object v, double dflt) {
        return v instanceof Number n ? n.doubleValue() : dflt;
    }

    /** @return whether an acknowledgement proves the broker has the record (not with acks=0) */
    boolean acksProveDelivery() {
        return !acks.equals("0");
    }

    /** @return the {@code ProducerConfig} Avro record, or null while the schema cannot hold "unknown" for batch_num_messages */
    GenericRecord record(AuditRecordSchema schema) {
        Schema s = schema.type("ProducerConfig");
        if (s == null || !AuditRecordSchema.nullable(s, "batch_num_messages")) {
            return null;
        }
        GenericRecordBuilder b = new GenericRecordBuilder(s)
                .set("acks", acks)
                .set("enable_idempotence", enableIdempotence)
                .set("batch_num_messages", null)
                .set("linger_ms", lingerMs)
                .set("message_timeout_ms", deliveryTimeoutMs)
                .set("message_send_max_retries", retries)
                .set("retry_backoff_ms", retryBackoffMs);
        AuditRecordSchema.set(b, s, "poll_interval_ms", null);
        AuditRecordSchema.set(b, s, "batch_size_bytes", batchSizeBytes);
        return b.build();
    }
}
