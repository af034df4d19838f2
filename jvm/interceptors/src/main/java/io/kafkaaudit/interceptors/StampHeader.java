package io.kafkaaudit.interceptors;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Finds a consumed record's audit stamp header and reads it in place.
 *
 * <p>A fetched record's headers are {@link RecordHeader}s over slices of the fetch buffer: kafka-clients makes
 * the key's {@code String} (a UTF-8 decode) and the value's {@code byte[]} (a copy) on the first call of
 * {@link Header#key()} / {@link Header#value()}, under the header's monitor (kafka-clients 4.x
 * {@code RecordHeader}). A consumer that never reads headers never pays that, and on 100-byte records it was
 * the largest part of the consumer interceptor's cost (JFR: {@code Utils.utf8} and the value copy, about 60%
 * of the interceptor's samples). So the stamp is found and read through the slices themselves
 * ({@code RecordHeader}'s private {@code keyBuffer} and {@code valueBuffer}, resolved once with
 * {@link MethodHandles#privateLookupIn}); a header already materialized, another {@link Header}
 * implementation, or a kafka-clients without those fields is read through the public API, with the same
 * result. The header is never modified, and a slice is read with absolute gets only (its position is never
 * moved), so the application sees its records exactly as the consumer returned them.
 */
final class StampHeader {
    private static final Logger LOG = LoggerFactory.getLogger(StampHeader.class);
    /** Not a stamp header. */
    static final int NONE = 0;
    /** A v1 stamp header ({@link AuditStamp#KEY_V1}). */
    static final int V1 = 1;
    /** A v2 stamp header ({@link AuditStamp#KEY}). */
    static final int V2 = 2;

    private static final byte[] KEY_V2_BYTES = AuditStamp.KEY.getBytes(StandardCharsets.UTF_8);
    private static final byte[] KEY_V1_BYTES = AuditStamp.KEY_V1.getBytes(StandardCharsets.UTF_8);
    private static final VarHandle KEY_BUFFER;
    private static final VarHandle VALUE_BUFFER;

    static {
        VarHandle key = null;
        VarHandle value = null;
        try {
            MethodHandles.Lookup lookup = MethodHandles.privateLookupIn(RecordHeader.class, MethodHandles.lookup());
            key = lookup.findVarHandle(RecordHeader.class, "keyBuffer", ByteBuffer.class);
            value = lookup.findVarHandle(RecordHeader.class, "valueBuffer", ByteBuffer.class);
        } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
            key = null;
            value = null;
            LOG.info("kafka-audit: this kafka-clients' RecordHeader has no key/value slices to read ({}); "
                    + "stamp headers are read through Header.key()/value()", e.toString());
        }
        KEY_BUFFER = key;
        VALUE_BUFFER = value;
    }

    private StampHeader() {}

    /** @return whether headers are read through their slices (false: through the public API only) */
    static boolean inPlace() {
        return KEY_BUFFER != null;
    }

    /** @return {@link #V2}, {@link #V1} or {@link #NONE}: which stamp header {@code h} is */
    static int kind(Header h) {
        if (KEY_BUFFER != null && h instanceof RecordHeader rh) {
            ByteBuffer key = (ByteBuffer) KEY_BUFFER.get(rh);
            if (key != null) {
                return equal(key, KEY_V2_BYTES) ? V2 : equal(key, KEY_V1_BYTES) ? V1 : NONE;
            }
        }
        String key = h.key();
        return AuditStamp.KEY.equals(key) ? V2 : AuditStamp.KEY_V1.equals(key) ? V1 : NONE;
    }

    private static boolean equal(ByteBuffer b, byte[] expected) {
        int n = b.remaining();
        if (n != expected.length) {
            return false;
        }
        int at = b.position();
        for (int i = 0; i < n; i++) {
            if (b.get(at + i) != expected[i]) {
                return false;
            }
        }
        return true;
    }

    /**
     * The header's value as a buffer whose bytes from {@code position()} to {@code limit()} are the value:
     * the record's own slice when it was not materialized (read it with absolute gets only, never move its
     * position), else a wrap of {@link Header#value()}.
     *
     * @return the value, or null for a null value
     */
    static ByteBuffer value(Header h) {
        if (VALUE_BUFFER != null && h instanceof RecordHeader rh) {
            ByteBuffer value = (ByteBuffer) VALUE_BUFFER.get(rh);
            if (value != null) {
                return value;
            }
        }
        byte[] v = h.value();
        return v == null ? null : ByteBuffer.wrap(v);
    }

    /** @return a copy of a {@link #value} buffer's bytes (position to limit), null for null */
    static byte[] copy(ByteBuffer value) {
        if (value == null) {
            return null;
        }
        byte[] out = new byte[value.remaining()];
        value.get(value.position(), out);
        return out;
    }
}
