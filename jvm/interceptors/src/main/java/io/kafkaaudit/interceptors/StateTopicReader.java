package io.kafkaaudit.interceptors;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Reads the newest value of some keys from the compacted state topic, to its end (read_committed: a Python
 * {@code AuditedConsumer} writes its state in transactions). A consumer of its own, assigned every partition
 * (no group), built like {@link AuditTopicWriter}'s producer from the host's connection and security settings
 * and {@code kafka.audit.producer.*}; created per read, on the interceptor's timer thread.
 */
final class StateTopicReader {
    /** Reads the newest value per key; throws if the topic cannot be read to its end within {@code budget}. */
    @FunctionalInterface
    interface Source {
        Map<String, byte[]> read(Set<String> keys, Duration budget) throws Exception;
    }

    private final Map<String, Object> config;
    private final String topic;

    StateTopicReader(Map<String, ?> hostConfigs, AuditSettings settings, String clientId) {
        Map<String, Object> p = AuditTopicWriter.producerConfig(hostConfigs, settings.producerOverrides(), clientId);
        Map<String, Object> c = new HashMap<>();
        for (Map.Entry<String, Object> e : p.entrySet()) {
            String k = e.getKey();
            if (k.equals("bootstrap.servers") || k.equals("client.dns.lookup") || k.equals("security.protocol")
                    || k.startsWith("ssl.") || k.startsWith("sasl.")) {
                c.put(k, e.getValue());
            }
        }
        c.put("client.id", clientId);
        c.put("enable.auto.commit", false);
        c.put("isolation.level", "read_committed");
        c.put("interceptor.classes", List.of());
        this.config = c;
        this.topic = settings.stateTopic();
    }

    /**
     * Read the state topic to its end, all of it within {@code budget}.
     *
     * @return key -> newest value of the wanted keys found (none: the topic does not exist or holds none)
     * @throws org.apache.kafka.common.errors.TimeoutException if the topic was not read to its end in time
     */
    Map<String, byte[]> read(Set<String> keys, Duration budget) {
        Map<String, byte[]> found = new HashMap<>();
        long deadline = System.nanoTime() + budget.toNanos();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<PartitionInfo> infos = c.partitionsFor(topic, left(deadline));
            if (infos == null || infos.isEmpty()) {
                return found;
            }
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo i : infos) {
                tps.add(new TopicPartition(topic, i.partition()));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, left(deadline));
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp, left(deadline)) < end.get(tp)) {
                        done = false;
                        break;
                    }
                }
                if (done) {
                    return found;
                }
                if (System.nanoTime() > deadline) {
                    throw new org.apache.kafka.common.errors.TimeoutException("state topic " + topic + " not read to its end");
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    if (r.key() == null) {
                        continue;
                    }
                    String k = new String(r.key(), java.nio.charset.StandardCharsets.UTF_8);
                    if (keys.contains(k)) {
                        if (r.value() == null) {
                            found.remove(k);
                        } else {
                            found.put(k, r.value());
                        }
                    }
                }
            }
        }
    }

    private static Duration left(long deadlineNanos) {
        return Duration.ofNanos(Math.max(1_000_000, deadlineNanos - System.nanoTime()));
    }
}
