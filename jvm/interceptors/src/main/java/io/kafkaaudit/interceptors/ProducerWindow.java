package io.kafkaaudit.interceptors;

import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

/**
 * The audited producer's counts of one (topic, window): what {@code onSend} stamped into it and what the
 * acknowledgements said, per partition. Guarded by its {@link ProducerAuditor}'s lock.
 */
final class ProducerWindow {
    /** Lifecycle: counting; final snapshot sent and awaiting the audit topic's acknowledgement; done. */
    enum State { OPEN, FINAL_PENDING, DONE }

    /** Delivery reports of one partition in the window. */
    static final class Partition {
        long acknowledged;
        long failed;
        final Map<String, Long> failedByError = new TreeMap<>();
        long lastOffset = -1;
    }

    final String topic;
    final long start;
    final long end;
    short slot;
    long sent;
    long acknowledged;
    long failed;
    long bytes;
    volatile long firstSequence = -1;
    long lastSequence = -1;
    long lastSendMs;
    boolean dirty;
    /** Set under the acknowledgement lock when an acknowledgement changed the counts; the tick turns it into dirty. */
    boolean acksChanged;
    volatile State state = State.OPEN;
    final Map<Integer, Partition> partitions = new HashMap<>();
    final LatencyHistogram latency = new LatencyHistogram();
    private Partition lastPartition;
    private int lastPartitionId = Integer.MIN_VALUE;

    ProducerWindow(String topic, long start, long windowMs, short slot) {
        this.topic = topic;
        this.start = start;
        this.end = start + windowMs;
        this.slot = slot;
    }

    /** @return the counts of a partition (-1: the message failed before it was assigned one) */
    Partition partition(int p) {
        if (p == lastPartitionId) {
            return lastPartition;
        }
        Partition out = partitions.computeIfAbsent(p, k -> new Partition());
        lastPartition = out;
        lastPartitionId = p;
        return out;
    }

    /** @return whether every message stamped into the window has an acknowledgement or a failure */
    boolean accounted() {
        return acknowledged + failed >= sent;
    }
}
