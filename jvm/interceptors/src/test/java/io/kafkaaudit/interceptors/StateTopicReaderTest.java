package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * The state topic reader against kafka-clients' {@link MockConsumer}: the newest value per wanted key, tombstones,
 * and incremental reads (a later read scans only what was written since, and fetches a key scanned before by its
 * offset).
 */
class StateTopicReaderTest {
    private static final String TOPIC = "__kafka_audit_state";
    private static final String TIER = "consumer:g";
    private static final Duration BUDGET = Duration.ofSeconds(5);
    private static final TopicPartition P0 = new TopicPartition(TOPIC, 0);
    private static final TopicPartition P1 = new TopicPartition(TOPIC, 1);

    /**
     * A MockConsumer over a log that keeps its records (MockConsumer's own poll hands each record out once), as a
     * broker does: a poll returns up to 10 records of each assigned, unpaused partition from its position on.
     * Counts the records its polls return.
     */
    private static final class LogConsumer extends MockConsumer<byte[], byte[]> {
        int polled;
        RuntimeException failNextPoll;
        final Map<TopicPartition, Long> end = new HashMap<>();
        final Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> log = new HashMap<>();

        LogConsumer() {
            super("earliest");
            Node n = new Node(1, "127.0.0.1", 9092);
            updatePartitions(TOPIC, List.of(new PartitionInfo(TOPIC, 0, n, new Node[] {n}, new Node[] {n}),
                    new PartitionInfo(TOPIC, 1, n, new Node[] {n}, new Node[] {n})));
            updateBeginningOffsets(Map.of(P0, 0L, P1, 0L));
            end.put(P0, 0L);
            end.put(P1, 0L);
            updateEndOffsets(end);
        }

        void append(TopicPartition tp, String key, String value) {
            long offset = end.get(tp);
            log.computeIfAbsent(tp, t -> new ArrayList<>()).add(new ConsumerRecord<>(TOPIC, tp.partition(), offset,
                    key.getBytes(StandardCharsets.UTF_8), value == null ? null : value.getBytes(StandardCharsets.UTF_8)));
            end.put(tp, offset + 1);
            updateEndOffsets(end);
        }

        @Override
        public synchronized ConsumerRecords<byte[], byte[]> poll(Duration timeout) {
            if (failNextPoll != null) {
                RuntimeException e = failNextPoll;
                failNextPoll = null;
                throw e;
            }
            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> out = new HashMap<>();
            for (TopicPartition tp : assignment()) {
                if (paused().contains(tp)) {
                    continue;
                }
                long at = position(tp);
                List<ConsumerRecord<byte[], byte[]>> batch = new ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : log.getOrDefault(tp, List.of())) {
                    if (r.offset() >= at && batch.size() < 10) {
                        batch.add(r);
                    }
                }
                if (!batch.isEmpty()) {
                    out.put(tp, batch);
                    seek(tp, batch.get(batch.size() - 1).offset() + 1);
                    polled += batch.size();
                } else {
                    seek(tp, Math.max(at, end.get(tp))); // past a gap at the log's end
                }
            }
            return new ConsumerRecords<>(out, Map.of());
        }
    }

    private static String key(int partition) {
        return TIER + "|orders|" + partition;
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void theNewestValueOfEachWantedKeyAndNoneAfterATombstone() {
        LogConsumer c = new LogConsumer();
        c.append(P0, key(0), "s0-old");
        c.append(P1, "consumer:other|orders|0", "another group's");
        c.append(P0, key(0), "s0-new");
        c.append(P1, key(1), "s1");
        c.append(P1, key(1), null); // tombstone
        StateTopicReader reader = new StateTopicReader(() -> c, TOPIC, TIER);
        Map<String, byte[]> found = reader.read(Set.of(key(0), key(1), key(2)), BUDGET);
        assertEquals(Set.of(key(0)), found.keySet());
        assertArrayEquals(bytes("s0-new"), found.get(key(0)));
    }

    @Test
    void aLaterReadScansOnlyWhatWasWrittenSinceAndFetchesAKeyScannedBefore() {
        LogConsumer c = new LogConsumer();
        for (int i = 0; i < 50; i++) {
            c.append(P0, "consumer:other|t|" + i, "x");
        }
        c.append(P1, key(1), "s1");
        c.append(P0, key(0), "s0");
        StateTopicReader reader = new StateTopicReader(() -> c, TOPIC, TIER);
        assertArrayEquals(bytes("s0"), reader.read(Set.of(key(0)), BUDGET).get(key(0)));
        assertEquals(52, c.polled); // the first read scans everything

        c.polled = 0;
        c.append(P0, key(0), "s0-2");
        Map<String, byte[]> found = reader.read(Set.of(key(0), key(1)), BUDGET);
        assertArrayEquals(bytes("s0-2"), found.get(key(0))); // from the new record
        assertArrayEquals(bytes("s1"), found.get(key(1))); // scanned in the first read, fetched by its offset
        assertEquals(2, c.polled); // the new record, and key(1)'s record fetched again: not the 50 others'

        c.polled = 0;
        assertTrue(reader.read(Set.of(key(2)), BUDGET).isEmpty()); // nothing new, nothing of key(2)
        assertEquals(0, c.polled);
    }

    @Test
    void aFailedReadGoesOnWhereItStoppedAndAKeyWhoseRecordIsGoneHasNoState() {
        LogConsumer first = new LogConsumer();
        first.append(P1, key(1), "s1"); // P1 offset 0
        LogConsumer second = new LogConsumer(); // the same topic after key(1)'s tombstone was cleaned
        second.end.put(P1, 2L);
        second.append(P1, "consumer:other|t|0", "x"); // P1 offset 2
        List<LogConsumer> made = new ArrayList<>(List.of(first, second));
        StateTopicReader reader = new StateTopicReader(() -> made.remove(0), TOPIC, TIER);
        assertTrue(reader.read(Set.of(key(0)), BUDGET).isEmpty()); // key(1) indexed at P1 offset 0
        first.append(P0, key(0), "s0");
        first.failNextPoll = new org.apache.kafka.common.KafkaException("broker gone");
        assertThrows(org.apache.kafka.common.KafkaException.class, () -> reader.read(Set.of(key(0)), BUDGET));
        assertTrue(first.closed()); // a new consumer next time
        assertTrue(reader.read(Set.of(key(1)), BUDGET).isEmpty()); // its record is gone: no state
        // From where the first consumer's scan stopped (P1 offset 1: the record at 2), then the fetch of offset 0,
        // which finds offset 2 first; P0 (no record then) is not scanned again.
        assertEquals(2, second.polled);
    }

    @Test
    void aClosedReaderRefusesToRead() {
        LogConsumer c = new LogConsumer();
        StateTopicReader reader = new StateTopicReader(() -> c, TOPIC, TIER);
        reader.read(Set.of(key(0)), BUDGET);
        reader.close();
        assertTrue(c.closed());
        assertThrows(IllegalStateException.class, () -> reader.read(Set.of(key(0)), BUDGET));
    }
}
