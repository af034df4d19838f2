package io.kafkaaudit.interceptors;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
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
    private static final VarHandle HEADER_LIST;

    static {
        VarHandle key = null;
        VarHandle value = null;
        VarHandle list = null;
        try {
            list = MethodHandles.privateLookupIn(RecordHeaders.class, MethodHandles.lookup())
                    .findVarHandle(RecordHeaders.class, "headers", List.class);
        } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
            LOG.info("kafka-audit: this kafka-clients' RecordHeaders has no list of headers to read ({}); "
                    + "headers are read through their iterator", e.toString());
        }
        HEADER_LIST = list;
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

    /**
     * The record's headers as the list {@link RecordHeaders} holds them (read it, never modify it): indexed
     * without an iterator, two objects fewer per record to allocate or to reach.
     *
     * @return the list, or null when {@code headers} is another implementation (then iterate it)
     */
    @SuppressWarnings("unchecked")
    static List<Header> list(Headers headers) {
        if (HEADER_LIST != null && headers instanceof RecordHeaders rh) {
            return (List<Header>) HEADER_LIST.get(rh);
        }
        return null;
    }

    /**
     * The consumer's hot path: read a record's v2 stamp when it is the record's first header (where
     * {@code AuditProducerInterceptor} and {@code AuditedProducer} put it; then it is the record's stamp by the rule
     * of {@code audit_record.stamp.stamp_of}: the first header with a stamp key), still as the fetch's slices of a
     * heap buffer, and well-formed; everything else is left to {@link #find} and {@link AuditStamp#decode} (other
     * formats, a stamp after other headers, malformed stamps with their reason).
     *
     * @param headers the record's headers
     * @param out receives {@code out[0]} = the producer id's 8 bytes as a big-endian long, {@code out[1]} = the
     *     sequence
     * @return true when {@code out} holds the stamp, false when the record needs the general path
     */
    static boolean readFirstV2(Headers headers, long[] out) {
        if (HEADER_LIST == null || VALUE_BUFFER == null || !(headers instanceof RecordHeaders rhs)) {
            return false;
        }
        List<?> list = (List<?>) HEADER_LIST.get(rhs);
        if (list.isEmpty() || !(list.get(0) instanceof RecordHeader h)) {
            return false;
        }
        ByteBuffer key = (ByteBuffer) KEY_BUFFER.get(h);
        ByteBuffer value = (ByteBuffer) VALUE_BUFFER.get(h);
        if (key == null || value == null || key.remaining() != 2 || !key.hasArray() || !value.hasArray()) {
            return false;
        }
        byte[] k = key.array();
        int ko = key.arrayOffset() + key.position();
        if (k[ko] != KEY_V2_BYTES[0] || k[ko + 1] != KEY_V2_BYTES[1]) {
            return false;
        }
        int len = value.remaining();
        if (len <= AuditStamp.ID_BYTES) {
            return false;
        }
        byte[] v = value.array();
        int at = value.arrayOffset() + value.position();
        long seq = AuditStamp.decodeVarintOrMinus(v, at + AuditStamp.ID_BYTES, len - AuditStamp.ID_BYTES);
        if (seq < 0) {
            return false;
        }
        out[0] = AuditStamp.idBits(v, at);
        out[1] = seq;
        return true;
    }

    /** @return the record's first stamp header (v2 or v1), or null */
    static Header find(Headers headers) {
        List<Header> list = list(headers);
        if (list != null) {
            for (int i = 0, n = list.size(); i < n; i++) {
                Header h = list.get(i);
                if (kind(h) != NONE) {
                    return h;
                }
            }
            return null;
        }
        for (Header h : headers) {
            if (kind(h) != NONE) {
                return h;
            }
        }
        return null;
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
