package io.kafkaaudit.interceptors;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.avro.generic.GenericRecord;

/**
 * Reads audit records as the interceptors' schema sees them, for the cross-language test
 * ({@code tests/integration/test_jvm_interceptors.py}): every stdin line is an Avro single object in hex;
 * stdout gets, per line, the record as JSON text, a tab, and the record encoded again by Java in hex (equal to
 * the input when both languages write the same bytes). Run with kafka-clients on the class path:
 * {@code java -cp <kafka-clients.jar>:kafka-audit-interceptors.jar io.kafkaaudit.interceptors.AuditRecordTool}.
 */
public final class AuditRecordTool {
    private AuditRecordTool() {}

    /**
     * @param args none
     * @throws Exception if a line is not an audit record of this schema (the process fails)
     */
    public static void main(String[] args) throws Exception {
        AuditRecordSchema schema = AuditRecordSchema.get();
        HexFormat hex = HexFormat.of();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null;) {
            if (line.isBlank()) {
                continue;
            }
            GenericRecord r = schema.decode(hex.parseHex(line.trim()));
            System.out.println(r + "\t" + hex.formatHex(schema.encode(r)));
        }
    }
}
