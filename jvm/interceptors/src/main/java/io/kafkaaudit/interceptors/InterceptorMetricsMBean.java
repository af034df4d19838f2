package io.kafkaaudit.interceptors;

/** JMX view of an interceptor's own counters ({@code io.kafkaaudit:type=<interceptor>,client-id=<id>}). */
public interface InterceptorMetricsMBean {
    /** @return snapshots the audit topic acknowledged */
    long getSnapshotsSent();

    /** @return snapshot sends that failed (each retried from the cumulative counts at the next emission) */
    long getSnapshotFailures();

    /** @return windows dropped unsent because more than {@code kafka.audit.max.windows} were open */
    long getWindowsDropped();

    /** @return acknowledgements whose window could not be found (older than the sequence ring, or dropped) */
    long getUnattributedAcknowledgements();

    /** @return consumed messages whose stamp did not decode (dead-lettered) */
    long getMalformedStamps();

    /** @return dead letters written */
    long getDeadLetters();

    /** @return consumer: reads of the state topic that failed (retried at the next flush) */
    long getStateReadFailures();

    /** @return exceptions the interceptor caught in its own code (never thrown into the client) */
    long getInternalErrors();
}
