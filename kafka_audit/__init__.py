"""kafka-audit, the application: the command line (:mod:`kafka_audit.cli`), ``kafka-audit up``
(:mod:`kafka_audit.platform`) and its settings (:mod:`kafka_audit.up_settings`).

The top layer: it composes every package below it and nothing imports it. The Kafka plumbing that
every stage uses (errors, security, topic admin, the local KRaft cluster) is :mod:`kafka_plumbing`.
"""

__version__ = "0.1.0"
