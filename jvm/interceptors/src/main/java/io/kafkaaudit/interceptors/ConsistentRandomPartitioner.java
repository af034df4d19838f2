package io.kafkaaudit.interceptors;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.zip.CRC32;
import org.apache.kafka.clients.producer.Partitioner;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.PartitionInfo;

/**
 * librdkafka's {@code consistent_random} partitioner (its default; CONFIGURATION.md {@code partitioner}) for the
 * interceptors' own producer: a record with a key goes to partition {@code CRC-32(key) mod partitions} (the
 * IEEE CRC-32 of zlib and {@link CRC32}, as an unsigned 32-bit number), one without a key (null or empty) to a
 * random available partition.
 *
 * <p>Why: a key written by both a Python client (librdkafka) and a JVM client must land in one partition. The
 * consumer tier {@code consumer:<group>} keeps each partition's state under one key in the compacted state
 * topic, written by whichever member of the group owns the partition, Python {@code AuditedConsumer} or the
 * JVM's {@code AuditConsumerInterceptor}; a reader takes a key's newest record in log order, which exists only
 * within a partition. With Kafka's default (murmur2) here, a group of both kinds kept two records of a key in
 * two partitions, and a member could load the older one. The shared vectors
 * ({@code audit_record/partition_vectors.json}) pin the rule in Java (JUnit) and in librdkafka (an
 * integration test producing them).
 */
public final class ConsistentRandomPartitioner implements Partitioner {
    /**
     * @param keyBytes the serialized key (null or empty: no key)
     * @param partitions the topic's partition count, at least 1
     * @return the key's partition, in {@code [0, partitions)}
     * @throws IllegalArgumentException if {@code keyBytes} is empty or null, or {@code partitions < 1}
     */
    static int partitionOf(byte[] keyBytes, int partitions) {
        if (keyBytes == null || keyBytes.length == 0 || partitions < 1) {
            throw new IllegalArgumentException("a key and at least one partition are needed");
        }
        CRC32 crc = new CRC32();
        crc.update(keyBytes);
        return (int) (crc.getValue() % partitions);
    }

    @Override
    public int partition(String topic, Object key, byte[] keyBytes, Object value, byte[] valueBytes, Cluster cluster) {
        List<PartitionInfo> all = cluster.partitionsForTopic(topic);
        int n = all.size();
        if (keyBytes != null && keyBytes.length > 0) {
            return partitionOf(keyBytes, n);
        }
        List<PartitionInfo> available = cluster.availablePartitionsForTopic(topic);
        List<PartitionInfo> from = available.isEmpty() ? all : available;
        return from.get(ThreadLocalRandom.current().nextInt(from.size())).partition();
    }

    @Override
    public void configure(Map<String, ?> configs) {}

    @Override
    public void close() {}
}
