package io.kafkaaudit.interceptors;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;

/**
 * The audit record schema, {@code audit_record/audit_record.avsc}, copied into the jar by the build
 * ({@code kafka-audit/audit_record.avsc}; never a second copy in the repository) and parsed at run time.
 *
 * <p>Records are written as Avro single objects ({@code C3 01}, the schema's 8-byte CRC-64-AVRO fingerprint
 * little endian as the Avro specification says, the binary body) byte for byte as {@code audit_record/codec.py}
 * writes them, so Avro's own {@code BinaryMessageDecoder} reads them too. Records that kafka-audit wrote before it
 * followed the specification carry the fingerprint byte-reversed ({@code codec.legacy_fingerprint}); this class
 * reads both orders, as the Python readers do. Fields the schema may or may not have yet (added by later schema
 * versions) are set through {@link #set}, which skips a field the schema lacks, so the jar builds and runs against
 * whichever version the build copied.
 */
public final class AuditRecordSchema {
    /** Class-path resource of the schema. */
    public static final String RESOURCE = "/kafka-audit/audit_record.avsc";

    /** Byte order of the fingerprint in the single objects written: the Avro specification's, as codec.py writes. */
    public static final ByteOrder WRITTEN_FINGERPRINT_ORDER = ByteOrder.LITTLE_ENDIAN;

    private static final AuditRecordSchema INSTANCE = new AuditRecordSchema(load());

    private final Schema schema;
    private final byte[] header;
    private final byte[] headerLegacyOrder;
    private final GenericDatumWriter<GenericRecord> writer;
    /** Named record types by full name, found once: snapshots ask for them several times each. */
    private final Map<String, Schema> types = new HashMap<>();

    AuditRecordSchema(Schema schema) {
        this.schema = schema;
        collect(schema, types);
        long fp = SchemaNormalization.parsingFingerprint64(schema);
        this.header = header(fp, WRITTEN_FINGERPRINT_ORDER);
        this.headerLegacyOrder = header(fp, ByteOrder.BIG_ENDIAN);
        this.writer = new GenericDatumWriter<>(schema);
    }

    private static byte[] header(long fingerprint, ByteOrder order) {
        return ByteBuffer.allocate(10).order(order).put((byte) 0xC3).put((byte) 0x01).putLong(fingerprint).array();
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
        return types.get("io.kafkaaudit." + simpleName);
    }

    /** Put every record type reachable from {@code s} into {@code out} by full name (the first of a name wins). */
    private static void collect(Schema s, Map<String, Schema> out) {
        switch (s.getType()) {
            case RECORD:
                if (out.putIfAbsent(s.getFullName(), s) == null) {
                    for (Schema.Field f : s.getFields()) {
                        collect(f.schema(), out);
                    }
                }
                break;
            case UNION:
                for (Schema b : s.getTypes()) {
                    collect(b, out);
                }
                break;
            case ARRAY:
                collect(s.getElementType(), out);
                break;
            case MAP:
                collect(s.getValueType(), out);
                break;
            default:
                break;
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
            ByteArrayOutputStream out = new ByteArrayOutputStream(512);
            out.write(header);
            BinaryEncoder enc = EncoderFactory.get().directBinaryEncoder(out, null);
            writer.write(record, enc);
            enc.flush();
            return out.toByteArray();
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
        if (value == null || value.length < header.length) {
            throw new IOException("not an Avro single object: too short");
        }
        byte[] h = Arrays.copyOf(value, header.length);
        if (!Arrays.equals(h, header) && !Arrays.equals(h, headerLegacyOrder)) {
            throw new IOException("not an audit record of this schema (magic or fingerprint differs)");
        }
        BinaryDecoder dec = DecoderFactory.get().binaryDecoder(value, header.length, value.length - header.length, null);
        GenericRecord r = new GenericDatumReader<GenericRecord>(schema).read(null, dec);
        if (!dec.isEnd()) {
            throw new IOException("trailing bytes after the audit record");
        }
        return r;
    }
}
