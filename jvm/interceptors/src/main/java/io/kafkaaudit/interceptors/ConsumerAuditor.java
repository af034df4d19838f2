package io.kafkaaudit.interceptors;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.function.LongSupplier;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;

/**
 * The application consumer tier {@code consumer:<group.id>} of one Java consumer: what
 * {@link AuditConsumerInterceptor} delegates to. The counts and their meaning are {@code AuditedConsumer}'s
 * (audit_consumer/audited.py): per (topic, partition, window, producer id) {@code received} (consumed),
 * {@code unique} (distinct (producer id, sequence) pairs), {@code duplicated} (further copies), {@code late}
 * (read after the window closed), {@code unaudited} (no stamp); stamps v1 and v2; a stamp that does not decode,
 * or a record without a timestamp, goes to the dead-letter topic (reason {@code bad_stamp} /
 * {@code no_timestamp}) and is not counted. Snapshots carry {@code read_offsets}: the partition's position.
 *
 * <p>State, as {@code AuditedConsumer}'s: each partition's counters and sequence sets go to the compacted state
 * topic ({@code kafka.audit.state.topic}, key {@code consumer:<group>|topic|partition}, the format of
 * {@code audit_consumer/state_codec.py}) after its snapshots. A partition this member has not counted before
 * is read back from there first and merged with what it counted meanwhile (its snapshots wait for that), so
 * a restarted member or the new owner after a rebalance continues the group's counts: what the group
 * re-reads after a crash is counted as duplicated, and what was consumed after the last state write (at most
 * one snapshot interval) counts as a first read. The interceptor sees no rebalance: a partition it stopped
 * receiving records from is idle, and before an idle partition's window closes on the wall clock the state
 * topic is read again; if another member wrote a state further on, the partition is forgotten here (its
 * counts are that member's now). Unlike {@code AuditedConsumer}, snapshots and state are not written in one
 * transaction, and the offsets are the application's to commit.
 */
final class ConsumerAuditor {
    /** {@code kafka-audit.dlq.component} of its dead letters. */
    static final String COMPONENT = "audit-consumer-interceptor";
    /** A partition without records for this long counts as caught up: its windows close on the wall clock, ms. */
    static final long IDLE_MS = 5_000;
    /** Counters of closed windows are kept this long after their end to count late messages, ms. */
    static final long LATE_RETENTION_MS = 3_600_000;
    /** The longest a flush waits to read the group's state topic to its end. */
    static final java.time.Duration STATE_READ_TIMEOUT = java.time.Duration.ofSeconds(30);

    /** A record the audit cannot count. */
    record DeadLetter(String topic, byte[] key, byte[] value, List<Header> headers) {}

    private final Object lock = new Object();
    private final AuditSettings settings;
    private final String group;
    private final String tier;
    private final String host = ProducerIdentity.hostName();
    private final ProducerAuditor.Sink sink;
    private final StateTopicReader.Source stateSource;
    private final LongSupplier clock;
    private final InterceptorMetrics metrics;
    private final AuditRecordSchema schema = AuditRecordSchema.get();
    private final Map<TopicPartition, ConsumerPartition> parts = new LinkedHashMap<>();
    private final Map<Long, String> v2Ids = new HashMap<>();
    private final List<DeadLetter> deadLetters = new ArrayList<>();
    /** {@link StampHeader#readFirstV2}'s (producer id bits, sequence) of the record being counted; under the lock. */
    private final long[] stampRead = new long[2];
    /** The last record's producer id and its text; starts as id 0's (a valid id), so the check has one branch. */
    private long lastId;
    private String lastIdText = AuditStamp.idText(0L);

    ConsumerAuditor(AuditSettings settings, String group, ProducerAuditor.Sink sink, StateTopicReader.Source stateSource,
            LongSupplier clock, InterceptorMetrics metrics) {
        this.settings = settings;
        this.group = group;
        this.tier = "consumer:" + group;
        this.sink = sink;
        this.stateSource = stateSource;
        this.clock = clock;
        this.metrics = metrics;
    }

    /** Count every record of a poll, partition by partition (one lookup of the partition's counts each). */
    <K, V> void onConsume(ConsumerRecords<K, V> records) {
        long now = clock.getAsLong();
        synchronized (lock) {
            for (TopicPartition tp : records.partitions()) {
                List<ConsumerRecord<K, V>> list = records.records(tp);
                int n = list.size();
                if (n == 0) {
                    continue;
                }
                ConsumerPartition st = partition(tp);
                for (int i = 0; i < n; i++) {
                    count(st, list.get(i), now);
                }
                st.nextOffset = list.get(n - 1).offset() + 1;
                st.lastRecordAtMs = now;
            }
        }
    }

    private <K, V> void count(ConsumerPartition st, ConsumerRecord<K, V> r, long now) {
        if (r.timestampType() == TimestampType.NO_TIMESTAMP_TYPE || r.timestamp() < 0) {
            deadLetter(r, "no_timestamp", "message has no timestamp");
            return;
        }
        Headers headers = r.headers();
        if (r.timestampType() == TimestampType.CREATE_TIME && StampHeader.readFirstV2(headers, stampRead)) {
            long ts = r.timestamp(); // the common case, read in place without a copy or an exception path
            st.observe(ts, v2Id(stampRead[0]), stampRead[1], Math.max(0, r.serializedValueSize()), now - ts);
            return;
        }
        Header stamp = StampHeader.find(headers);
        int kind = stamp == null ? StampHeader.NONE : StampHeader.kind(stamp);
        String pid = null;
        long seq = 0;
        if (stamp != null) {
            ByteBuffer v = StampHeader.value(stamp);
            int n = v == null ? 0 : v.remaining();
            try {
                if (kind == StampHeader.V2 && n > AuditStamp.ID_BYTES) {
                    int at = v.position();
                    seq = AuditStamp.decodeVarint(v, at + AuditStamp.ID_BYTES, n - AuditStamp.ID_BYTES);
                    pid = v2Id(AuditStamp.idBits(v, at));
                } else {
                    AuditStamp.Decoded d = AuditStamp.decode(kind == StampHeader.V2 ? AuditStamp.KEY : AuditStamp.KEY_V1,
                            StampHeader.copy(v));
                    pid = d.producerId();
                    seq = d.sequence();
                }
            } catch (MalformedStampException e) {
                metrics.malformedStamps.incrementAndGet();
                deadLetter(r, "bad_stamp", "audit stamp header of " + n + " bytes is malformed (" + e.reason() + ")");
                return;
            }
        }
        if (r.timestampType() == TimestampType.LOG_APPEND_TIME) {
            st.logAppendTime = true; // the broker replaced the CreateTime: freshness not measured
        }
        st.observe(r.timestamp(), pid, seq, Math.max(0, r.serializedValueSize()), now - r.timestamp());
    }

    /** @return the text form of a v2 producer id (its 8 bytes as a big-endian long), cached */
    private String v2Id(long id) {
        if (id == lastId) {
            return lastIdText; // consecutive records mostly come from one producer
        }
        String text = v2Ids.get(id);
        if (text == null) {
            text = AuditStamp.idText(id);
            if (v2Ids.size() < 100_000) {
                v2Ids.put(id, text);
            }
        }
        lastId = id;
        lastIdText = text;
        return text;
    }

    private ConsumerPartition partition(TopicPartition tp) {
        String topic = tp.topic();
        int p = tp.partition();
        ConsumerPartition st = parts.get(tp);
        if (st == null) {
            st = new ConsumerPartition(topic, p, settings.windowMs(), settings.graceMs());
            parts.put(tp, st);
        }
        return st;
    }

    private <K, V> void deadLetter(ConsumerRecord<K, V> r, String reason, String detail) {
        if (deadLetters.size() >= 10_000) {
            return; // counted in the metrics; the buffer stays bounded while the audit topic is unreachable
        }
        List<Header> h = List.of(
                header("kafka-audit.dlq.reason", reason),
                header("kafka-audit.dlq.detail", detail),
                header("kafka-audit.dlq.component", COMPONENT),
                header("kafka-audit.dlq.topic", r.topic()),
                header("kafka-audit.dlq.partition", Integer.toString(r.partition())),
                header("kafka-audit.dlq.offset", Long.toString(r.offset())));
        deadLetters.add(new DeadLetter(r.topic(), bytes(r.key()), bytes(r.value()), h));
    }

    private static Header header(String key, String value) {
        return new RecordHeader(key, value.getBytes(StandardCharsets.UTF_8));
    }

    /** @return a key or value as bytes when the client reads bytes or text (the original bytes), else null */
    private static byte[] bytes(Object o) {
        if (o instanceof byte[] b) {
            return b;
        }
        if (o instanceof String s) {
            return s.getBytes(StandardCharsets.UTF_8);
        }
        return null;
    }

    /**
     * Close the windows that can close, send the snapshots of every changed bucket and the pending dead
     * letters; never throws.
     *
     * @return snapshots handed to the sink
     */
    int flush() {
        return flush(STATE_READ_TIMEOUT);
    }

    /**
     * {@link #flush()}, waiting at most {@code stateReadBudget} for the group's state of partitions not read
     * back yet (those stay unreported if it cannot be read: counted in {@code stateReadFailures}).
     *
     * @return snapshots handed to the sink
     */
    int flush(java.time.Duration stateReadBudget) {
        long now = clock.getAsLong();
        Map<String, ConsumerPartition> toRead = new HashMap<>();
        synchronized (lock) {
            for (ConsumerPartition st : parts.values()) {
                boolean idle = now - st.lastRecordAtMs >= IDLE_MS;
                if (!st.stateLoaded || (idle && st.wouldClose(now))) {
                    toRead.put(stateKey(st), st);
                }
            }
        }
        Map<String, byte[]> states = null;
        if (!toRead.isEmpty()) {
            try {
                states = stateSource.read(toRead.keySet(), stateReadBudget);
            } catch (Exception e) {
                metrics.stateReadFailures.incrementAndGet();
                metrics.internalError("reading the state topic " + settings.stateTopic(), e);
            }
        }
        List<GenericRecord> records = new ArrayList<>();
        List<ConsumerPartition.Bucket> buckets = new ArrayList<>();
        List<ConsumerPartition> stateOf = new ArrayList<>();
        List<byte[]> stateValues = new ArrayList<>();
        List<DeadLetter> dead;
        synchronized (lock) {
            if (states != null) {
                apply(toRead, states);
            }
            for (ConsumerPartition st : parts.values()) {
                if (!st.stateLoaded) {
                    continue; // its snapshots wait until the group's state is merged
                }
                boolean idle = now - st.lastRecordAtMs >= IDLE_MS;
                boolean unchecked = states == null && toRead.containsKey(stateKey(st));
                List<ConsumerPartition.Key> closedNow = st.advance(idle && !unchecked ? now : null, LATE_RETENTION_MS);
                while (st.buckets() > settings.maxWindows() && st.dropOldest()) {
                    metrics.windowsDropped.incrementAndGet();
                }
                collect(st, st.open, false, closedNow, now, records, buckets);
                collect(st, st.closed, true, closedNow, now, records, buckets);
                if (st.stateDirty) {
                    try {
                        byte[] state = ConsumerStateCodec.encode(tier, st);
                        if (state.length <= AuditTopicWriter.MAX_STATE_BYTES) {
                            stateValues.add(state);
                            stateOf.add(st);
                        } else { // the state topic would refuse it: after a restart, what was read since counts afresh
                            metrics.internalError("writing the state of " + st.topic + "-" + st.partition,
                                    new IllegalStateException(state.length + " bytes, over the limit of "
                                            + AuditTopicWriter.MAX_STATE_BYTES));
                        }
                        st.stateDirty = false;
                    } catch (RuntimeException e) {
                        metrics.internalError("encoding the state", e);
                    }
                }
            }
            dead = new ArrayList<>(deadLetters);
            deadLetters.clear();
        }
        for (DeadLetter d : dead) {
            metrics.deadLetters.incrementAndGet();
            sink.send(settings.dlqTopic(), d.key(), d.value(), now, d.headers(), ok -> { });
        }
        for (int i = 0; i < records.size(); i++) {
            GenericRecord r = records.get(i);
            ConsumerPartition.Bucket b = buckets.get(i);
            byte[] value;
            try {
                value = schema.encode(r);
            } catch (RuntimeException e) {
                metrics.internalError("encoding a snapshot", e);
                continue;
            }
            String key = tier + "|" + group + "|" + (r.get("producer_id") == null ? "" : r.get("producer_id")) + "|"
                    + r.get("topic") + "|" + r.get("partition") + "|" + r.get("window_start_ms");
            sink.send(settings.auditTopic(), key.getBytes(StandardCharsets.UTF_8), value, now, List.of(), ok -> {
                if (!ok) {
                    synchronized (lock) {
                        b.dirty = true; // cumulative: sent again at the next flush
                    }
                }
            });
        }
        for (int i = 0; i < stateOf.size(); i++) {
            ConsumerPartition st = stateOf.get(i);
            sink.send(settings.stateTopic(), ConsumerStateCodec.key(tier, st.topic, st.partition), stateValues.get(i), now,
                    List.of(), ok -> {
                        if (!ok) {
                            synchronized (lock) {
                                st.stateDirty = true;
                            }
                        }
                    });
        }
        return records.size();
    }

    /** Merge the states read back; forget a partition another member has counted further. Under the lock. */
    private void apply(Map<String, ConsumerPartition> read, Map<String, byte[]> states) {
        for (Map.Entry<String, ConsumerPartition> e : read.entrySet()) {
            ConsumerPartition st = e.getValue();
            TopicPartition tp = new TopicPartition(st.topic, st.partition);
            if (parts.get(tp) != st) {
                continue;
            }
            byte[] v = states.get(e.getKey());
            ConsumerPartition loaded = null;
            if (v != null) {
                try {
                    loaded = ConsumerStateCodec.decode(v, settings.windowMs(), settings.graceMs());
                } catch (java.io.IOException | RuntimeException x) {
                    metrics.internalError("decoding the state of " + tp, x); // counted afresh
                }
            }
            if (!st.stateLoaded) {
                if (loaded != null) {
                    st.merge(loaded);
                } else {
                    st.stateLoaded = true;
                }
            } else if (loaded != null && loaded.nextOffset > st.nextOffset) {
                parts.remove(tp); // another member owns it now and has counted further
            }
        }
    }

    private String stateKey(ConsumerPartition st) {
        return tier + "|" + st.topic + "|" + st.partition;
    }

    private void collect(ConsumerPartition st, Map<ConsumerPartition.Key, ConsumerPartition.Bucket> table, boolean closedTable,
            List<ConsumerPartition.Key> closedNow, long now, List<GenericRecord> records, List<ConsumerPartition.Bucket> buckets) {
        for (Map.Entry<ConsumerPartition.Key, ConsumerPartition.Bucket> e : table.entrySet()) {
            ConsumerPartition.Bucket b = e.getValue();
            if (!b.dirty) {
                continue;
            }
            boolean isFinal = closedTable || closedNow.contains(e.getKey());
            records.add(record(st, e.getKey(), b, isFinal, now));
            buckets.add(b);
            b.dirty = false;
        }
    }

    /**
     * Build and encode one snapshot and one state of an empty partition, sent nowhere: loads and initializes
     * what they need (Avro's writers, the state schema, RoaringBitmap's serialization) while the client is being
     * constructed, not on the interceptor's thread in the application's first seconds of reading; never throws.
     */
    void warmUp() {
        try {
            ConsumerPartition st = new ConsumerPartition("kafka-audit.warm-up", 0, settings.windowMs(), settings.graceMs());
            st.observe(0, "~0000000000000000", 1, 0, 0);
            ConsumerPartition.Key k = st.open.keySet().iterator().next();
            schema.encode(record(st, k, st.open.get(k), false, clock.getAsLong()));
            ConsumerStateCodec.encode(tier, st);
        } catch (RuntimeException | LinkageError e) {
            metrics.internalError("warming up", e);
        }
    }

    private GenericRecord record(ConsumerPartition st, ConsumerPartition.Key k, ConsumerPartition.Bucket b, boolean isFinal,
            long now) {
        Schema s = schema.schema();
        String pid = k.producerId();
        GenericRecordBuilder out = schema.builder()
                .set("record_id", UUID.randomUUID().toString().replace("-", ""))
                .set("tier", tier)
                .set("source", group)
                .set("host", host)
                .set("producer_id", pid)
                .set("topic", settings.replication().sourceTopic(st.topic)) // a MirrorMaker 2 copy: its source
                .set("partition", st.partition)
                .set("window_start_ms", k.start())
                .set("window_end_ms", k.start() + st.windowMs)
                .set("emitted_at_ms", now)
                .set("final", isFinal)
                .set("received", b.received)
                .set("unique", b.unique(pid))
                .set("duplicated", b.duplicated)
                .set("late", b.late)
                .set("unaudited", pid == null ? b.received : 0L)
                .set("bytes", b.bytes)
                .set("latency_p50_ms", b.latency.percentile(0.5))
                .set("latency_p99_ms", b.latency.percentile(0.99))
                .set("latency_max_ms", b.latency.max());
        if (AuditRecordSchema.has(s, "freshness_counts")) {
            // empty: not measured
            out.set("freshness_counts", ConsumerStateCodec.longs(st.logAppendTime ? null : b.freshness));
        }
        Schema ro = schema.type("ReadOffset");
        if (ro != null && AuditRecordSchema.has(s, "read_offsets")) {
            GenericData.Array<GenericRecord> offsets = new GenericData.Array<>(1, s.getField("read_offsets").schema());
            if (st.nextOffset >= 0) {
                offsets.add(new GenericRecordBuilder(ro).set("partition", st.partition).set("offset", st.nextOffset).build());
            }
            out.set("read_offsets", offsets);
        }
        return out.build();
    }

    /** For tests: the partitions counted. */
    int partitions() {
        synchronized (lock) {
            return parts.size();
        }
    }
}
