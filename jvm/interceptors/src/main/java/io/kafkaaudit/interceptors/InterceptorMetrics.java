package io.kafkaaudit.interceptors;

import java.lang.management.ManagementFactory;
import java.util.concurrent.atomic.AtomicLong;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * An interceptor's own counters: what it could not do (emit, attribute, decode), never thrown into the
 * client. Registered in JMX as {@code io.kafkaaudit:type=<type>,client-id=<client.id>} while it runs.
 */
public final class InterceptorMetrics implements InterceptorMetricsMBean {
    private static final Logger LOG = LoggerFactory.getLogger(InterceptorMetrics.class);

    final AtomicLong snapshotsSent = new AtomicLong();
    final AtomicLong snapshotFailures = new AtomicLong();
    final AtomicLong windowsDropped = new AtomicLong();
    final AtomicLong unattributedAcknowledgements = new AtomicLong();
    final AtomicLong malformedStamps = new AtomicLong();
    final AtomicLong deadLetters = new AtomicLong();
    final AtomicLong internalErrors = new AtomicLong();
    final AtomicLong stateReadFailures = new AtomicLong();
    private ObjectName name;

    @Override
    public long getSnapshotsSent() {
        return snapshotsSent.get();
    }

    @Override
    public long getSnapshotFailures() {
        return snapshotFailures.get();
    }

    @Override
    public long getWindowsDropped() {
        return windowsDropped.get();
    }

    @Override
    public long getUnattributedAcknowledgements() {
        return unattributedAcknowledgements.get();
    }

    @Override
    public long getMalformedStamps() {
        return malformedStamps.get();
    }

    @Override
    public long getDeadLetters() {
        return deadLetters.get();
    }

    @Override
    public long getStateReadFailures() {
        return stateReadFailures.get();
    }

    @Override
    public long getInternalErrors() {
        return internalErrors.get();
    }

    /** Count an exception caught in the interceptor's own code, and log it (first ones in full). */
    void internalError(String where, Throwable t) {
        long n = internalErrors.incrementAndGet();
        if (n <= 10 || Long.bitCount(n) == 1) {
            LOG.warn("kafka-audit interceptor error in {} (#{}); the client is not affected", where, n, t);
        }
    }

    /** Register in the platform MBean server (best effort: a name taken already is logged and skipped). */
    void register(String type, String clientId) {
        try {
            MBeanServer server = ManagementFactory.getPlatformMBeanServer();
            ObjectName n = new ObjectName("io.kafkaaudit:type=" + type + ",client-id=" + ObjectName.quote(clientId));
            if (!server.isRegistered(n)) {
                server.registerMBean(this, n);
                name = n;
            }
        } catch (Exception | LinkageError e) {
            LOG.info("kafka-audit metrics of {} not registered in JMX: {}", clientId, e.toString());
        }
    }

    /** Remove the JMX registration. */
    void unregister() {
        if (name != null) {
            try {
                ManagementFactory.getPlatformMBeanServer().unregisterMBean(name);
            } catch (Exception e) {
                LOG.debug("kafka-audit metrics not unregistered", e);
            }
            name = null;
        }
    }
}
