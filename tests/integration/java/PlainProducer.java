import java.lang.management.ManagementFactory;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A plain Java application producer for the integration tests (no kafka-audit code: the audit comes from
 * the {@code interceptor.classes} among its properties).
 *
 * <p>Usage: {@code PlainProducer <topic> <records> <records per second> <window ms> key=value...}; the keys
 * {@code app.timestamp.ms} (every record's CreateTime, else now), {@code app.pause.after} and
 * {@code app.pause.ms} (flush and pause once after that many records) are the application's, the others the
 * producer's. Sends
 * 100-byte records at the given rate, counts per window of each record's CreateTime (set here) how many it
 * handed to {@code send()} and how many were acknowledged or failed (its own callback), then prints one JSON
 * line: {@code {"sent": n, "acknowledged": a, "failed": f, "windows": {start: sent}, "interceptor":
 * {attribute: value}}} with the interceptor's JMX counters read before {@code close()}.
 */
public final class PlainProducer {
    public static void main(String[] args) throws Exception {
        String topic = args[0];
        long records = Long.parseLong(args[1]);
        double rate = Double.parseDouble(args[2]);
        long windowMs = Long.parseLong(args[3]);
        Properties props = new Properties();
        long fixedTimestamp = -1;
        long pauseAfter = -1;
        long pauseMs = 0;
        for (int i = 4; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            String k = args[i].substring(0, eq);
            String v = args[i].substring(eq + 1);
            switch (k) {
                case "app.timestamp.ms" -> fixedTimestamp = Long.parseLong(v);
                case "app.pause.after" -> pauseAfter = Long.parseLong(v);
                case "app.pause.ms" -> pauseMs = Long.parseLong(v);
                default -> props.put(k, v);
            }
        }
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        Map<Long, Long> windows = new TreeMap<>();
        byte[] value = new byte[100];
        KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        long start = System.nanoTime();
        for (long i = 0; i < records; i++) {
            long due = start + (long) (i * 1e9 / rate);
            long wait = due - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
            }
            if (i == pauseAfter) {
                producer.flush();
                Thread.sleep(pauseMs);
                start += pauseMs * 1_000_000L;
            }
            long ts = fixedTimestamp >= 0 ? fixedTimestamp : System.currentTimeMillis();
            windows.merge(ts - ts % windowMs, 1L, Long::sum);
            producer.send(new ProducerRecord<>(topic, null, ts, null, value), (md, err) -> {
                if (err == null) {
                    acked.incrementAndGet();
                } else {
                    failed.incrementAndGet();
                }
            });
        }
        producer.flush();
        StringBuilder interceptor = new StringBuilder();
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        Set<ObjectName> names = server.queryNames(new ObjectName("io.kafkaaudit:type=AuditProducerInterceptor,*"), null);
        for (ObjectName n : names) {
            for (String a : new String[] {"SnapshotsSent", "SnapshotFailures", "InternalErrors", "WindowsDropped"}) {
                interceptor.append(interceptor.length() == 0 ? "" : ", ")
                        .append('"').append(a).append("\": ").append(server.getAttribute(n, a));
            }
        }
        StringBuilder w = new StringBuilder();
        for (Map.Entry<Long, Long> e : windows.entrySet()) {
            w.append(w.length() == 0 ? "" : ", ").append('"').append(e.getKey()).append("\": ").append(e.getValue());
        }
        producer.close();
        System.out.println("{\"sent\": " + records + ", \"acknowledged\": " + acked.get() + ", \"failed\": "
                + failed.get() + ", \"windows\": {" + w + "}, \"interceptor\": {" + interceptor + "}}");
    }
}
