"""Local Kafka cluster (KRaft), network fault injection, scenarios, experiments and the verifier."""
