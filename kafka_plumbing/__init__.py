"""The Kafka plumbing every stage of kafka-audit uses: the ground floor of the layers.

* :mod:`kafka_plumbing.errors`: the root exception :class:`~kafka_plumbing.errors.KafkaAuditError` and
  :class:`~kafka_plumbing.errors.ConfigError` (also from a pydantic ``ValidationError``).
* :mod:`kafka_plumbing.security`: TLS / SASL settings applied to every Kafka client.
* :mod:`kafka_plumbing.topics`: topic admin (create with config, read a topic to its end).
* :mod:`kafka_plumbing.jvm`, :mod:`kafka_plumbing.paths`: where Java, the Maven jars and local data are.
* :mod:`kafka_plumbing.local_cluster`: the local KRaft cluster behind ``kafka-audit kafka start`` and ``up``;
  its parts: :mod:`~kafka_plumbing.cluster_nodes` (nodes, listeners), :mod:`~kafka_plumbing.cluster_ports`
  (free ports and their layout), :mod:`~kafka_plumbing.broker_properties` (``server.properties``) and
  :mod:`~kafka_plumbing.broker_processes` (storage format, launch, stop).
* :mod:`kafka_plumbing.mirror`, :mod:`kafka_plumbing.replication`: MirrorMaker 2 on local clusters and
  the naming of replicated topics.
* :mod:`kafka_plumbing.jmx_exporter`: broker metrics: the Prometheus JMX exporter agent on the local
  brokers (rules ``jmx_exporter.yaml``) and Prometheus scrape configurations for them.
* :mod:`kafka_plumbing.processes`: whether a process still runs, by PID (zombies count as exited).

Nothing here imports another kafka-audit package (``docs/DESIGN.md``, "Layers"; checked by import-linter).
"""
