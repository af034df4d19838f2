package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.HexFormat;
import java.util.Set;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.junit.jupiter.api.Test;

/** The shared key placement vectors (audit_record/partition_vectors.json, copied by the build), as librdkafka places them. */
class ConsistentRandomPartitionerTest {
    private static JsonNode vectors() throws Exception {
        try (InputStream in = ConsistentRandomPartitionerTest.class.getResourceAsStream(
                "/kafka-audit/partition_vectors.json")) {
            return new ObjectMapper().readTree(in).get("vectors");
        }
    }

    private static Cluster cluster(String topic, int partitions, int available) {
        Node node = new Node(0, "localhost", 9092);
        List<PartitionInfo> infos = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            Node leader = p < available ? node : null; // no leader: not available
            infos.add(new PartitionInfo(topic, p, leader, new Node[] {node}, new Node[] {node}));
        }
        return new Cluster("c", List.of(node), infos, Set.of(), Set.of());
    }

    @Test
    void keysGoWhereLibrdkafkaPutsThem() throws Exception {
        ConsistentRandomPartitioner partitioner = new ConsistentRandomPartitioner();
        int n = 0;
        for (JsonNode v : vectors()) {
            byte[] key = HexFormat.of().parseHex(v.get("key_hex").asText());
            int partitions = v.get("partitions").asInt();
            int expected = v.get("partition").asInt();
            assertEquals(expected, ConsistentRandomPartitioner.partitionOf(key, partitions), v.toString());
            assertEquals(expected, partitioner.partition("t", key, key, null, null, cluster("t", partitions, partitions)),
                    v.toString());
            n++;
        }
        assertTrue(n >= 50, "vectors read: " + n);
    }

    @Test
    void theVectorsAreNotKafkasDefaultPlacement() throws Exception {
        // murmur2 (Kafka's default for keyed records) puts some of the vectors elsewhere: the rule is tested
        int differ = 0;
        for (JsonNode v : vectors()) {
            byte[] key = HexFormat.of().parseHex(v.get("key_hex").asText());
            int partitions = v.get("partitions").asInt();
            int murmur = org.apache.kafka.common.utils.Utils.toPositive(
                    org.apache.kafka.common.utils.Utils.murmur2(key)) % partitions;
            if (murmur != v.get("partition").asInt()) {
                differ++;
            }
        }
        assertTrue(differ > 10, "vectors placed differently by murmur2: " + differ);
    }

    @Test
    void recordsWithoutAKeyGoToAnAvailablePartition() {
        ConsistentRandomPartitioner partitioner = new ConsistentRandomPartitioner();
        Cluster cluster = cluster("t", 5, 2);
        Set<Integer> seen = new HashSet<>();
        for (int i = 0; i < 200; i++) {
            seen.add(partitioner.partition("t", null, null, null, null, cluster));
            seen.add(partitioner.partition("t", null, new byte[0], null, null, cluster));
        }
        assertEquals(Set.of(0, 1), seen);
        assertThrows(IllegalArgumentException.class, () -> ConsistentRandomPartitioner.partitionOf(new byte[0], 3));
    }

    @Test
    void theAuditProducerUsesItWhateverTheOverridesSay() {
        Map<String, Object> c = AuditTopicWriter.producerConfig(
                Map.of("bootstrap.servers", "b:9092"), Map.of("partitioner.class", "x.Y"), "id");
        assertEquals(ConsistentRandomPartitioner.class, c.get("partitioner.class"));
        // where it puts a state key end to end: tests/integration/test_jvm_interceptors.py
    }
}
