package io.kafkaaudit.interceptors;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;

/**
 * The audit record schema, {@code audit_record/audit_record.avsc}, copied into the jar by the build
 * ({@code kafka-audit/audit_record.avsc}; never a second copy in the repository) and parsed at run time.
 *
 * <p>Records are written as Avro single objects ({@code C3 01}, the schema's 8-byte CRC-64-AVRO fingerprint
 * little endian, the binary body): what {@code audit_record/codec.py} writes and reads. Fields the schema
 * may or may not have yet (added by later schema versions) are set through {@link #set}, which skips a field
 * the schema lacks, so the jar builds and runs against whichever version the build copied.
 */
public final class AuditRecordSchema {
    /** Class-path resource of the schema. */
    public static final String RESOURCE = "/kafka-audit/audit_record.avsc";

    private static final AuditRecordSchema INSTANCE = new AuditRecordSchema(load());

    private final Schema schema;
    private final BinaryMessageEncoder<GenericRecord> encoder;

    AuditRecordSchema(Schema schema) {
        this.schema = schema;
        this.encoder = new BinaryMessageEncoder<>(GenericData.get(), schema);
    }

    /** @return the schema of the jar */
    public static AuditRecordSchema get() {
        return INSTANCE;
    }

    private static Schema load() {
        try (InputStream in = AuditRecordSchema.class.getResourceAsStream(RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException(RESOURCE + " is not in the jar: build it with Maven (jvm/interceptors)");
            }
            return new Schema.Parser().parse(in);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** @return the parsed AuditRecord schema */
    public Schema schema() {
        return schema;
    }

    /** @return the schema of a named record type of the audit record (e.g. {@code PartitionDelivery}), or null */
    public Schema type(String simpleName) {
        return find(schema, "io.kafkaaudit." + simpleName);
    }

    private static Schema find(Schema s, String fullName) {
        switch (s.getType()) {
            case RECORD:
                if (s.getFullName().equals(fullName)) {
                    return s;
                }
                for (Schema.Field f : s.getFields()) {
                    Schema found = find(f.schema(), fullName);
                    if (found != null) {
                        return found;
                    }
                }
                return null;
            case UNION:
                for (Schema b : s.getTypes()) {
                    Schema found = find(b, fullName);
                    if (found != null) {
                        return found;
                    }
                }
                return null;
            case ARRAY:
                return find(s.getElementType(), fullName);
            case MAP:
                return find(s.getValueType(), fullName);
            default:
                return null;
        }
    }

    /** @return whether a record type has a field */
    public static boolean has(Schema record, String field) {
        return record != null && record.getField(field) != null;
    }

    /** Set a field if the record's schema has it (a field added by a later schema version). */
    public static void set(GenericRecordBuilder b, Schema record, String field, Object value) {
        if (record.getField(field) != null) {
            b.set(field, value);
        }
    }

    /** @return whether a field of a record type accepts null (a union with null) */
    public static boolean nullable(Schema record, String field) {
        Schema.Field f = record == null ? null : record.getField(field);
        if (f == null) {
            return false;
        }
        Schema s = f.schema();
        return s.getType() == Schema.Type.NULL
                || (s.getType() == Schema.Type.UNION && s.getTypes().stream().anyMatch(t -> t.getType() == Schema.Type.NULL));
    }

    /** @return a builder of a new audit record */
    public GenericRecordBuilder builder() {
        return new GenericRecordBuilder(schema);
    }

    /**
     * Encode a record as an Avro single object.
     *
     * @throws UncheckedIOException if Avro cannot write it (a value of the wrong type)
     */
    public byte[] encode(GenericRecord record) {
        try {
            ByteBuffer buf = encoder.encode(record);
            byte[] out = new byte[buf.remaining()];
            buf.get(out);
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Decode an Avro single object written with this schema (tests, tools).
     *
     * @throws IOException if the bytes are not a single object of this schema
     */
    public GenericRecord decode(byte[] value) throws IOException {
        BinaryMessageDecoder<GenericRecord> decoder = new BinaryMessageDecoder<>(GenericData.get(), schema);
        return decoder.decode(value);
    }
}
