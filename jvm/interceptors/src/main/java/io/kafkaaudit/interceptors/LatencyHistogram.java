package io.kafkaaudit.interceptors;

/**
 * Latency histogram with log-linear buckets, 4 per power of two (relative error at most 25%), exactly as
 * {@code audit_consumer/latency.py}: bucket of {@code x >= 1} ms with {@code b = bit length of x} is
 * {@code 4*b + ((x << 2) >> (b - 1)) - 4}; {@code x <= 0} goes to bucket 0. Percentiles are the bucket's
 * lower bound, the maximum exact. Not thread-safe (its owner's lock guards it).
 */
public final class LatencyHistogram {
    /** Buckets: enough for any non-negative 63-bit latency. */
    public static final int BUCKETS = 4 * 64;

    private final long[] counts = new long[BUCKETS];
    private long total;
    private long max = Long.MIN_VALUE;

    /** @return the bucket of a latency, ms */
    public static int bucketOf(long latencyMs) {
        if (latencyMs <= 0) {
            return 0;
        }
        int b = 64 - Long.numberOfLeadingZeros(latencyMs);
        return (int) (4L * b + ((latencyMs << 2) >>> (b - 1)) - 4);
    }

    /** @return the smallest latency (ms) of a bucket */
    public static double lowerBound(int bucket) {
        if (bucket < 4) {
            return 0.0;
        }
        int b = bucket / 4;
        int sub = bucket % 4;
        return (double) ((1L << (b - 1)) * (4 + sub) / 4);
    }

    /** Add one latency, ms. */
    public void add(long latencyMs) {
        counts[bucketOf(latencyMs)]++;
        total++;
        if (latencyMs > max) {
            max = latencyMs;
        }
    }

    /** @return the counts per bucket, up to the last non-empty one (state.avsc's {@code histogram}) */
    public long[] counts() {
        int last = BUCKETS - 1;
        while (last >= 0 && counts[last] == 0) {
            last--;
        }
        return java.util.Arrays.copyOf(counts, last + 1);
    }

    /** @return the largest latency added, ms (0 when empty), as state.avsc's {@code latency_max_ms} */
    public long maxMs() {
        return total == 0 ? 0 : Math.max(0, max);
    }

    /** Add another histogram's counts and maximum (a state read back, {@link #counts()} and {@link #maxMs()}). */
    public void merge(long[] other, long otherMaxMs) {
        for (int i = 0; i < other.length && i < BUCKETS; i++) {
            counts[i] += other[i];
            total += other[i];
        }
        if (total > 0 && otherMaxMs > max) {
            max = otherMaxMs;
        }
    }

    /** @return the number of latencies added */
    public long count() {
        return total;
    }

    /** @return the q-quantile (0..1) as a bucket lower bound, ms; null if empty */
    public Double percentile(double q) {
        if (total == 0) {
            return null;
        }
        long rank = Math.max(1, (long) Math.ceil(q * total));
        long seen = 0;
        for (int i = 0; i < BUCKETS; i++) {
            seen += counts[i];
            if (seen >= rank) {
                return lowerBound(i);
            }
        }
        return null;
    }

    /** @return the largest latency added, ms; null if empty */
    public Double max() {
        return total == 0 ? null : (double) Math.max(0, max);
    }
}
