package io.kafkaaudit.interceptors;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.roaringbitmap.RoaringBitmap;
import org.roaringbitmap.longlong.Roaring64Bitmap;

/**
 * The application consumer tier's counts of one (topic, partition), as {@code audit_consumer/counts.py}'s
 * {@code PartitionCounts}: per (window, producer id) a bucket of counters and the set of sequences seen (a
 * 64-bit Roaring bitmap); a second copy of (producer id, sequence) is a duplicate. A window closes when the
 * partition's watermark (largest CreateTime seen; the wall clock once the partition is idle) passes its end
 * + grace; then its sequence set is dropped and its counters kept to count late messages. Guarded by the
 * {@link ConsumerAuditor}'s lock.
 */
final class ConsumerPartition {
    /** (window start, producer id text or null for unaudited messages). */
    record Key(long start, String producerId) {}

    /** Counters of one (window, producer id). */
    static final class Bucket {
        long received;
        long duplicated;
        long unique;
        long bytes;
        long late;
        boolean dirty = true;
        /** Sequences below 2^32 (a 32-bit Roaring bitmap of the unsigned int); null once the window closed. */
        RoaringBitmap sequences = new RoaringBitmap();
        /** Sequences from 2^32 on (rare: 4 billion messages of one producer instance), created when needed. */
        Roaring64Bitmap large;
        /**
         * The newest run of consecutive sequences, [runStart, runEnd], not yet in the bitmaps (-1: none); every
         * sequence in the bitmaps is below runStart. A producer's sequences reach one partition in increasing
         * runs (a batch each), so most sequences extend the run with two comparisons, and the bitmaps take a
         * whole run at once ({@link #settle}) instead of one binary search per sequence.
         */
        private long runStart = -1;
        private long runEnd = -1;
        final LatencyHistogram latency = new LatencyHistogram();
        /** Freshness counts ({@link FreshnessHistogram}) of the messages held, late ones included; null: not measured. */
        long[] freshness = new long[FreshnessHistogram.N_COUNTS];

        long unique(String producerId) {
            if (producerId == null) {
                return 0;
            }
            if (sequences == null) {
                return unique;
            }
            long run = runStart < 0 ? 0 : runEnd - runStart + 1;
            return sequences.getLongCardinality() + (large == null ? 0 : large.getLongCardinality()) + run;
        }

        /** @return whether the sequence was new (added), false for a duplicate */
        boolean add(long seq) {
            if (runStart >= 0) {
                if (seq == runEnd + 1) {
                    runEnd = seq;
                    return true;
                }
                if (seq >= runStart && seq <= runEnd) {
                    return false;
                }
                if (seq > runEnd) {
                    settle();
                    runStart = seq;
                    runEnd = seq;
                    return true;
                }
                return addToBitmaps(seq); // below the run: the bitmaps hold everything before it
            }
            if (seq > largestInBitmaps()) {
                runStart = seq;
                runEnd = seq;
                return true;
            }
            return addToBitmaps(seq);
        }

        /** Move the run into the bitmaps: call before reading {@link #sequences} or {@link #large} directly. */
        void settle() {
            if (runStart < 0) {
                return;
            }
            long limit = 1L << 32;
            if (runStart < limit) {
                sequences.add(runStart, Math.min(runEnd + 1, limit));
            }
            if (runEnd >= limit) {
                if (large == null) {
                    large = new Roaring64Bitmap();
                }
                for (long v = Math.max(runStart, limit); v <= runEnd; v++) {
                    large.addLong(v); // Roaring64Bitmap.addRange was 100x slower on short runs (RoaringBitmap 1.3.0)
                }
            }
            runStart = -1;
            runEnd = -1;
        }

        /** Forget the sequences once the window closed (its {@link #unique} count is kept). */
        void dropSequences() {
            sequences = null;
            large = null;
            runStart = -1;
            runEnd = -1;
        }

        private long largestInBitmaps() {
            if (large != null && !large.isEmpty()) {
                return large.last();
            }
            return sequences.isEmpty() ? -1 : Integer.toUnsignedLong(sequences.last());
        }

        private boolean addToBitmaps(long seq) {
            if ((seq >>> 32) == 0) {
                return sequences.checkedAdd((int) seq);
            }
            if (large == null) {
                large = new Roaring64Bitmap();
            }
            if (large.contains(seq)) {
                return false;
            }
            large.addLong(seq);
            return true;
        }
    }

    final String topic;
    final int partition;
    final long windowMs;
    final long graceMs;
    long nextOffset = -1;
    long watermarkMs = -1;
    long closedHorizonMs = -1;
    long lastRecordAtMs;
    /**
     * A record of the partition had a LogAppendTime timestamp (the topic's {@code message.timestamp.type}): the
     * broker replaced its CreateTime, so freshness is not measured here (snapshots carry an empty histogram).
     */
    boolean logAppendTime;
    /** Whether the state the group wrote before (a previous member) has been read back and merged. */
    boolean stateLoaded;
    /** Whether the counts changed since the state was last written. */
    boolean stateDirty;
    final Map<Key, Bucket> open = new HashMap<>();
    final Map<Key, Bucket> closed = new HashMap<>();
    private Bucket last;
    private String lastPid;
    private long lastLo;
    private long lastHi;
    /** The last record's freshness entry and its range (lo, hi], ms; empty at first. */
    private int freshEntry;
    private long freshLo = 0;
    private long freshHi = -1;

    ConsumerPartition(String topic, int partition, long windowMs, long graceMs) {
        this.topic = topic;
        this.partition = partition;
        this.windowMs = windowMs;
        this.graceMs = graceMs;
    }

    /** @return the smallest window start still open (-1: none closed yet) */
    long firstOpenStart() {
        long h = closedHorizonMs;
        return h >= 0 ? h - Math.floorMod(h, windowMs) : -1;
    }

    /**
     * Count one message ({@code PartitionCounts.observe}).
     *
     * @param ts CreateTime, ms
     * @param pid producer id text, null for an unaudited message
     * @param seq sequence (ignored when unaudited)
     * @param size value bytes
     * @param latencyMs consume time - CreateTime, ms
     */
    void observe(long ts, String pid, long seq, long size, long latencyMs) {
        if (ts > watermarkMs) {
            watermarkMs = ts;
        }
        Bucket b;
        if (last != null && ts >= lastLo && ts < lastHi && Objects.equals(pid, lastPid)) {
            b = last;
        } else {
            long start = ts - Math.floorMod(ts, windowMs);
            if (start < firstOpenStart()) {
                Bucket c = closed.computeIfAbsent(new Key(start, pid), k -> {
                    Bucket n = new Bucket();
                    n.sequences = null;
                    return n;
                });
                c.late++;
                if (c.freshness != null) { // held, however late: it counts in the tier's freshness
                    c.freshness[FreshnessHistogram.bucketOf(latencyMs)]++;
                }
                c.dirty = true;
                stateDirty = true;
                return;
            }
            b = open.computeIfAbsent(new Key(start, pid), k -> new Bucket());
            last = b;
            lastPid = pid;
            lastLo = start;
            lastHi = start + windowMs;
        }
        stateDirty = true;
        b.received++;
        b.bytes += size;
        b.latency.add(latencyMs);
        if (b.freshness != null) {
            if (latencyMs <= freshLo || latencyMs > freshHi) { // consecutive records are mostly as fresh
                freshEntry = FreshnessHistogram.bucketOf(latencyMs);
                freshLo = FreshnessHistogram.lowerExclusive(freshEntry);
                freshHi = FreshnessHistogram.upperInclusive(freshEntry);
            }
            b.freshness[freshEntry]++;
        }
        b.dirty = true;
        if (pid != null && !b.add(seq)) {
            b.duplicated++;
        }
    }

    /**
     * Close the open windows whose end + grace is at or before the watermark; drop closed counters older than
     * {@code lateRetentionMs} after their end.
     *
     * @param nowMs the wall clock if the partition is idle (caught up), else null
     * @return the keys of the windows closed now
     */
    List<Key> advance(Long nowMs, long lateRetentionMs) {
        long wm = nowMs == null ? watermarkMs : Math.max(watermarkMs, nowMs);
        List<Key> out = new ArrayList<>();
        if (wm < 0) {
            return out;
        }
        long horizon = wm - graceMs;
        if (horizon <= closedHorizonMs) {
            return out;
        }
        long before = firstOpenStart();
        closedHorizonMs = horizon;
        stateDirty = true; // the new horizon is part of the state
        long firstOpen = firstOpenStart();
        if (firstOpen == before) {
            return out;
        }
        for (Map.Entry<Key, Bucket> e : new ArrayList<>(open.entrySet())) {
            if (e.getKey().start() < firstOpen) {
                Bucket b = open.remove(e.getKey());
                b.unique = b.unique(e.getKey().producerId());
                b.dropSequences();
                b.dirty = true;
                closed.put(e.getKey(), b);
                out.add(e.getKey());
                if (b == last) {
                    last = null;
                }
            }
        }
        closed.keySet().removeIf(k -> k.start() + windowMs + lateRetentionMs < horizon);
        return out;
    }

    /**
     * Merge the state a previous member of the group wrote (read back from the state topic) into what this
     * member counted meanwhile, as if one member had read both: counters add up, a sequence in both sets is a
     * duplicate, what this member read of a window the state had closed is late.
     */
    void merge(ConsumerPartition loaded) {
        nextOffset = Math.max(nextOffset, loaded.nextOffset);
        watermarkMs = Math.max(watermarkMs, loaded.watermarkMs);
        for (Map.Entry<Key, Bucket> e : loaded.closed.entrySet()) {
            Bucket mine = open.remove(e.getKey());
            Bucket mineClosed = closed.remove(e.getKey());
            Bucket b = e.getValue();
            for (Bucket m : new Bucket[] {mine, mineClosed}) {
                if (m != null) {
                    b.late += m.late + (m == mine ? m.received : 0);
                    b.freshness = addFreshness(b.freshness, m.freshness);
                    if (m == mineClosed) {
                        b.received += m.received;
                        b.duplicated += m.duplicated;
                        b.unique += m.unique;
                        b.bytes += m.bytes;
                    }
                }
            }
            b.dirty = true;
            closed.put(e.getKey(), b);
        }
        for (Map.Entry<Key, Bucket> e : loaded.open.entrySet()) {
            Bucket b = e.getValue();
            Bucket mine = open.get(e.getKey());
            if (mine == null) {
                mine = closed.get(e.getKey());
            }
            if (mine != null) {
                b.received += mine.received;
                b.bytes += mine.bytes;
                b.late += mine.late;
                b.duplicated += mine.duplicated;
                b.latency.merge(mine.latency.counts(), mine.latency.maxMs());
                b.freshness = addFreshness(b.freshness, mine.freshness);
                if (mine.sequences != null) {
                    mine.settle();
                    b.settle();
                    b.duplicated += RoaringBitmap.andCardinality(b.sequences, mine.sequences);
                    b.sequences.or(mine.sequences);
                    if (mine.large != null) {
                        for (org.roaringbitmap.longlong.LongIterator it = mine.large.getLongIterator(); it.hasNext();) {
                            if (!b.add(it.next())) {
                                b.duplicated++;
                            }
                        }
                    }
                } else { // this member had closed it already: its unique count is all that is left
                    b.unique = b.unique(e.getKey().producerId()) + mine.unique;
                    b.dropSequences();
                }
            }
            b.dirty = true;
            if (b.sequences == null) {
                open.remove(e.getKey());
                closed.put(e.getKey(), b);
            } else {
                closed.remove(e.getKey());
                open.put(e.getKey(), b);
            }
        }
        if (loaded.closedHorizonMs > closedHorizonMs) {
            closedHorizonMs = loaded.closedHorizonMs;
        }
        last = null;
        stateLoaded = true;
        stateDirty = true;
    }

    /** @return the entry-by-entry sum of two freshness histograms (null when either is not measured) */
    static long[] addFreshness(long[] a, long[] b) {
        if (a == null || b == null) {
            return null;
        }
        long[] out = a.clone();
        for (int i = 0; i < out.length && i < b.length; i++) {
            out[i] += b[i];
        }
        return out;
    }

    /** @return whether {@link #advance} with the wall clock {@code nowMs} would close a window */
    boolean wouldClose(long nowMs) {
        long horizon = Math.max(watermarkMs, nowMs) - graceMs;
        if (watermarkMs < 0 || horizon <= closedHorizonMs) {
            return false;
        }
        long firstOpen = horizon - Math.floorMod(horizon, windowMs);
        for (Key k : open.keySet()) {
            if (k.start() < firstOpen) {
                return true;
            }
        }
        return false;
    }

    /** @return buckets open and closed */
    int buckets() {
        return open.size() + closed.size();
    }

    /** Drop the oldest bucket (closed first); @return whether one was dropped */
    boolean dropOldest() {
        Map<Key, Bucket> from = closed.isEmpty() ? open : closed;
        Key oldest = null;
        for (Key k : from.keySet()) {
            if (oldest == null || k.start() < oldest.start()) {
                oldest = k;
            }
        }
        if (oldest == null) {
            return false;
        }
        if (from.remove(oldest) == last) {
            last = null;
        }
        return true;
    }
}
