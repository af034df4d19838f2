package io.kafkaaudit.interceptors;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;

/**
 * Which source topic a MirrorMaker 2 copy is: the consumer tier of an application reading a copy counts it
 * under its source topic, so that it reconciles with the producers and the other tiers of the same stream
 * (the Python {@code kafka_plumbing.replication.ReplicationNaming}, {@code docs/DESIGN.md} "Tiers").
 *
 * <p>MirrorMaker 2's {@code DefaultReplicationPolicy} names the copy of topic {@code T} from the cluster with
 * alias {@code A} {@code A.T} ({@code replication.policy.separator}, default {@code .}); a topic copied twice
 * (A to B to C) is {@code B.A.T}. {@code IdentityReplicationPolicy} keeps the name. Only the aliases given are
 * stripped, so a topic whose name merely contains a dot ({@code audit.weblog}) is never taken for a copy.
 *
 * <table>
 *   <caption>Settings</caption>
 *   <tr><th>key</th><th>default</th><th>meaning</th></tr>
 *   <tr><td>kafka.audit.replication.policy</td><td>default</td><td>{@code default} (copies named
 *       {@code <alias><separator><topic>}) or {@code identity} (same name)</td></tr>
 *   <tr><td>kafka.audit.replication.sources</td><td>(none)</td><td>MirrorMaker 2 aliases of the source clusters
 *       whose copies are counted under their source topic, comma-separated (e.g. {@code A})</td></tr>
 *   <tr><td>kafka.audit.replication.separator</td><td>.</td><td>MirrorMaker 2's {@code replication.policy.separator}</td></tr>
 * </table>
 *
 * @param policy {@code default} or {@code identity}
 * @param sourceAliases the source clusters' aliases
 * @param separator the separator between alias and topic
 */
public record ReplicationNaming(String policy, List<String> sourceAliases, String separator) {

    /** Prefix of the settings' keys. */
    static final String PREFIX = AuditSettings.PREFIX + "replication.";

    /** No copies recognised: every topic is its own source. */
    static final ReplicationNaming NONE = new ReplicationNaming("default", List.of(), ".");

    /**
     * @throws ConfigException naming the key and the allowed values: an unknown policy, an empty separator, an
     *     empty alias or one containing the separator
     */
    public ReplicationNaming {
        sourceAliases = List.copyOf(sourceAliases);
        if (!policy.equals("default") && !policy.equals("identity")) {
            throw new ConfigException(PREFIX + "policy", policy, "allowed values: default, identity");
        }
        if (separator.isEmpty()) {
            throw new ConfigException(PREFIX + "separator", separator, "allowed values: a non-empty string");
        }
        for (String alias : sourceAliases) {
            if (alias.isEmpty() || alias.contains(separator)) {
                throw new ConfigException(PREFIX + "sources", String.join(",", sourceAliases),
                        "allowed values: MirrorMaker 2 cluster aliases, non-empty and without the separator '"
                                + separator + "'");
            }
        }
    }

    /**
     * Read the settings from a client's configuration.
     *
     * @param configs what the client passed to {@code configure}; {@code sources} a list or a comma-separated text
     * @return the naming (no copies recognised without {@code kafka.audit.replication.sources})
     * @throws ConfigException naming the key and the allowed values when a value is invalid
     */
    static ReplicationNaming from(Map<String, ?> configs) {
        Object policy = configs.get(PREFIX + "policy");
        Object separator = configs.get(PREFIX + "separator");
        Object sources = configs.get(PREFIX + "sources");
        List<String> aliases = new ArrayList<>();
        if (sources instanceof Collection<?> c) {
            c.forEach(a -> aliases.add(String.valueOf(a).trim()));
        } else if (sources != null && !sources.toString().isBlank()) {
            for (String a : sources.toString().split(",", -1)) {
                aliases.add(a.trim());
            }
        }
        return new ReplicationNaming(policy == null ? "default" : policy.toString().trim(), aliases,
                separator == null ? "." : separator.toString());
    }

    /**
     * @param topic a topic name
     * @return its source topic: itself unless it is a copy of a known alias (with the default policy, every leading
     *     {@code <alias><separator>} of a known alias removed, as MirrorMaker 2's {@code originalTopic})
     */
    public String sourceTopic(String topic) {
        if (policy.equals("identity") || sourceAliases.isEmpty()) {
            return topic;
        }
        String name = topic;
        while (true) {
            int i = name.indexOf(separator);
            if (i < 0 || i + separator.length() >= name.length() || !sourceAliases.contains(name.substring(0, i))) {
                return name;
            }
            name = name.substring(i + separator.length());
        }
    }
}
