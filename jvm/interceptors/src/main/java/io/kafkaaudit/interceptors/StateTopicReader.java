package io.kafkaaudit.interceptors;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Reads the newest value of some keys from the compacted state topic, to its end (read_committed: a Python
 * {@code AuditedConsumer} writes its state in transactions). A consumer of its own, assigned every partition
 * (no group), built like {@link AuditTopicWriter}'s producer from the host's connection and security settings
 * and {@code kafka.audit.producer.*}, kept from one read to the next.
 *
 * <p>Incremental: the first read scans the topic from its start; the reader remembers, per partition, the offset
 * it has scanned to, and per key of its tier ({@code consumer:<group>|...}, the only keys a member asks for) where
 * that key's newest record is (partition and offset; none after a tombstone). A later read scans only what was
 * written since, and fetches a wanted key scanned before by its offset. The topic holds every group's states, and
 * a member reads it whenever a partition is new to it and before each idle partition's window closes (about once
 * a window): a full scan each time read the whole topic, every group's states and the head compaction has not
 * cleaned yet, for a few keys. Memory: one location per key of the tier.
 *
 * <p>A key's records are in one partition (every writer places keys as librdkafka does,
 * {@link ConsistentRandomPartitioner}), where the later offset is the newer record. A key found in two partitions
 * (written by a JVM interceptor of a version that placed keys with Kafka's murmur2) is taken from the partition
 * whose last record of the key has the later timestamp (ties: the higher partition), whatever order the partitions
 * are read in; a tombstone there means no state. Python's readers choose alike
 * ({@code audit_consumer.state_codec.newest_values}).
 *
 * <p>A log replaced under the index (the topic deleted and created again, a truncation) shows as offsets going
 * back, or as another key at a key's indexed offset: the index then starts from empty, as it does at least every
 * {@link #FULL_SCAN_INTERVAL}, for a log replaced and grown past the offsets scanned meanwhile.
 *
 * <p>One read at a time (the interceptor's timer thread, then {@code close()}): a read waits at most its budget
 * for one in progress. A read that fails or times out keeps what it had scanned; the next one goes on from there.
 */
final class StateTopicReader implements AutoCloseable {
    /** The index starts from empty at least this often (a log replaced and grown past the offsets scanned). */
    static final Duration FULL_SCAN_INTERVAL = Duration.ofHours(1);
    /** Reads the newest value per key; throws if the topic cannot be read to its end within {@code budget}. */
    @FunctionalInterface
    interface Source {
        Map<String, byte[]> read(Set<String> keys, Duration budget) throws Exception;
    }

    /** Where a key's last record in one partition is, its timestamp (ms), and whether it is a tombstone. */
    private record Location(TopicPartition partition, long offset, long timestamp, boolean tombstone) {
        /** The key's newest record among its partitions' last ones: later timestamp, then higher partition. */
        static Location newest(Map<Integer, Location> byPartition) {
            Location best = null;
            for (Location l : byPartition.values()) {
                if (best == null || l.timestamp() > best.timestamp()
                        || (l.timestamp() == best.timestamp() && l.partition().partition() > best.partition().partition())) {
                    best = l;
                }
            }
            return best;
        }
    }

    private final Supplier<Consumer<byte[], byte[]>> factory;
    private final String topic;
    private final String keyPrefix;
    private final ReentrantLock lock = new ReentrantLock();
    /** Per partition, the next offset to scan (absent: from the start). Under {@link #lock}. */
    private final Map<TopicPartition, Long> scanned = new HashMap<>();
    /**
     * Per key of the tier, its last record in each partition that has one (one partition but for records placed by
     * an earlier version); the key's state is the newest of them ({@link Location#newest}). Under {@link #lock}.
     */
    private final Map<String, Map<Integer, Location>> newest = new HashMap<>();
    private volatile Consumer<byte[], byte[]> consumer;
    private volatile boolean woken;
    private boolean closed;
    /** When the index was last started from empty ({@link System#nanoTime}); null: never. Under {@link #lock}. */
    private Long indexedSince;

    StateTopicReader(Map<String, ?> hostConfigs, AuditSettings settings, String clientId, String tier) {
        this(consumerFactory(hostConfigs, settings, clientId), settings.stateTopic(), tier);
    }

    /**
     * @param factory makes the reader's consumer (at the first read, and again after a failed one)
     * @param topic the state topic
     * @param tier the keys' tier ({@code consumer:<group>}): only keys starting with {@code tier + "|"} are indexed
     */
    StateTopicReader(Supplier<Consumer<byte[], byte[]>> factory, String topic, String tier) {
        this.factory = factory;
        this.topic = topic;
        this.keyPrefix = tier + "|";
    }

    private static Supplier<Consumer<byte[], byte[]>> consumerFactory(Map<String, ?> hostConfigs, AuditSettings settings,
            String clientId) {
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
        c.put("auto.offset.reset", "earliest"); // a scanned offset compaction or retention removed: from the start
        c.put("metadata.max.age.ms", 30_000); // a kept consumer sees partitions added to the topic within 30 s
        c.put("interceptor.classes", List.of());
        return () -> new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /**
     * Read the state topic to its end (what was written since the previous read), all of it within {@code budget}.
     *
     * @param keys the wanted keys (of this reader's tier)
     * @param budget the longest the read may take, including the wait for a read in progress
     * @return key -> newest value of the wanted keys found (none: the topic does not exist or holds none)
     * @throws TimeoutException if the topic was not read to its end in time
     * @throws IllegalStateException if the reader is closed
     */
    Map<String, byte[]> read(Set<String> keys, Duration budget) {
        long deadline = System.nanoTime() + budget.toNanos();
        try {
            if (!lock.tryLock(budget.toNanos(), TimeUnit.NANOSECONDS)) {
                throw new TimeoutException("state topic " + topic + ": another read still in progress");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TimeoutException("interrupted waiting to read the state topic " + topic);
        }
        try {
            if (closed) {
                throw new IllegalStateException("the state topic reader is closed");
            }
            if (woken) {
                woken = false;
                closeConsumer();
            }
            if (consumer == null) {
                consumer = factory.get();
            }
            if (indexedSince == null || System.nanoTime() - indexedSince > FULL_SCAN_INTERVAL.toNanos()) {
                forget(); // now and then from the start: a log replaced under the same offsets goes unseen otherwise
            }
            try {
                return scanAndFetch(consumer, keys, deadline);
            } catch (LogReplacedException e) {
                forget();
                return scanAndFetch(consumer, keys, deadline);
            }
        } catch (RuntimeException e) {
            closeConsumer(); // the next read starts a new consumer where this one's scan stopped
            throw e;
        } finally {
            lock.unlock();
        }
    }

    /** Start the index from empty: the next scan reads the topic from its start. */
    private void forget() {
        scanned.clear();
        newest.clear();
        indexedSince = System.nanoTime();
    }

    /**
     * The partition's log is not the one indexed (the topic deleted and created again, or truncated): offsets
     * went back, or another key sits at an offset where a key's newest record was (compaction removes records,
     * it never moves one to another offset).
     */
    private static final class LogReplacedException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        LogReplacedException(TopicPartition tp) {
            super("the state topic's partition " + tp + " is not the log indexed", null, false, false);
        }
    }

    private Map<String, byte[]> scanAndFetch(Consumer<byte[], byte[]> c, Set<String> keys, long deadline) {
        Map<String, Scanned> found = new HashMap<>();
        List<PartitionInfo> infos = c.partitionsFor(topic, left(deadline));
        if (infos == null || infos.isEmpty()) {
            return new HashMap<>();
        }
        List<TopicPartition> tps = new ArrayList<>();
        for (PartitionInfo i : infos) {
            tps.add(new TopicPartition(topic, i.partition()));
        }
        c.assign(tps);
        Map<TopicPartition, Long> end = c.endOffsets(tps, left(deadline));
        List<TopicPartition> behind = new ArrayList<>();
        for (TopicPartition tp : tps) {
            Long from = scanned.get(tp);
            long to = end.getOrDefault(tp, 0L);
            if (from != null && from > to) {
                throw new LogReplacedException(tp);
            }
            if (from != null && from >= to) {
                continue; // nothing written since the last read
            }
            behind.add(tp);
            if (from == null) {
                c.seekToBeginning(List.of(tp));
            } else {
                c.seek(tp, from);
            }
        }
        c.pause(tps);
        c.resume(behind);
        while (!behind.isEmpty()) {
            if (System.nanoTime() > deadline) {
                throw new TimeoutException("state topic " + topic + " not read to its end");
            }
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                index(r, keys, found);
            }
            for (int i = behind.size() - 1; i >= 0; i--) {
                TopicPartition tp = behind.get(i);
                long at = c.position(tp, left(deadline));
                scanned.put(tp, at); // everything before it is indexed (control records and aborted data skipped)
                if (at >= end.get(tp)) {
                    c.pause(List.of(tp));
                    behind.remove(i);
                }
            }
        }
        Map<String, byte[]> out = new HashMap<>();
        for (String k : keys) {
            while (newest.containsKey(k)) {
                Location l = Location.newest(newest.get(k));
                if (l.tombstone()) {
                    break; // no state
                }
                Scanned v = found.get(k);
                if (v != null && v.at().equals(l)) {
                    out.put(k, v.value()); // read by this scan
                    break;
                }
                byte[] value = fetch(c, l, k, end.getOrDefault(l.partition(), 0L), deadline);
                if (value != null) {
                    out.put(k, value);
                    break;
                } // else gone, and forgotten: the next newest, if any
            }
        }
        return out;
    }

    /** A wanted key's record read by the scan, and where. */
    private record Scanned(Location at, byte[] value) {}

    /** Note where a record of the tier is (the key's last in its partition); keep its value when it is wanted now. */
    private void index(ConsumerRecord<byte[], byte[]> r, Set<String> keys, Map<String, Scanned> found) {
        if (r.key() == null) {
            return;
        }
        String k = new String(r.key(), StandardCharsets.UTF_8);
        if (!k.startsWith(keyPrefix)) {
            return; // another group's state
        }
        Location at = new Location(new TopicPartition(r.topic(), r.partition()), r.offset(), r.timestamp(),
                r.value() == null);
        newest.computeIfAbsent(k, x -> new HashMap<>(2)).put(r.partition(), at);
        if (keys.contains(k) && r.value() != null) {
            found.put(k, new Scanned(at, r.value()));
        }
    }

    /** Forget the key's record at {@code l} (gone from the log); the key, when it has no other. */
    private void forgetRecord(String key, Location l) {
        Map<Integer, Location> byPartition = newest.get(key);
        if (byPartition != null && l.equals(byPartition.get(l.partition().partition()))) {
            byPartition.remove(l.partition().partition());
            if (byPartition.isEmpty()) {
                newest.remove(key);
            }
        }
    }

    /**
     * Fetch the record at {@code l}. Null when it is gone: compaction removed it, which it does only once a newer
     * record of the key exists, and a newer record would have been indexed by the scan, unless it was a tombstone
     * (then the key has no state).
     */
    private byte[] fetch(Consumer<byte[], byte[]> c, Location l, String key, long end, long deadline) {
        if (l.offset() >= end) {
            throw new LogReplacedException(l.partition()); // the partition no longer reaches it
        }
        c.pause(c.assignment());
        c.resume(List.of(l.partition()));
        c.seek(l.partition(), l.offset());
        try {
            while (System.nanoTime() <= deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    if (r.offset() < l.offset()) {
                        continue;
                    }
                    if (r.offset() == l.offset()) {
                        if (r.key() == null || !key.equals(new String(r.key(), StandardCharsets.UTF_8))) {
                            throw new LogReplacedException(l.partition());
                        }
                        return r.value();
                    }
                    forgetRecord(key, l); // gone
                    return null;
                }
                if (c.position(l.partition(), left(deadline)) > l.offset()) {
                    forgetRecord(key, l); // skipped (e.g. an aborted transaction's record): gone
                    return null;
                }
            }
            throw new TimeoutException("state topic " + topic + ": the state of " + key + " not fetched in time");
        } finally {
            c.pause(List.of(l.partition()));
        }
    }

    /**
     * Wake up a read in progress (it fails, keeping what it scanned), so that a read waiting for it (the
     * interceptor's last flush at {@code close()}) need not wait out its budget.
     */
    void abort() {
        Consumer<byte[], byte[]> c = consumer;
        if (c != null && lock.isLocked()) {
            woken = true; // the next read takes a new consumer: a wakeup that came after this read would be pending
            c.wakeup();
        }
    }

    /** Close the consumer (an in-progress read is woken up and fails); further reads throw. */
    @Override
    public void close() {
        Consumer<byte[], byte[]> c = consumer;
        if (c != null) {
            c.wakeup();
        }
        lock.lock();
        try {
            closed = true;
            closeConsumer();
        } finally {
            lock.unlock();
        }
    }

    private void closeConsumer() {
        Consumer<byte[], byte[]> c = consumer;
        consumer = null;
        if (c != null) {
            try {
                c.close(Duration.ofSeconds(5));
            } catch (RuntimeException e) {
                // closing: nothing left to do with it
            }
        }
    }

    private static Duration left(long deadlineNanos) {
        return Duration.ofNanos(Math.max(1_000_000, deadlineNanos - System.nanoTime()));
    }
}
