package io.kafkaaudit.interceptors;

import java.lang.management.ManagementFactory;
import javax.management.MBeanServer;
import javax.management.ObjectName;

/**
 * What the host producer measures of its network, read from its own metrics in JMX (kafka-clients' default
 * {@code JmxReporter}): the mean over brokers of {@code producer-node-metrics} {@code request-latency-avg}
 * (ms; the Java counterpart of librdkafka's per-broker {@code rtt.avg}, request sent to response received,
 * over the client's metrics sample window). Null when the client does not report to JMX or has no samples;
 * the Java client has no minimum nor p99 round trip, so {@code rtt_min_ms} and {@code rtt_p99_ms} stay null.
 */
final class ClientNetworkMetrics {
    private ClientNetworkMetrics() {}

    /** @return the mean request latency over the producer's brokers, ms, or null */
    static Double requestLatencyAvgMs(String clientId) {
        try {
            MBeanServer server = ManagementFactory.getPlatformMBeanServer();
            double sum = 0;
            int n = 0;
            for (ObjectName name : server.queryNames(new ObjectName("kafka.producer:type=producer-node-metrics,*"), null)) {
                String id = name.getKeyProperty("client-id");
                if (id == null || !(id.equals(clientId) || id.equals(ObjectName.quote(clientId)))) {
                    continue;
                }
                Object v = server.getAttribute(name, "request-latency-avg");
                if (v instanceof Number num && Double.isFinite(num.doubleValue())) {
                    sum += num.doubleValue();
                    n++;
                }
            }
            return n == 0 ? null : sum / n;
        } catch (Exception | LinkageError e) {
            return null;
        }
    }
}
