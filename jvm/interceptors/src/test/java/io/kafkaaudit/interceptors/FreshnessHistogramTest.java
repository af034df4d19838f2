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
}
