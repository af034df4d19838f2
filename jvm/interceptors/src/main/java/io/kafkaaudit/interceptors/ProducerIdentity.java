package io.kafkaaudit.interceptors;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * Who an audited producer instance is (audit record field {@code producer_identity}): v2 stamps carry only
 * the random id.
 *
 * @param clientId the producer's {@code client.id}
 * @param host host name of the process
 * @param processId operating-system process id
 * @param startedAtMs when the instance started (its id was drawn), ms since the epoch UTC
 */
record ProducerIdentity(String clientId, String host, long processId, long startedAtMs) {

    /** @return the identity of a client of this process, started now */
    static ProducerIdentity of(String clientId, long nowMs) {
        return new ProducerIdentity(clientId, hostName(), ProcessHandle.current().pid(), nowMs);
    }

    /** @return the host name without a DNS lookup where possible (the kernel's, as Python's socket.gethostname) */
    static String hostName() {
        try {
            Path p = Path.of("/proc/sys/kernel/hostname");
            if (Files.isReadable(p)) {
                String h = Files.readString(p, StandardCharsets.UTF_8).trim();
                if (!h.isEmpty()) {
                    return h;
                }
            }
        } catch (Exception ignored) {
            // not Linux: ask Java
        }
        String env = System.getenv("HOSTNAME");
        if (env != null && !env.isBlank()) {
            return env.trim();
        }
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (Exception e) {
            return "unknown";
        }
    }

    /** @return "0.1.0 (kafka-clients X)" */
    static String libraryVersion() {
        String kafka;
        try {
            kafka = AppInfoParser.getVersion();
        } catch (RuntimeException | LinkageError e) {
            kafka = "unknown";
        }
        return ProducerAuditor.VERSION + " (kafka-clients " + kafka + ")";
    }

    /** @return the {@code ProducerIdentity} Avro record, or null if the schema has none */
    GenericRecord record(AuditRecordSchema schema) {
        Schema s = schema.type("ProducerIdentity");
        if (s == null) {
            return null;
        }
        return new GenericRecordBuilder(s)
                .set("client_id", clientId)
                .set("host", host)
                .set("process_id", processId)
                .set("started_at_ms", startedAtMs)
                .set("library", ProducerAuditor.LIBRARY)
                .set("library_version", libraryVersion())
                .set("stamp_version", 2)
                .build();
    }
}
