package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Arrays;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** The Java bounds are those audit_record.avsc's freshness_counts doc lists (audit_record/freshness.py's). */
class FreshnessHistogramTest {
    @Test
    void boundsAreTheSchemasBounds() {
        String doc = AuditRecordSchema.get().schema().getField("freshness_counts").doc();
        Matcher m = Pattern.compile("fixed bounds \\(ms[^)]*\\) ([0-9, ]+), \\+Inf").matcher(doc);
        org.junit.jupiter.api.Assertions.assertTrue(m.find(), doc);
        long[] fromDoc = Arrays.stream(m.group(1).split(",")).map(String::trim).filter(x -> !x.isEmpty())
                .mapToLong(Long::parseLong).toArray();
        assertArrayEquals(fromDoc, FreshnessHistogram.BOUNDS_MS);
        assertEquals(16, FreshnessHistogram.N_COUNTS);
    }

    @Test
    void aValueGoesToTheFirstBoundAtOrAboveIt() {
        assertEquals(0, FreshnessHistogram.bucketOf(-5)); // a producer clock ahead of the tier's
        assertEquals(0, FreshnessHistogram.bucketOf(100));
        assertEquals(1, FreshnessHistogram.bucketOf(101));
        assertEquals(8, FreshnessHistogram.bucketOf(30_000));
        assertEquals(9, FreshnessHistogram.bucketOf(31_000));
        assertEquals(14, FreshnessHistogram.bucketOf(3_600_000));
        assertEquals(15, FreshnessHistogram.bucketOf(3_600_001));
    }

    @Test
    void everyEntryIsItsRange() {
        for (int i = 0; i < FreshnessHistogram.N_COUNTS; i++) {
            long lo = FreshnessHistogram.lowerExclusive(i);
            long hi = FreshnessHistogram.upperInclusive(i);
            assertEquals(i, FreshnessHistogram.bucketOf(hi));
            if (lo != Long.MIN_VALUE) {
                assertEquals(i, FreshnessHistogram.bucketOf(lo + 1));
                assertEquals(i - 1, FreshnessHistogram.bucketOf(lo));
            }
        }
    }

    /** What a partition counts (it caches the last record's entry) is what {@link FreshnessHistogram#bucketOf} says. */
    @Test
    void aPartitionCountsEveryRecordInItsEntry() {
        java.util.Random random = new java.util.Random(38);
        ConsumerPartition p = new ConsumerPartition("t", 0, Long.MAX_VALUE / 4, 0);
        long[] expected = new long[FreshnessHistogram.N_COUNTS];
        long latency = 0;
        for (int i = 0; i < 50_000; i++) {
            if (random.nextInt(20) == 0) { // runs of similar freshness, jumps next to a bound or anywhere
                long[] b = FreshnessHistogram.BOUNDS_MS;
                latency = random.nextInt(4) == 0 ? random.nextLong(-1_000, 5_000_000)
                        : b[random.nextInt(b.length)] + random.nextInt(-3, 4);
            } else {
                latency += random.nextInt(-2, 3);
            }
            p.observe(1_000_000, "00000000000000aa", i + 1, 100, latency);
            expected[FreshnessHistogram.bucketOf(latency)]++;
        }
        assertEquals(1, p.open.size());
        assertArrayEquals(expected, p.open.values().iterator().next().freshness);
    }
}
