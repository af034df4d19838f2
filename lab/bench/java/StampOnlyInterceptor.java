import java.security.SecureRandom;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * The benchmark's floor (lab/bench/jvm_interceptors.py): what any per-record stamp costs a Java producer and
 * nothing else. {@code onSend} does what {@code AuditProducerInterceptor.onSend} must do to stamp a record:
 * read the clock for the CreateTime, build the v2 stamp value ({@code audit_record/stamp.py}: 8 id bytes
 * and the varint sequence), and return a copy of the record with the stamp as its first header and the
 * timestamp set. No counting, no acknowledgement bookkeeping, no snapshots.
 */
public class StampOnlyInterceptor<K, V> implements ProducerInterceptor<K, V> {
    private static final String KEY = "~a";
    private final byte[] id = new byte[8];
    private final AtomicLong sequence = new AtomicLong();

    @Override
    public void configure(Map<String, ?> configs) {
        new SecureRandom().nextBytes(id);
    }

    @Override
    public ProducerRecord<K, V> onSend(ProducerRecord<K, V> record) {
        Long ts = record.timestamp();
        long timestamp = ts != null ? ts : System.currentTimeMillis();
        long seq = sequence.incrementAndGet();
        byte[] stamp = new byte[8 + 10];
        System.arraycopy(id, 0, stamp, 0, 8);
        int n = 8;
        while ((seq & ~0x7FL) != 0) {
            stamp[n++] = (byte) ((seq & 0x7F) | 0x80);
            seq >>>= 7;
        }
        stamp[n++] = (byte) seq;
        byte[] value = java.util.Arrays.copyOf(stamp, n);
        Header[] old = record.headers().toArray();
        Header[] all = new Header[old.length + 1];
        all[0] = new RecordHeader(KEY, value);
        System.arraycopy(old, 0, all, 1, old.length);
        return new ProducerRecord<>(record.topic(), record.partition(), timestamp, record.key(), record.value(),
                new RecordHeaders(all));
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
    }

    @Override
    public void close() {
    }
}
