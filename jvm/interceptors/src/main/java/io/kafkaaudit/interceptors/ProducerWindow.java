package io.kafkaaudit.interceptors;

import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

/**
 * What {@code onSend} writes into a window (under the send lock) and what both sides read: the first fields of
 * a {@link ProducerWindow}, laid out before its padding (a superclass's fields come first).
 */
abstract class ProducerWindowSendSide {
    final String topic;
    final long start;
    final long end;
    short slot;
    long sent;
    volatile long firstSequence = -1;
    long lastSequence = -1;
    long lastSendMs;
    boolean dirty;
    volatile ProducerWindow.State state = ProducerWindow.State.OPEN;
    /** Fills the last byte beside {@link #dirty}, which the layout would otherwise give a subclass's boolean. */
    byte fill;

    ProducerWindowSendSide(String topic, long start, long end, short slot) {
        this.topic = topic;
        this.start = start;
        this.end = end;
        this.slot = slot;
    }
}

/**
 * A cache line and more between what {@code onSend} and what {@code onAcknowledgement} write for every record:
 * on one line, the application's thread and the client's I/O thread took it from each other twice a record.
 */
abstract class ProducerWindowPadding extends ProducerWindowSendSide {
    long p0, p1, p2, p3, p4, p5, p6, p7, p8;

    ProducerWindowPadding(String topic, long start, long end, short slot) {
        super(topic, start, end, slot);
    }
}

/**
 * The audited producer's counts of one (topic, window): what {@code onSend} stamped into it
 * ({@link ProducerWindowSendSide}) and what the acknowledgements said, per partition (the fields here, written
 * under the acknowledgement lock). Guarded by its {@link ProducerAuditor}'s locks.
 */
final class ProducerWindow extends ProducerWindowPadding {
    /** Lifecycle: counting; final snapshot sent and awaiting the audit topic's acknowledgement; done. */
    enum State { OPEN, FINAL_PENDING, DONE }

    /** Delivery reports of one partition in the window. */
    static final class Partition {
        long acknowledged;
        long failed;
        final Map<String, Long> failedByError = new TreeMap<>();
        long lastOffset = -1;
    }

    long acknowledged;
    long failed;
    long bytes;
    /** Set under the acknowledgement lock when an acknowledgement changed the counts; the tick turns it into dirty. */
    boolean acksChanged;
    final Map<Integer, Partition> partitions = new HashMap<>();
    final LatencyHistogram latency = new LatencyHistogram();
    /** {@link #partitions} by partition id + 1 (0: unassigned, -1), for ids below {@link #DIRECT_PARTITIONS}. */
    private Partition[] direct = new Partition[8];

    /** Partition ids (+ 1) below this are found by index on the acknowledgement path, without hashing. */
    static final int DIRECT_PARTITIONS = 4096;

    ProducerWindow(String topic, long start, long windowMs, short slot) {
        super(topic, start, start + windowMs, slot);
    }

    /** @return the counts of a partition (-1: the message failed before it was assigned one) */
    Partition partition(int p) {
        int i = p + 1;
        Partition[] d = direct;
        if (i >= 0 && i < d.length && d[i] != null) {
            return d[i];
        }
        Partition out = partitions.computeIfAbsent(p, k -> new Partition());
        if (i >= 0 && i < DIRECT_PARTITIONS) {
            if (i >= d.length) {
                d = java.util.Arrays.copyOf(d, Math.min(DIRECT_PARTITIONS, Math.max(i + 1, d.length * 2)));
                direct = d;
            }
            d[i] = out;
        }
        return out;
    }

    /** @return whether every message stamped into the window has an acknowledgement or a failure */
    boolean accounted() {
        return acknowledged + failed >= sent;
    }
}
