"""kafka-audit, the application: the CLI, ``kafka-audit up`` and its settings.

:mod:`kafka_audit.cli`, :mod:`kafka_audit.platform` and :mod:`kafka_audit.up_settings` form the top
layer: it composes every package below it and nothing imports it. The Kafka plumbing that every stage
uses (errors, security, topic admin, the local KRaft cluster) is :mod:`kafka_plumbing`.
"""

__version__ = "0.1.0"
