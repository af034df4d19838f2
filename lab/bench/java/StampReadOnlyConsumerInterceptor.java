package io.kafkaaudit.interceptors;

import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * The consumer benchmark's floor (lab/bench/jvm_interceptors.py): what reading every record's stamp costs a Java
 * consumer and nothing else. {@code onConsume} reads each record's v2 stamp in place, as
 * {@code AuditConsumerInterceptor} does ({@code StampHeader.readFirstV2}: the first header's key and value slices,
 * no copy), and folds the id, the sequence and the CreateTime into a checksum so that the JIT cannot drop the
 * reads. No windows, no histograms, no duplicate detection, no snapshots. In package
 * {@code io.kafkaaudit.interceptors} to reach {@code StampHeader}; compiled against the interceptors' jar.
 */
public class StampReadOnlyConsumerInterceptor<K, V> implements ConsumerInterceptor<K, V> {
    private final long[] stamp = new long[2];
    private long checksum;

    @Override
    public void configure(Map<String, ?> configs) {}

    @Override
    public ConsumerRecords<K, V> onConsume(ConsumerRecords<K, V> records) {
        for (TopicPartition tp : records.partitions()) {
            List<ConsumerRecord<K, V>> list = records.records(tp);
            for (int i = 0, n = list.size(); i < n; i++) {
                ConsumerRecord<K, V> r = list.get(i);
                if (StampHeader.readFirstV2(r.headers(), stamp)) {
                    checksum += stamp[0] ^ stamp[1] ^ r.timestamp();
                }
            }
        }
        return records;
    }

    @Override
    public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {}

    @Override
    public void close() {
        System.err.println("StampReadOnlyConsumerInterceptor checksum " + checksum);
    }
}
