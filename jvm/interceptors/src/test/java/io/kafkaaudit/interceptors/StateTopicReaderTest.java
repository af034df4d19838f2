package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

/**
 * The state topic reader against kafka-clients' {@link MockConsumer} over a log that keeps its records: the newest
 * value per wanted key, tombstones, incremental reads (a later read scans only what was written since and fetches a
 * key scanned before by its offset), a failed read's progress kept, and a log replaced under the index (offsets
 * going back, another key at an indexed offset).
 */
class StateTopicReaderTest {
    private static final String TOPIC = "__kafka_audit_state";
    private static final String TIER = "consumer:g";
    private static final Duration BUDGET = Duration.ofSeconds(5);
    private static final TopicPartition P0 = new TopicPartition(TOPIC, 0);
    private static final TopicPartition P1 = new TopicPartition(TOPIC, 1);

    /** The state topic's two partitions: records by offset (gaps where compaction removed some). */
    private static final class Log {
        final Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> records = new HashMap<>();
        final Map<TopicPartition, Long> end = new HashMap<>(Map.of(P0, 0L, P1, 0L));

        Log append(TopicPartition tp, String key, String value) {
            return appendAt(tp, key, value, ConsumerRecord.NO_TIMESTAMP);
        }

        /** Append a record with this CreateTime, ms. */
        Log appendAt(TopicPartition tp, String key, String value, long timestampMs) {
            long offset = end.get(tp);
            byte[] k = key.getBytes(StandardCharsets.UTF_8);
            byte[] v = value == null ? null : value.getBytes(StandardCharsets.UTF_8);
            records.computeIfAbsent(tp, t -> new ArrayList<>()).add(new ConsumerRecord<>(TOPIC, tp.partition(), offset,
                    timestampMs, TimestampType.CREATE_TIME, k.length, v == null ? -1 : v.length, k, v,
                    new RecordHeaders(), Optional.empty()));
            end.put(tp, offset + 1);
            return this;
        }

        Log others(TopicPartition tp, int n) {
            for (int i = 0; i < n; i++) {
                append(tp, "consumer:other|t|" + i, "x");
            }
            return this;
        }
    }

    /**
     * A consumer of a {@link Log}: a poll returns up to 10 records of each assigned, unpaused partition from its
     * position on (MockConsumer's own poll hands each record out once); counts them, and can fail a poll.
     */
    private static final class LogConsumer extends MockConsumer<byte[], byte[]> {
        final Log log;
        int polled;
        int pollsBeforeFailure = -1;

        LogConsumer(Log log) {
            super("earliest");
            this.log = log;
            Node n = new Node(1, "127.0.0.1", 9092);
            updatePartitions(TOPIC, List.of(new PartitionInfo(TOPIC, 0, n, new Node[] {n}, new Node[] {n}),
                    new PartitionInfo(TOPIC, 1, n, new Node[] {n}, new Node[] {n})));
            updateBeginningOffsets(Map.of(P0, 0L, P1, 0L));
        }

        @Override
        public synchronized Map<TopicPartition, Long> endOffsets(Collection<TopicPartition> partitions, Duration timeout) {
            return new HashMap<>(log.end);
        }

        @Override
        public synchronized ConsumerRecords<byte[], byte[]> poll(Duration timeout) {
            if (pollsBeforeFailure == 0) {
                pollsBeforeFailure = -1;
                throw new KafkaException("broker gone");
            }
            if (pollsBeforeFailure > 0) {
                pollsBeforeFailure--;
            }
            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> out = new HashMap<>();
            for (TopicPartition tp : assignment()) {
                if (paused().contains(tp)) {
                    continue;
                }
                long at = position(tp);
                List<ConsumerRecord<byte[], byte[]>> batch = new ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : log.records.getOrDefault(tp, List.of())) {
                    if (r.offset() >= at && batch.size() < 10) {
                        batch.add(r);
                    }
                }
                if (!batch.isEmpty()) {
                    out.put(tp, batch);
                    seek(tp, batch.get(batch.size() - 1).offset() + 1);
                    polled += batch.size();
                } else {
                    seek(tp, Math.max(at, log.end.get(tp))); // past a gap at the log's end
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
        Log log = new Log().append(P0, key(0), "s0-old").append(P1, "consumer:other|orders|0", "another group's")
                .append(P0, key(0), "s0-new").append(P1, key(1), "s1").append(P1, key(1), null);
        StateTopicReader reader = new StateTopicReader(() -> new LogConsumer(log), TOPIC, TIER);
        Map<String, byte[]> found = reader.read(Set.of(key(0), key(1), key(2)), BUDGET);
        assertEquals(Set.of(key(0)), found.keySet());
        assertArrayEquals(bytes("s0-new"), found.get(key(0)));
    }

    @Test
    void aKeyInTwoPartitionsIsTakenFromItsLaterRecordAndWithinOneByOffset() {
        // murmur2-placed records of an earlier version in one partition, librdkafka-placed ones in another:
        // whichever partition the poll hands out first, the later timestamp wins
        for (boolean newInP0 : new boolean[] {true, false}) {
            Log log = new Log().appendAt(newInP0 ? P1 : P0, key(0), "old", 1_000)
                    .appendAt(newInP0 ? P0 : P1, key(0), "new", 2_000)
                    .appendAt(P1, key(1), "first", 5_000).appendAt(P1, key(1), "second", 4_000); // a clock behind
            StateTopicReader reader = new StateTopicReader(() -> new LogConsumer(log), TOPIC, TIER);
            Map<String, byte[]> found = reader.read(Set.of(key(0), key(1)), BUDGET);
            assertArrayEquals(bytes("new"), found.get(key(0)), "new in P0: " + newInP0);
            assertArrayEquals(bytes("second"), found.get(key(1)));
            // and the index agrees: a later read fetches the same record by its offset
            assertArrayEquals(bytes("new"), reader.read(Set.of(key(0)), BUDGET).get(key(0)));
        }
    }

    @Test
    void aPartitionsLastRecordStandsForItWhateverTheReadingOrder() {
        // P0: a@3000 then b@1000 (a clock behind), P1: c@2000: P0's state is b, older than c (as Python's readers).
        // Each order is forced by an incremental read between the partitions' records.
        for (boolean cFirst : new boolean[] {true, false}) {
            Log log = new Log();
            StateTopicReader reader = new StateTopicReader(() -> new LogConsumer(log), TOPIC, TIER);
            if (cFirst) {
                log.appendAt(P1, key(0), "c", 2_000);
                assertArrayEquals(bytes("c"), reader.read(Set.of(key(0)), BUDGET).get(key(0)));
                log.appendAt(P0, key(0), "a", 3_000).appendAt(P0, key(0), "b", 1_000);
            } else {
                log.appendAt(P0, key(0), "a", 3_000).appendAt(P0, key(0), "b", 1_000);
                assertArrayEquals(bytes("b"), reader.read(Set.of(key(0)), BUDGET).get(key(0)));
                log.appendAt(P1, key(0), "c", 2_000);
            }
            assertArrayEquals(bytes("c"), reader.read(Set.of(key(0)), BUDGET).get(key(0)), "c first: " + cFirst);
            log.appendAt(P1, key(0), null, 4_000); // a tombstone, newest of all: no state
            assertEquals(Map.of(), reader.read(Set.of(key(0)), BUDGET));
        }
    }

    @Test
    void aLaterReadScansOnlyWhatWasWrittenSinceAndFetchesAKeyScannedBefore() {
        Log log = new Log().others(P0, 50).others(P1, 40).append(P1, key(1), "s1").others(P1, 30).append(P0, key(0), "s0");
        LogConsumer c = new LogConsumer(log);
        StateTopicReader reader = new StateTopicReader(() -> c, TOPIC, TIER);
        assertArrayEquals(bytes("s0"), reader.read(Set.of(key(0)), BUDGET).get(key(0)));
        assertEquals(122, c.polled); // the first read scans everything

        c.polled = 0;
        log.append(P0, key(0), "s0-2");
        Map<String, byte[]> found = reader.read(Set.of(key(0), key(1)), BUDGET);
        assertArrayEquals(bytes("s0-2"), found.get(key(0))); // from the new record
        assertArrayEquals(bytes("s1"), found.get(key(1))); // scanned in the first read, fetched at its offset
        // The new record, and a batch from key(1)'s offset on (10 records): not P1's 40 records before it.
        assertEquals(11, c.polled);

        c.polled = 0;
        assertTrue(reader.read(Set.of(key(2)), BUDGET).isEmpty()); // nothing new, nothing of key(2)
        assertEquals(0, c.polled);
    }

    @Test
    void aFailedReadKeepsWhatItScannedAndTheNextGoesOnFromThere() {
        Log log = new Log().others(P0, 100).append(P0, key(0), "s0");
        LogConsumer first = new LogConsumer(log);
        first.pollsBeforeFailure = 5; // 50 records of P0 scanned, then the broker is gone
        LogConsumer second = new LogConsumer(log);
        List<LogConsumer> made = new ArrayList<>(List.of(first, second));
        StateTopicReader reader = new StateTopicReader(() -> made.remove(0), TOPIC, TIER);
        assertThrows(KafkaException.class, () -> reader.read(Set.of(key(0)), BUDGET));
        assertEquals(50, first.polled);
        assertTrue(first.closed()); // a new consumer next time
        assertArrayEquals(bytes("s0"), reader.read(Set.of(key(0)), BUDGET).get(key(0)));
        assertEquals(51, second.polled); // from offset 50 on
    }

    /** Replace the log {@code c} reads with {@code log}'s records and end offsets. */
    private static void replace(LogConsumer c, Log log) {
        c.log.records.clear();
        c.log.records.putAll(log.records);
        c.log.end.putAll(log.end);
    }

    @Test
    void aLogWhoseOffsetsWentBackIsReadFromItsStart() {
        LogConsumer c = new LogConsumer(new Log().others(P1, 20).append(P1, key(1), "s1"));
        StateTopicReader reader = new StateTopicReader(() -> c, TOPIC, TIER);
        assertTrue(reader.read(Set.of(key(0)), BUDGET).isEmpty()); // P1 scanned to 21, key(1) indexed at 20
        replace(c, new Log().append(P1, key(1), "s1-recreated")); // the topic deleted and created again
        assertArrayEquals(bytes("s1-recreated"), reader.read(Set.of(key(1)), BUDGET).get(key(1)));
    }

    @Test
    void anotherKeyAtAnIndexedOffsetMeansAReplacedLogReadFromItsStart() {
        LogConsumer c = new LogConsumer(new Log().others(P1, 20).append(P1, key(1), "s1"));
        StateTopicReader reader = new StateTopicReader(() -> c, TOPIC, TIER);
        assertTrue(reader.read(Set.of(key(0)), BUDGET).isEmpty()); // P1 scanned to 21, key(1) indexed at 20
        // Created again and grown past 21 meanwhile: key(1) at 5, below the offsets scanned; another key at 20.
        replace(c, new Log().others(P1, 5).append(P1, key(1), "s1-b").others(P1, 20));
        assertArrayEquals(bytes("s1-b"), reader.read(Set.of(key(1)), BUDGET).get(key(1)));
    }

    @Test
    void aClosedReaderRefusesToRead() {
        LogConsumer c = new LogConsumer(new Log());
        StateTopicReader reader = new StateTopicReader(() -> c, TOPIC, TIER);
        reader.read(Set.of(key(0)), BUDGET);
        reader.close();
        assertTrue(c.closed());
        assertThrows(IllegalStateException.class, () -> reader.read(Set.of(key(0)), BUDGET));
    }
}
