package io.kafkaaudit.interceptors;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.regex.Pattern;

/**
 * The audit stamp: one Kafka header per audited message, byte for byte {@code audit_record/stamp.py}
 * (docs/DESIGN.md, "The audit stamp").
 *
 * <ul>
 *   <li><b>v2</b> (written): key {@value #KEY} (2 bytes); value = the producer instance id, 8 random
 *       bytes, then the sequence as a minimal unsigned LEB128 varint (1 to 9 bytes). The id's text form is
 *       {@code ~} + 16 lowercase hex digits.
 *   <li><b>v1</b> (read): key {@value #KEY_V1}; value = the id as UTF-8 text ({@code [A-Za-z0-9._:@-]{1,200}})
 *       then the sequence as 8 bytes big-endian.
 * </ul>
 *
 * <p>Identity is (producer id, sequence): a second copy of the same pair is a duplicate (invariant 3).
 * {@code audit_record/stamp_vectors.json} holds the test vectors both languages check.
 */
public final class AuditStamp {
    /** Header key of a v2 stamp. */
    public static final String KEY = "~a";
    /** Header key of a v1 stamp. */
    public static final String KEY_V1 = "kafka-audit.stamp";
    /** Length of a v2 producer instance id, bytes. */
    public static final int ID_BYTES = 8;
    /** Longest v2 sequence varint, bytes. */
    public static final int VARINT_MAX_BYTES = 9;
    /** Length of a v1 sequence, bytes (big-endian). */
    public static final int SEQUENCE_BYTES_V1 = 8;

    private static final Pattern V1_ID = Pattern.compile("[A-Za-z0-9._:@-]{1,200}");
    private static final Pattern V2_ID = Pattern.compile("~[0-9a-f]{16}");
    private static final char[] HEX = "0123456789abcdef".toCharArray();
    private static final SecureRandom RANDOM = new SecureRandom();

    /** A decoded stamp: the producer id's text form and the sequence number. */
    public record Decoded(String producerId, long sequence) {}

    private AuditStamp() {}

    /** @return 8 new random id bytes (64 bits of {@link SecureRandom}), drawn once per producer instance */
    public static byte[] newProducerId() {
        byte[] id = new byte[ID_BYTES];
        RANDOM.nextBytes(id);
        return id;
    }

    /** @return the text form of a v2 id: {@code ~} + 16 lowercase hex digits of its 8 bytes */
    public static String idText(byte[] id, int offset) {
        char[] out = new char[1 + 2 * ID_BYTES];
        out[0] = '~';
        for (int i = 0; i < ID_BYTES; i++) {
            int b = id[offset + i] & 0xff;
            out[1 + 2 * i] = HEX[b >>> 4];
            out[2 + 2 * i] = HEX[b & 0xf];
        }
        return new String(out);
    }

    /** @return the text form of a v2 id given as a big-endian long */
    public static String idText(long id) {
        byte[] b = new byte[ID_BYTES];
        for (int i = ID_BYTES - 1; i >= 0; i--) {
            b[i] = (byte) id;
            id >>>= 8;
        }
        return idText(b, 0);
    }

    /** @return the number of bytes of {@code n}'s minimal unsigned LEB128 varint (1 to 9 for n >= 0) */
    public static int varintLength(long n) {
        int k = 1;
        while ((n >>>= 7) != 0) {
            k++;
        }
        return k;
    }

    /**
     * Write {@code n} as a minimal unsigned LEB128 varint: 7 bits a byte, low group first, high bit set on
     * every byte but the last.
     *
     * @return the offset after the varint
     */
    public static int writeVarint(long n, byte[] out, int offset) {
        while ((n & ~0x7FL) != 0) {
            out[offset++] = (byte) ((n & 0x7F) | 0x80);
            n >>>= 7;
        }
        out[offset++] = (byte) n;
        return offset;
    }

    /**
     * The v2 stamp value for (id, sequence).
     *
     * @throws IllegalArgumentException if {@code sequence} is negative (not below 2^63) or the id is not 8 bytes
     */
    public static byte[] encodeV2(byte[] id, long sequence) {
        if (sequence < 0 || id.length != ID_BYTES) {
            throw new IllegalArgumentException("sequence out of range or id not 8 bytes: " + sequence);
        }
        byte[] out = new byte[ID_BYTES + varintLength(sequence)];
        System.arraycopy(id, 0, out, 0, ID_BYTES);
        writeVarint(sequence, out, ID_BYTES);
        return out;
    }

    /**
     * The stamp value for a producer id's text form (v2: {@code ~} + 16 hex digits; v1: the id itself) and a
     * sequence, as {@code audit_record.stamp.encode}.
     *
     * @throws MalformedStampException (bad_producer_id) if the id is neither a v2 nor a valid v1 id
     * @throws IllegalArgumentException if {@code sequence} is negative
     */
    public static byte[] encode(String producerId, long sequence) throws MalformedStampException {
        if (sequence < 0) {
            throw new IllegalArgumentException("sequence out of range: " + sequence);
        }
        if (V2_ID.matcher(producerId).matches()) {
            byte[] id = new byte[ID_BYTES];
            for (int i = 0; i < ID_BYTES; i++) {
                id[i] = (byte) Integer.parseInt(producerId.substring(1 + 2 * i, 3 + 2 * i), 16);
            }
            return encodeV2(id, sequence);
        }
        if (!V1_ID.matcher(producerId).matches()) {
            throw new MalformedStampException("bad_producer_id", "invalid producer id");
        }
        byte[] text = producerId.getBytes(StandardCharsets.UTF_8);
        byte[] out = new byte[text.length + SEQUENCE_BYTES_V1];
        System.arraycopy(text, 0, out, 0, text.length);
        for (int i = 0; i < SEQUENCE_BYTES_V1; i++) {
            out[out.length - 1 - i] = (byte) (sequence >>> (8 * i));
        }
        return out;
    }

    /** @return the header key of a producer id's format ({@link #KEY} or {@link #KEY_V1}) */
    public static String headerKey(String producerId) {
        return V2_ID.matcher(producerId).matches() ? KEY : KEY_V1;
    }

    /**
     * Decode a minimal unsigned LEB128 varint of {@code length} bytes at {@code offset}.
     *
     * @throws MalformedStampException varint_length, varint_continuation, varint_not_minimal or sequence_range
     */
    public static long decodeVarint(byte[] data, int offset, int length) throws MalformedStampException {
        return decodeVarintAt(data, offset, length);
    }

    /**
     * Decode a minimal unsigned LEB128 varint of {@code length} bytes at the absolute index {@code offset} of
     * {@code data} (its position is not moved).
     *
     * @throws MalformedStampException varint_length, varint_continuation, varint_not_minimal or sequence_range
     */
    public static long decodeVarint(ByteBuffer data, int offset, int length) throws MalformedStampException {
        if (data.hasArray()) {
            return decodeVarintAt(data.array(), data.arrayOffset() + offset, length);
        }
        byte[] copy = new byte[Math.max(0, Math.min(length, VARINT_MAX_BYTES + 1))];
        data.get(offset, copy);
        return decodeVarintAt(copy, 0, length);
    }

    /**
     * {@link #decodeVarint(ByteBuffer, int, int)} without the exception: the consumer's hot path (a malformed
     * stamp is then decoded again with the exception, for its reason).
     *
     * @return the sequence, or -1 where {@link #decodeVarint(ByteBuffer, int, int)} throws
     */
    public static long decodeVarintOrMinus(ByteBuffer data, int offset, int length) {
        return data.hasArray() ? decodeVarintOrMinus(data.array(), data.arrayOffset() + offset, length) : -1;
    }

    /**
     * {@link #decodeVarintOrMinus(ByteBuffer, int, int)} on {@code length} bytes of {@code data} from the absolute
     * index {@code offset}.
     *
     * @return the sequence, or -1 where {@link #decodeVarint(byte[], int, int)} throws
     */
    public static long decodeVarintOrMinus(byte[] data, int offset, int length) {
        if (length < 1 || length > VARINT_MAX_BYTES || offset < 0 || offset + length > data.length) {
            return -1;
        }
        int last = offset + length - 1;
        long n = 0;
        int shift = 0;
        for (int i = offset; i < last; i++, shift += 7) {
            int b = data[i];
            if (b >= 0) {
                return -1;
            }
            n |= (long) (b & 0x7f) << shift;
        }
        int b = data[last];
        if (b < 0 || (b == 0 && length > 1)) {
            return -1;
        }
        n |= (long) b << shift;
        return n < 0 ? -1 : n; // the 64th bit set: out of range, as decodeVarint
    }

    private static long decodeVarintAt(byte[] data, int offset, int length) throws MalformedStampException {
        if (length < 1 || length > VARINT_MAX_BYTES) {
            throw malformed("varint_length", "sequence varint of " + length + " bytes (allowed: 1 to 9)");
        }
        long n = 0;
        int last = offset + length - 1;
        int shift = 0;
        for (int i = offset; i < last; i++, shift += 7) {
            int b = data[i];
            if (b >= 0) {
                throw malformed("varint_continuation", "sequence varint has a wrong continuation bit");
            }
            n |= (long) (b & 0x7f) << shift;
        }
        int b = data[last];
        if (b < 0) {
            throw malformed("varint_continuation", "sequence varint has a wrong continuation bit");
        }
        if (b == 0 && length > 1) {
            throw malformed("varint_not_minimal", "sequence varint is not minimal");
        }
        n |= (long) b << shift;
        if (n < 0) { // 9 groups of 7 bits: the 64th bit set
            throw malformed("sequence_range", "sequence out of range");
        }
        return n;
    }

    /** Out of the hot path: the exception for a malformed stamp. */
    private static MalformedStampException malformed(String reason, String detail) {
        return new MalformedStampException(reason, detail);
    }

    private static final java.lang.invoke.VarHandle LONG_BE =
            java.lang.invoke.MethodHandles.byteArrayViewVarHandle(long[].class, java.nio.ByteOrder.BIG_ENDIAN);

    /**
     * The 8 bytes of a v2 producer id from {@code offset} of {@code data} as a big-endian long (one load).
     *
     * @throws IndexOutOfBoundsException if fewer than 8 bytes follow {@code offset}
     */
    public static long idBits(byte[] data, int offset) {
        return (long) LONG_BE.get(data, offset);
    }

    /** @return the 8 id bytes at the absolute index {@code offset} of {@code data} as a big-endian long */
    public static long idBits(ByteBuffer data, int offset) {
        long id = 0;
        if (data.hasArray()) {
            byte[] a = data.array();
            int at = data.arrayOffset() + offset;
            for (int i = 0; i < ID_BYTES; i++) {
                id = (id << 8) | (a[at + i] & 0xff);
            }
            return id;
        }
        for (int i = 0; i < ID_BYTES; i++) {
            id = (id << 8) | (data.get(offset + i) & 0xff);
        }
        return id;
    }

    /**
     * Decode a stamp header (key, value) into (producer id text, sequence), as {@code audit_record.stamp.decode}.
     *
     * @throws MalformedStampException with the reason of the shared test vectors
     */
    public static Decoded decode(String key, byte[] value) throws MalformedStampException {
        int n = value == null ? 0 : value.length;
        if (KEY.equals(key)) {
            if (n <= ID_BYTES) {
                throw new MalformedStampException("too_short", "v2 stamp too short (" + n + " bytes)");
            }
            long seq = decodeVarint(value, ID_BYTES, n - ID_BYTES);
            return new Decoded(idText(value, 0), seq);
        }
        if (!KEY_V1.equals(key)) {
            throw new MalformedStampException("not_a_stamp_key", "not a stamp header key");
        }
        if (n <= SEQUENCE_BYTES_V1) {
            throw new MalformedStampException("too_short", "stamp too short (" + n + " bytes)");
        }
        long seq = 0;
        for (int i = n - SEQUENCE_BYTES_V1; i < n; i++) {
            seq = (seq << 8) | (value[i] & 0xff);
        }
        if (seq < 0) {
            throw new MalformedStampException("sequence_range", "sequence out of range");
        }
        String id = v1Id(value, n - SEQUENCE_BYTES_V1);
        if (id == null) {
            throw new MalformedStampException("bad_producer_id", "invalid v1 producer id");
        }
        return new Decoded(id, seq);
    }

    /** @return the v1 id of the first {@code length} bytes if they are a valid v1 id (ASCII subset), else null */
    static String v1Id(byte[] value, int length) {
        if (length < 1 || length > 200) {
            return null;
        }
        for (int i = 0; i < length; i++) {
            int c = value[i] & 0xff;
            boolean ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
                    || c == '.' || c == '_' || c == ':' || c == '@' || c == '-';
            if (!ok) {
                return null;
            }
        }
        return new String(value, 0, length, StandardCharsets.US_ASCII);
    }
}
