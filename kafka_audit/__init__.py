"""kafka-audit, the application: the CLI, ``kafka-audit up`` and its settings, the job's one assembly.

The top layer: it composes every package below it and nothing imports it. :mod:`kafka_audit.cli` is
the console script (the data path's commands; :mod:`kafka_audit.cli_options` what the commands share;
:mod:`kafka_audit.kafka_cli`, :mod:`kafka_audit.up_cli` and :mod:`kafka_audit.mirror_cli` the other
groups); :mod:`kafka_audit.assembly` builds the reconciliation job with its alert pipeline and control
loop for ``spark-job``, ``up`` and the lab; :mod:`kafka_audit.up` is what ``up`` runs, with its
settings (:mod:`kafka_audit.up_settings`) and live table (:mod:`kafka_audit.results_table`). The Kafka
plumbing that every stage uses (errors, security, topic admin, the local KRaft cluster) is
:mod:`kafka_plumbing`.
"""

__version__ = "0.1.0"

PRODUCT_PACKAGES: tuple[str, ...] = (
    "kafka_plumbing",
    "audit_record",
    "audit_producer",
    "audit_consumer",
    "predictor",
    "spark_streaming",
    "control_loop",
    "alerts",
    "dashboards",
    "kafka_audit",
)
"""The top-level packages of the product, bottom layer first (the wheel holds them and nothing else; the
lab's ``testbed`` and ``soak`` are not among them). The tests, the wheel check and the documentation's
reference pages walk them."""
