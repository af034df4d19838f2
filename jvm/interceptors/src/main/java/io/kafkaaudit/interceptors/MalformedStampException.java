package io.kafkaaudit.interceptors;

/**
 * An audit stamp header that cannot be decoded.
 *
 * <p>{@link #reason()} is the stable code shared with {@code audit_record/stamp_vectors.json} and Python's
 * {@code audit_record.stamp.MalformedStampError.reason}: {@code too_short}, {@code bad_producer_id},
 * {@code sequence_range}, {@code varint_length}, {@code varint_continuation}, {@code varint_not_minimal},
 * {@code not_a_stamp_key}.
 */
public final class MalformedStampException extends Exception {
    private static final long serialVersionUID = 1L;
    private final String reason;

    /**
     * @param reason the stable code (see the class comment)
     * @param message a human explanation
     */
    public MalformedStampException(String reason, String message) {
        super(message, null, false, false); // no stack trace: malformed input is data, not a bug
        this.reason = reason;
    }

    /** @return the stable reason code */
    public String reason() {
        return reason;
    }
}
