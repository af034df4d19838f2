package io.kafkaaudit.interceptors;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.roaringbitmap.RoaringBitmap;
import org.roaringbitmap.longlong.Roaring64Bitmap;

/**
 * The consumer tier's per-partition state in the state topic, byte-compatible with
 * {@code audit_consumer/state_codec.py}: schemaless Avro of {@code audit_consumer/state.avsc} (copied into the
 * jar by the build), key {@code consumer:<group>|topic|partition}, sequence sets in the portable 64-bit
 * Roaring format (pyroaring's {@code BitMap64.serialize}: a little-endian 64-bit count of 32-bit buckets, then
 * per bucket its 32-bit high key and a portable 32-bit Roaring bitmap). A Java member and a Python
 * {@code AuditedConsumer} of one group can read each other's state.
 */
final class ConsumerStateCodec {
    /** Class-path resource of the state schema. */
    static final String RESOURCE = "/kafka-audit/state.avsc";
    private static final Schema SCHEMA = load();
    /** {@link #SCHEMA} without its last field {@code freshness}: {@code audit_consumer/state.v1.avsc}. */
    static final Schema V1_SCHEMA = withoutField(SCHEMA, "freshness");
    /** The schema of the {@code freshness} field alone (null if the state schema has none). */
    private static final Schema FRESHNESS_SCHEMA = SCHEMA.getField("freshness") == null ? null
            : SCHEMA.getField("freshness").schema();

    private ConsumerStateCodec() {}

    private static Schema load() {
        try (InputStream in = ConsumerStateCodec.class.getResourceAsStream(RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException(RESOURCE + " is not in the jar: build it with Maven (jvm/interceptors)");
            }
            return new Schema.Parser().parse(in);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static Schema withoutField(Schema schema, String name) {
        if (schema.getField(name) == null) {
            return schema;
        }
        List<Schema.Field> fields = new ArrayList<>();
        for (Schema.Field f : schema.getFields()) {
            if (!f.name().equals(name)) {
                fields.add(new Schema.Field(f, f.schema()));
            }
        }
        return Schema.createRecord(schema.getName(), schema.getDoc(), schema.getNamespace(), false, fields);
    }

    /** @return counts as the Avro array of longs they are written as (empty for null: not measured) */
    static List<Long> longs(long[] counts) {
        List<Long> out = new ArrayList<>(counts == null ? 0 : counts.length);
        if (counts != null) {
            for (long n : counts) {
                out.add(n);
            }
        }
        return out;
    }

    /** @return the state topic's key of a partition */
    static byte[] key(String tier, String topic, int partition) {
        return (tier + "|" + topic + "|" + partition).getBytes(StandardCharsets.UTF_8);
    }

    /** Serialize a partition's state (its open buckets with their sequence sets, its closed buckets' counters). */
    static byte[] encode(String tier, ConsumerPartition st) {
        Schema bucketSchema = SCHEMA.getField("buckets").schema().getElementType();
        GenericData.Array<GenericRecord> buckets = new GenericData.Array<>(st.buckets(), SCHEMA.getField("buckets").schema());
        List<List<Long>> freshness = new ArrayList<>(st.buckets());
        for (boolean closed : new boolean[] {false, true}) {
            for (Map.Entry<ConsumerPartition.Key, ConsumerPartition.Bucket> e : (closed ? st.closed : st.open).entrySet()) {
                ConsumerPartition.Bucket b = e.getValue();
                String pid = e.getKey().producerId();
                GenericRecord r = new GenericData.Record(bucketSchema);
                r.put("window_start_ms", e.getKey().start());
                r.put("producer_id", pid == null ? null : ByteBuffer.wrap(pid.getBytes(StandardCharsets.UTF_8)));
                r.put("closed", closed);
                r.put("received", b.received);
                r.put("duplicated", b.duplicated);
                r.put("unique", b.unique(pid));
                r.put("late", b.late);
                r.put("stale", 0L);
                r.put("bytes", b.bytes);
                r.put("latency_max_ms", b.latency.maxMs());
                r.put("histogram", longs(b.latency.counts()));
                if (!closed && b.sequences != null) {
                    b.settle();
                }
                r.put("sequences", closed || b.sequences == null ? null : ByteBuffer.wrap(portable(b.sequences, b.large)));
                buckets.add(r);
                freshness.add(longs(b.freshness)); // empty: not measured
            }
        }
        GenericRecord rec = new GenericData.Record(SCHEMA);
        rec.put("group", tier);
        rec.put("topic", st.topic);
        rec.put("partition", st.partition);
        rec.put("next_offset", st.nextOffset);
        rec.put("watermark_ms", st.watermarkMs);
        rec.put("closed_horizon_ms", st.closedHorizonMs);
        rec.put("buckets", buckets);
        if (SCHEMA.getField("freshness") != null) {
            rec.put("freshness", freshness);
        }
        try {
            ByteArrayOutputStream out = new ByteArrayOutputStream(256);
            BinaryEncoder enc = EncoderFactory.get().directBinaryEncoder(out, null);
            new GenericDatumWriter<GenericRecord>(SCHEMA).write(rec, enc);
            enc.flush();
            return out.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Rebuild a partition's state.
     *
     * @throws IOException if the bytes are not a state of this schema
     */
    static ConsumerPartition decode(byte[] value, long windowMs, long graceMs) throws IOException {
        BinaryDecoder dec = DecoderFactory.get().binaryDecoder(value, null);
        // The freshness field is last and a v1 state is this schema without it: read the v1 part, then the
        // field only if bytes remain (audit_consumer/state_codec.py decides by length the same way).
        GenericRecord rec = new GenericDatumReader<GenericRecord>(V1_SCHEMA).read(null, dec);
        List<?> freshness = null;
        if (FRESHNESS_SCHEMA != null && !dec.isEnd()) {
            freshness = (List<?>) new GenericDatumReader<Object>(FRESHNESS_SCHEMA).read(null, dec);
        }
        int index = 0;
        ConsumerPartition st = new ConsumerPartition(rec.get("topic").toString(), (Integer) rec.get("partition"), windowMs, graceMs);
        st.nextOffset = (Long) rec.get("next_offset");
        st.watermarkMs = (Long) rec.get("watermark_ms");
        st.closedHorizonMs = (Long) rec.get("closed_horizon_ms");
        for (Object o : (List<?>) rec.get("buckets")) {
            GenericRecord r = (GenericRecord) o;
            ByteBuffer pidBytes = (ByteBuffer) r.get("producer_id");
            String pid = pidBytes == null ? null : StandardCharsets.UTF_8.decode(pidBytes.duplicate()).toString();
            ConsumerPartition.Bucket b = new ConsumerPartition.Bucket();
            b.received = (Long) r.get("received");
            b.duplicated = (Long) r.get("duplicated");
            b.unique = (Long) r.get("unique");
            b.late = (Long) r.get("late");
            b.bytes = (Long) r.get("bytes");
            List<?> hist = (List<?>) r.get("histogram");
            long[] h = new long[hist.size()];
            for (int i = 0; i < h.length; i++) {
                h[i] = (Long) hist.get(i);
            }
            b.latency.merge(h, (Long) r.get("latency_max_ms"));
            List<?> fresh = freshness == null || index >= freshness.size() ? null : (List<?>) freshness.get(index);
            index++;
            if (fresh == null || fresh.size() != FreshnessHistogram.N_COUNTS) {
                b.freshness = null; // counted before freshness was measured: not measured for this window
            } else {
                for (int i = 0; i < FreshnessHistogram.N_COUNTS; i++) {
                    b.freshness[i] = (Long) fresh.get(i);
                }
            }
            b.dirty = false;
            ConsumerPartition.Key key = new ConsumerPartition.Key((Long) r.get("window_start_ms"), pid);
            if ((Boolean) r.get("closed")) {
                b.sequences = null;
                st.closed.put(key, b);
            } else {
                ByteBuffer seqs = (ByteBuffer) r.get("sequences");
                if (seqs != null) {
                    readPortable(seqs.duplicate(), b);
                }
                st.open.put(key, b);
            }
        }
        return st;
    }

    /** @return the sequences in the portable 64-bit Roaring format */
    static byte[] portable(RoaringBitmap low, Roaring64Bitmap high) {
        TreeMap<Integer, RoaringBitmap> byKey = new TreeMap<>(Integer::compareUnsigned);
        if (!low.isEmpty()) {
            byKey.put(0, low);
        }
        if (high != null) {
            high.forEach(v -> byKey.computeIfAbsent((int) (v >>> 32), k -> new RoaringBitmap()).add((int) v));
        }
        int size = 8;
        for (RoaringBitmap b : byKey.values()) {
            b.runOptimize();
            size += 4 + b.serializedSizeInBytes();
        }
        ByteBuffer out = ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
        out.putLong(byKey.size());
        for (Map.Entry<Integer, RoaringBitmap> e : byKey.entrySet()) {
            out.putInt(e.getKey());
            int at = out.position();
            e.getValue().serialize(out.slice().order(ByteOrder.LITTLE_ENDIAN));
            out.position(at + e.getValue().serializedSizeInBytes());
        }
        return out.array();
    }

    /** Read the portable 64-bit Roaring format into a bucket's sequence sets. */
    static void readPortable(ByteBuffer in, ConsumerPartition.Bucket b) throws IOException {
        ByteBuffer buf = in.slice().order(ByteOrder.LITTLE_ENDIAN);
        long n = buf.getLong();
        for (long i = 0; i < n; i++) {
            long high = Integer.toUnsignedLong(buf.getInt());
            RoaringBitmap r = new RoaringBitmap();
            int at = buf.position();
            r.deserialize(buf.slice().order(ByteOrder.LITTLE_ENDIAN));
            buf.position(at + r.serializedSizeInBytes());
            if (high == 0) {
                b.sequences.or(r);
            } else {
                if (b.large == null) {
                    b.large = new Roaring64Bitmap();
                }
                long base = high << 32;
                r.forEach((int v) -> b.large.addLong(base | Integer.toUnsignedLong(v)));
            }
        }
    }
}
