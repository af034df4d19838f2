package io.kafkaaudit.interceptors;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.function.LongSupplier;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.protocol.Errors;

/**
 * The producer tier's audit of one Java producer instance: what {@link AuditProducerInterceptor} delegates to.
 *
 * <p>Per (topic, event-time window of the record's CreateTime) it counts sent (stamped in {@code onSend}),
 * acknowledged and failed (from {@code onAcknowledgement}, per partition with the error names and the highest
 * acknowledged offset), bytes (serialized value bytes of the reported messages) and the acknowledgement
 * latency (acknowledgement time minus CreateTime). An acknowledgement finds its window through the stamp in
 * the record's headers: the sequence indexes a ring of window slots, 2 bytes a record in flight. The ring
 * starts at {@value #INITIAL_RING} slots and doubles, up to {@code kafka.audit.inflight.slots}, whenever the
 * next block of sends would overwrite the slot of a window not yet accounted for, so its memory follows the
 * producer's records per window rather than a fixed worst case (many producers in one JVM, e.g. Kafka Connect
 * tasks).
 *
 * <p>Snapshots are cumulative (invariant 2): every {@code snapshot.interval.ms} for the windows that changed,
 * and one final snapshot per window once its end + grace has passed and every message of it is acknowledged
 * or failed ({@code accounted}), or at the latest at its end + {@code delivery.timeout.ms} + the delivery
 * margin (nothing can be acknowledged later; then not accounted), and for every window at {@link #closeAll}.
 * The Java client has no view of its TCP connections: {@code in_flight_bytes} is null.
 *
 * <p>Thread safety: {@code onSend} (application threads) holds the send lock, {@code onAcknowledgement} (the
 * client's I/O thread) the acknowledgement lock, each for a few field updates, so the application and the I/O
 * thread never wait for each other; {@link #tick} (the interceptor's timer) takes both. The acknowledgement
 * finds its window through the ring without the send lock: the client hands a record from {@code send()} to
 * its I/O thread through synchronized structures, so the ring slot written before is visible.
 */
final class ProducerAuditor {
    /** The snapshots' library name. */
    static final String LIBRARY = "kafka-audit-java";
    /** The interceptors' version. */
    static final String VERSION = "0.1.0";

    /** Where snapshots go (the audit topic's producer, or a test's list). */
    interface Sink {
        boolean send(String topic, byte[] key, byte[] value, long timestampMs, Iterable<Header> headers,
                AuditTopicWriter.Outcome outcome);

        void flush(Duration timeout);

        void close(Duration timeout);
    }

    private final Object lock = new PaddedLock(); // the send lock
    private final Object ackLock = new PaddedLock();

    /**
     * A lock object followed by a cache line of its own: the two locks' headers, which taking a lock writes, were
     * 16 bytes apart, so the application's thread and the I/O thread took that line from each other for every
     * record.
     */
    private static final class PaddedLock {
        long p0, p1, p2, p3, p4, p5, p6, p7, p8;
    }

    private final AuditSettings settings;
    private final ProducerIdentity identity;
    private final ProducerSettingsReport config;
    private final Sink sink;
    private final LongSupplier clock;
    private final InterceptorMetrics metrics;
    private final AuditRecordSchema schema = AuditRecordSchema.get();
    private final byte[] id = AuditStamp.newProducerId();
    /** {@link #id} as a big-endian long. */
    private final long idBits = AuditStamp.idBits(id, 0);
    private final String idText = AuditStamp.idText(id, 0);
    private final Map<String, Map<Long, ProducerWindow>> windows = new HashMap<>();
    /** Windows closed with an acknowledged final snapshot, kept to continue their counts if a record still comes. */
    private final Map<String, ProducerWindow> retired = new HashMap<>();
    private final ProducerWindow[] bySlot;
    private final ArrayDeque<Short> freeSlots = new ArrayDeque<>();
    /** The ring's first size, slots. */
    static final int INITIAL_RING = 1 << 16;
    /** Sends between two checks of whether the ring must grow (the smallest {@code kafka.audit.inflight.slots}). */
    static final int RING_BLOCK = 1024;
    private volatile short[] ring;
    private int open;
    private long lastSequence;
    private ProducerWindow last;
    private long nextSnapshotMs;
    private Double lastRttMs;

    ProducerAuditor(AuditSettings settings, ProducerIdentity identity, ProducerSettingsReport config, Sink sink,
            LongSupplier clock, InterceptorMetrics metrics) {
        this(settings, identity, config, sink, clock, metrics, INITIAL_RING);
    }

    /** As above, with the sequence ring starting at {@code initialRing} slots (a power of two; the JIT warm-up). */
    ProducerAuditor(AuditSettings settings, ProducerIdentity identity, ProducerSettingsReport config, Sink sink,
            LongSupplier clock, InterceptorMetrics metrics, int initialRing) {
        this.settings = settings;
        this.identity = identity;
        this.config = config;
        this.sink = sink;
        this.clock = clock;
        this.metrics = metrics;
        this.bySlot = new ProducerWindow[settings.maxWindows() + 1];
        for (int s = 1; s <= settings.maxWindows(); s++) {
            freeSlots.add((short) s);
        }
        this.ring = new short[Math.min(initialRing, settings.inflightSlots())];
        this.nextSnapshotMs = clock.getAsLong() + settings.snapshotIntervalMs();
    }

    /** @return the instance's producer id, text form ({@code ~} + 16 hex digits) */
    String producerId() {
        return idText;
    }

    /**
     * Count one record handed to {@code send()} and return its stamp value (8 id bytes + varint sequence).
     *
     * @param topic the record's topic
     * @param timestampMs its CreateTime, ms since the epoch UTC
     */
    byte[] onSend(String topic, long timestampMs) {
        long start = timestampMs - Math.floorMod(timestampMs, settings.windowMs());
        long seq;
        synchronized (lock) {
            seq = ++lastSequence;
            ProducerWindow w = last;
            if (w == null || w.start != start || w.state != ProducerWindow.State.OPEN || !w.topic.equals(topic)) {
                w = window(topic, start);
                last = w;
            }
            w.sent++;
            if (w.firstSequence < 0) {
                w.firstSequence = seq;
            }
            w.lastSequence = seq;
            w.lastSendMs = timestampMs;
            w.dirty = true;
            short[] r = ring;
            int i = (int) seq & (r.length - 1);
            if ((i & (RING_BLOCK - 1)) == 0 && r.length < settings.inflightSlots() && blockInFlight(r, i)) {
                r = grow(r, seq);
                i = (int) seq & (r.length - 1);
            }
            r[i] = w.slot;
        }
        return AuditStamp.encodeV2(id, seq);
    }

    /**
     * Whether the block of {@link #RING_BLOCK} slots from slot {@code i}, which the next sends overwrite, holds a
     * record whose window is not yet accounted for (its first or its last slot; a racy read of the window's
     * acknowledgement counts, a hint to grow). Asked once a block, before its first slot is reused: asking for every
     * record loaded into the application's thread, for each one, counts the I/O thread writes for each
     * acknowledgement (the librdkafka plugin measured +0.07-0.10 us a 100-byte message for it). Under the send lock.
     */
    private boolean blockInFlight(short[] r, int i) {
        return inFlight(r[i]) || inFlight(r[(i + RING_BLOCK - 1) & (r.length - 1)]);
    }

    private boolean inFlight(short slot) {
        ProducerWindow w = slot == 0 ? null : bySlot[slot];
        return w != null && !w.accounted();
    }

    /** Double the ring, keeping the slots of the sequences before {@code seq} it still holds. Under the send lock. */
    private short[] grow(short[] r, long seq) {
        short[] n = new short[r.length * 2];
        for (long s = Math.max(1, seq - r.length); s < seq; s++) { // seq - length: the slot seq would overwrite
            n[(int) s & (n.length - 1)] = r[(int) s & (r.length - 1)];
        }
        ring = n;
        return n;
    }

    /** @return the ring's size, slots (tests) */
    int ringSlots() {
        return ring.length;
    }

    private ProducerWindow window(String topic, long start) {
        Map<Long, ProducerWindow> byStart = windows.computeIfAbsent(topic, t -> new HashMap<>());
        ProducerWindow w = byStart.get(start);
        if (w != null) {
            if (w.state == ProducerWindow.State.FINAL_PENDING) {
                w.state = ProducerWindow.State.OPEN; // a record with an old timestamp: the window reopens
            }
            return w;
        }
        if (freeSlots.isEmpty()) {
            dropOldest();
        }
        w = retired.remove(topic + "|" + start);
        if (w != null) { // a record with a timestamp in a closed window (e.g. a copy keeping its source's
            w.slot = freeSlots.poll(); // CreateTime): its counts continue, never restart from 0 under the same key
            w.state = ProducerWindow.State.OPEN;
            w.dirty = true;
            bySlot[w.slot] = w;
            byStart.put(start, w);
            open++;
            return w;
        }
        w = new ProducerWindow(topic, start, settings.windowMs(), freeSlots.poll());
        bySlot[w.slot] = w;
        byStart.put(start, w);
        open++;
        return w;
    }

    private void dropOldest() {
        ProducerWindow oldest = null;
        for (Map<Long, ProducerWindow> m : windows.values()) {
            for (ProducerWindow w : m.values()) {
                if (oldest == null || w.start < oldest.start) {
                    oldest = w;
                }
            }
        }
        if (oldest != null) {
            remove(oldest);
            metrics.windowsDropped.incrementAndGet();
        }
    }

    private void remove(ProducerWindow w) {
        Map<Long, ProducerWindow> m = windows.get(w.topic);
        if (m != null && m.get(w.start) == w) {
            m.remove(w.start);
            if (m.isEmpty()) {
                windows.remove(w.topic);
            }
        }
        if (bySlot[w.slot] == w) {
            bySlot[w.slot] = null;
            freeSlots.add(w.slot);
        }
        w.state = ProducerWindow.State.DONE;
        if (last == w) {
            last = null;
        }
        open--;
    }

    /**
     * Count one acknowledgement or failure.
     *
     * @param md the record's metadata (partition -1 and no offset or timestamp for a failure)
     * @param error null for success
     * @param headers the record's headers, with the stamp {@link #onSend} made first
     */
    void onAcknowledgement(RecordMetadata md, Exception error, Headers headers) {
        long seq = sequenceOf(headers);
        long now = clock.getAsLong();
        String errorName = error == null ? null : errorName(error);
        short[] r = ring;
        ProducerWindow w = seq <= 0 || seq <= lastSequence - r.length ? null : bySlot[r[(int) seq & (r.length - 1)]];
        synchronized (ackLock) {
            if (w == null || w.state == ProducerWindow.State.DONE || seq < w.firstSequence) {
                metrics.unattributedAcknowledgements.incrementAndGet();
                return;
            }
            count(w, md, error, errorName, now);
        }
    }

    /**
     * Count an acknowledgement that carries no headers: kafka-clients before 4.0 call only
     * {@code onAcknowledgement(metadata, exception)}. A success goes to the window of its timestamp (the
     * CreateTime the broker confirms) if that window still waits for acknowledgements; anything else (a failure,
     * which carries no timestamp, or a LogAppendTime topic) to the topic's oldest window still waiting, as
     * records expire in the order they were sent. Exact per topic, approximate per window under failures.
     */
    void onAcknowledgementWithoutStamp(RecordMetadata md, Exception error) {
        long now = clock.getAsLong();
        String errorName = error == null ? null : errorName(error);
        synchronized (lock) {
            synchronized (ackLock) {
                Map<Long, ProducerWindow> m = md == null ? null : windows.get(md.topic());
                if (m == null) {
                    metrics.unattributedAcknowledgements.incrementAndGet();
                    return;
                }
                ProducerWindow w = null;
                if (error == null && md.hasTimestamp()) {
                    long ts = md.timestamp();
                    w = m.get(ts - Math.floorMod(ts, settings.windowMs()));
                }
                if (w == null || w.accounted()) {
                    w = null;
                    for (ProducerWindow c : m.values()) {
                        if (!c.accounted() && (w == null || c.start < w.start)) {
                            w = c;
                        }
                    }
                }
                if (w == null) {
                    metrics.unattributedAcknowledgements.incrementAndGet();
                    return;
                }
                count(w, md, error, errorName, now);
            }
        }
    }

    /** Count one report in window {@code w}; the caller holds the acknowledgement lock. */
    private static void count(ProducerWindow w, RecordMetadata md, Exception error, String errorName, long now) {
        int p = md == null ? -1 : md.partition();
        ProducerWindow.Partition part = w.partition(p);
        if (error == null) {
            w.acknowledged++;
            part.acknowledged++;
            if (md.hasOffset() && md.offset() > part.lastOffset) {
                part.lastOffset = md.offset();
            }
            if (md.hasTimestamp()) {
                w.latency.add(now - md.timestamp());
            }
        } else {
            w.failed++;
            part.failed++;
            part.failedByError.merge(errorName, 1L, Long::sum);
        }
        if (md != null && md.serializedValueSize() > 0) {
            w.bytes += md.serializedValueSize();
        }
        w.acksChanged = true;
    }

    /**
     * @return the sequence of this instance's stamp in the headers (the first stamp header: {@link #onSend} puts
     *     it first), or -1
     */
    long sequenceOf(Headers headers) {
        if (headers == null) {
            return -1;
        }
        java.util.List<Header> list = StampHeader.list(headers); // by index: no iterator per acknowledgement
        if (list != null) {
            for (int i = 0, n = list.size(); i < n; i++) {
                Header h = list.get(i);
                if (AuditStamp.KEY.equals(h.key())) {
                    return ownSequence(h.value());
                }
            }
            return -1;
        }
        for (Header h : headers) {
            if (AuditStamp.KEY.equals(h.key())) {
                return ownSequence(h.value());
            }
        }
        return -1;
    }

    /** @return the sequence of a v2 stamp value with this instance's id, else -1 */
    private long ownSequence(byte[] v) {
        if (v == null || v.length <= AuditStamp.ID_BYTES || AuditStamp.idBits(v, 0) != idBits) {
            return -1;
        }
        return AuditStamp.decodeVarintOrMinus(v, AuditStamp.ID_BYTES, v.length - AuditStamp.ID_BYTES);
    }

    /** @return the Kafka error name of a send failure ({@code Errors.name()}), else the exception's class name */
    static String errorName(Exception error) {
        try {
            Errors e = Errors.forException(error);
            if (e != Errors.UNKNOWN_SERVER_ERROR || error instanceof org.apache.kafka.common.errors.UnknownServerException) {
                return e.name();
            }
        } catch (RuntimeException | LinkageError ignored) {
            // an older or newer client without this mapping: the class name below
        }
        return error.getClass().getSimpleName();
    }

    /**
     * Send the snapshots due at {@code now}: changed windows every snapshot interval, finals of the windows
     * that can close (see the class comment); never throws.
     *
     * @param closeAll close every window (the client is closing)
     * @return the number of snapshots handed to the sink
     */
    int tick(boolean closeAll) {
        long now = clock.getAsLong();
        List<ProducerWindow> emit = new ArrayList<>();
        List<GenericRecord> records = new ArrayList<>();
        GenericRecord network = network();
        synchronized (lock) {
          synchronized (ackLock) {
            boolean periodic = now >= nextSnapshotMs;
            if (periodic) {
                nextSnapshotMs = now + settings.snapshotIntervalMs();
            }
            for (Map<Long, ProducerWindow> m : windows.values()) {
                for (ProducerWindow w : m.values()) {
                    if (w.acksChanged) {
                        w.acksChanged = false;
                        w.dirty = true;
                        if (w.state == ProducerWindow.State.FINAL_PENDING) {
                            w.state = ProducerWindow.State.OPEN; // its final snapshot is outdated: a new one follows
                        }
                    }
                    if (w.state != ProducerWindow.State.OPEN) {
                        continue;
                    }
                    boolean accounted = w.accounted();
                    boolean closing = closeAll || (now >= w.end + settings.graceMs()
                            && (accounted || now >= w.end + config.deliveryTimeoutMs() + settings.deliveryMarginMs()));
                    if (!(closing || (periodic && w.dirty))) {
                        continue;
                    }
                    records.add(record(w, now, closing, accounted && config.acksProveDelivery(), network));
                    w.dirty = false;
                    if (closing) {
                        w.state = ProducerWindow.State.FINAL_PENDING;
                    }
                    emit.add(w);
                }
            }
          }
        }
        for (int i = 0; i < emit.size(); i++) {
            ProducerWindow w = emit.get(i);
            GenericRecord r = records.get(i);
            boolean isFinal = (Boolean) r.get("final");
            byte[] value;
            try {
                value = schema.encode(r);
            } catch (RuntimeException e) {
                metrics.internalError("encoding a snapshot", e);
                continue;
            }
            byte[] key = key(w).getBytes(StandardCharsets.UTF_8);
            sink.send(settings.auditTopic(), key, value, now, List.of(), ok -> done(w, isFinal, ok));
        }
        return emit.size();
    }

    private void done(ProducerWindow w, boolean isFinal, boolean ok) {
        synchronized (lock) {
          synchronized (ackLock) {
            if (!ok) {
                w.dirty = true; // cumulative: the next snapshot repairs it
                if (w.state == ProducerWindow.State.FINAL_PENDING) {
                    w.state = ProducerWindow.State.OPEN; // the final is sent again at the next tick
                }
            } else if (isFinal && w.state == ProducerWindow.State.FINAL_PENDING && !w.acksChanged) {
                remove(w);
                retire(w);
            }
          }
        }
    }

    /** Keep a closed window's counts for late records, at most max.windows of them, for an hour after their end. */
    private void retire(ProducerWindow w) {
        retired.put(w.topic + "|" + w.start, w);
        long horizon = clock.getAsLong() - RETIRED_RETENTION_MS;
        retired.values().removeIf(r -> r.end < horizon);
        while (retired.size() > settings.maxWindows()) {
            String oldest = null;
            long start = Long.MAX_VALUE;
            for (Map.Entry<String, ProducerWindow> e : retired.entrySet()) {
                if (e.getValue().start < start) {
                    start = e.getValue().start;
                    oldest = e.getKey();
                }
            }
            retired.remove(oldest);
        }
    }

    /** How long after its end a closed window's counts are kept for late records, ms (the audit consumer's late retention). */
    static final long RETIRED_RETENTION_MS = 3_600_000;

    /** Close every window: finals for all, then wait for the audit topic at most {@code timeout}. */
    void closeAll(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        tick(true);
        sink.flush(Duration.ofNanos(Math.max(0, deadline - System.nanoTime())));
        if (openWindows() > 0 && System.nanoTime() < deadline) { // a final failed: once more
            tick(true);
            sink.flush(Duration.ofNanos(Math.max(0, deadline - System.nanoTime())));
        }
    }

    /** @return windows not yet closed with an acknowledged final snapshot */
    int openWindows() {
        synchronized (lock) {
            return open;
        }
    }

    private String key(ProducerWindow w) {
        return "producer|" + identity.clientId() + "|" + idText + "|" + w.topic + "|-1|" + w.start;
    }

    /** @return the NetworkStats record of the host producer's request latency now, or null when unknown */
    private GenericRecord network() {
        Double rtt = ClientNetworkMetrics.requestLatencyAvgMs(identity.clientId());
        if (rtt == null) {
            rtt = lastRttMs; // the client closes its metrics before its interceptors: the last value seen
        } else {
            lastRttMs = rtt;
        }
        Schema ns = schema.type("NetworkStats");
        if (rtt == null || ns == null) {
            return null;
        }
        GenericRecordBuilder b = new GenericRecordBuilder(ns);
        for (Schema.Field f : ns.getFields()) {
            if (!f.hasDefaultValue()) {
                return null; // a later schema with a field this version cannot fill
            }
        }
        return b.set("rtt_avg_ms", rtt).build();
    }

    /**
     * Build and encode one snapshot of an empty window, sent nowhere: loads and initializes what a snapshot
     * needs (Avro's writer, UUID's random source) while the client is being constructed, not on the timer
     * thread in the middle of the application's first seconds of sending; never throws.
     */
    void warmUp() {
        try {
            ProducerWindow w = new ProducerWindow("kafka-audit.warm-up", 0, settings.windowMs(), (short) 0);
            schema.encode(record(w, clock.getAsLong(), false, false, null));
        } catch (RuntimeException | LinkageError e) {
            metrics.internalError("warming up", e);
        }
    }

    private GenericRecord record(ProducerWindow w, long now, boolean isFinal, boolean accounted, GenericRecord network) {
        Schema s = schema.schema();
        GenericRecordBuilder b = schema.builder()
                .set("record_id", UUID.randomUUID().toString().replace("-", ""))
                .set("tier", "producer")
                .set("source", identity.clientId())
                .set("host", identity.host())
                .set("producer_id", idText)
                .set("topic", w.topic)
                .set("partition", -1)
                .set("window_start_ms", w.start)
                .set("window_end_ms", w.end)
                .set("emitted_at_ms", now)
                .set("final", isFinal)
                .set("sent", w.sent)
                .set("acknowledged", Math.min(w.acknowledged, w.sent - w.failed))
                .set("failed", w.failed)
                .set("first_sequence", w.firstSequence < 0 ? null : w.firstSequence)
                .set("last_sequence", w.lastSequence < 0 ? null : w.lastSequence)
                .set("bytes", w.bytes)
                .set("in_flight_bytes", null)
                .set("latency_p50_ms", w.latency.percentile(0.5))
                .set("latency_p99_ms", w.latency.percentile(0.99))
                .set("latency_max_ms", w.latency.max())
                .set("producer_config", config.record(schema))
                .set("network", network)
                .set("partitions", partitions(w));
        AuditRecordSchema.set(b, s, "producer_identity", identity.record(schema));
        AuditRecordSchema.set(b, s, "accounted", accounted);
        return b.build();
    }

    private List<GenericRecord> partitions(ProducerWindow w) {
        Schema ps = schema.type("PartitionDelivery");
        List<GenericRecord> out = new ArrayList<>();
        List<Integer> ids = new ArrayList<>(w.partitions.keySet());
        ids.sort(null);
        for (int p : ids) {
            ProducerWindow.Partition part = w.partitions.get(p);
            GenericRecordBuilder b = new GenericRecordBuilder(ps)
                    .set("partition", p)
                    .set("acknowledged", part.acknowledged)
                    .set("failed", part.failed)
                    .set("failed_by_error", new HashMap<>(part.failedByError))
                    .set("leader", null)
                    .set("leaders", new GenericData.Array<Integer>(0, ps.getField("leaders").schema()));
            AuditRecordSchema.set(b, ps, "last_offset", part.lastOffset < 0 ? null : part.lastOffset);
            out.add(b.build());
        }
        return out;
    }

    /** For tests: the windows' (topic, start) still open. */
    List<String> windowKeys() {
        synchronized (lock) {
            List<String> out = new ArrayList<>();
            for (Map<Long, ProducerWindow> m : windows.values()) {
                for (Iterator<ProducerWindow> it = m.values().iterator(); it.hasNext();) {
                    ProducerWindow w = it.next();
                    out.add(w.topic + "@" + w.start);
                }
            }
            return out;
        }
    }
}
