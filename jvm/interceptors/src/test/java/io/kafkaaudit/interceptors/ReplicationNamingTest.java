package io.kafkaaudit.interceptors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.Test;

/** MirrorMaker 2 copy names to source topics, as the Python ReplicationNaming (tests/unit/test_tiers.py). */
class ReplicationNamingTest {
    @Test
    void knownAliasesAreStrippedAndNothingElse() {
        ReplicationNaming n = ReplicationNaming.from(Map.of("kafka.audit.replication.sources", "A, B"));
        assertEquals("orders", n.sourceTopic("A.orders"));
        assertEquals("orders", n.sourceTopic("B.A.orders")); // copied twice
        assertEquals("audit.weblog", n.sourceTopic("audit.weblog")); // a dot is not a copy
        assertEquals("C.orders", n.sourceTopic("C.orders")); // an alias not given
        assertEquals("A.", n.sourceTopic("A.")); // nothing after the separator
        assertEquals("orders", n.sourceTopic("orders"));
    }

    @Test
    void withoutSourcesOrWithTheIdentityPolicyATopicIsItsOwnSource() {
        assertEquals("A.orders", ReplicationNaming.from(Map.of()).sourceTopic("A.orders"));
        ReplicationNaming identity = ReplicationNaming.from(
                Map.of("kafka.audit.replication.policy", "identity", "kafka.audit.replication.sources", List.of("A")));
        assertEquals("A.orders", identity.sourceTopic("A.orders"));
        ReplicationNaming underscore = ReplicationNaming.from(
                Map.of("kafka.audit.replication.sources", List.of("A"), "kafka.audit.replication.separator", "__"));
        assertEquals("orders", underscore.sourceTopic("A__orders"));
    }

    @Test
    void invalidSettingsNameTheKeyAndTheAllowedValues() {
        ConfigException policy = assertThrows(ConfigException.class,
                () -> ReplicationNaming.from(Map.of("kafka.audit.replication.policy", "prefix")));
        assertTrue(policy.getMessage().contains("kafka.audit.replication.policy")
                && policy.getMessage().contains("default, identity"), policy.getMessage());
        ConfigException alias = assertThrows(ConfigException.class,
                () -> ReplicationNaming.from(Map.of("kafka.audit.replication.sources", "A.B")));
        assertTrue(alias.getMessage().contains("kafka.audit.replication.sources"), alias.getMessage());
        assertThrows(ConfigException.class, () -> ReplicationNaming.from(Map.of("kafka.audit.replication.sources", "A,,B")));
        assertThrows(ConfigException.class, () -> ReplicationNaming.from(Map.of("kafka.audit.replication.separator", "")));
    }
}
