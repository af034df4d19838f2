package io.kafkaaudit.interceptors;

/**
 * The freshness histogram of {@code audit_record/freshness.py}: how long after its CreateTime a tier held each
 * message ({@code x} = consume time - CreateTime, ms), counted per fixed bucket so that histograms of any
 * producers, partitions, windows and tiers add up entry by entry and "held within S" is an exact count when S is
 * a bound (issue 40: freshness SLOs from counts, never interpolated). Entry {@code i} counts
 * {@code BOUNDS_MS[i-1] < x <= BOUNDS_MS[i]} (entry 0 also {@code x <= 0}); the last entry counts
 * {@code x > 3,600,000}. The bounds are those the {@code freshness_counts} doc of {@code audit_record.avsc} lists;
 * {@code FreshnessHistogramTest} checks the two agree.
 */
final class FreshnessHistogram {
    /** Inclusive upper bounds of the buckets, ms (Prometheus {@code le}); a last bucket above them is +Inf. */
    static final long[] BOUNDS_MS = {
        100, 250, 500, 1_000, 2_500, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 1_800_000,
        3_600_000,
    };
    /** Entries of a measured histogram: one per bound, then +Inf. */
    static final int N_COUNTS = BOUNDS_MS.length + 1;

    private FreshnessHistogram() {}

    /** @return the entry of one freshness value, ms: the first {@code i} with {@code x <= BOUNDS_MS[i]}, else the last */
    static int bucketOf(long freshnessMs) {
        for (int i = 0; i < BOUNDS_MS.length; i++) {
            if (freshnessMs <= BOUNDS_MS[i]) {
                return i;
            }
        }
        return BOUNDS_MS.length;
    }

    /** @return the largest freshness, ms, that is not in entry {@code i} below it ({@link Long#MIN_VALUE} for 0) */
    static long lowerExclusive(int i) {
        return i == 0 ? Long.MIN_VALUE : BOUNDS_MS[i - 1];
    }

    /** @return the largest freshness, ms, in entry {@code i} ({@link Long#MAX_VALUE} for the last) */
    static long upperInclusive(int i) {
        return i == BOUNDS_MS.length ? Long.MAX_VALUE : BOUNDS_MS[i];
    }
}
