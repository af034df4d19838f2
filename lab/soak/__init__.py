"""Soak with chaos (issue 18): the whole platform for hours on one machine, with faults on a schedule.

``kafka-audit soak`` (:mod:`soak.run`) starts 3 KRaft brokers, a Spark standalone cluster (a master and
2 one-core workers from pyspark's ``spark-class``) running the reconciliation job, 2 audit consumers in
one group, Prometheus and Alertmanager (Debian packages) and N audited producers over M topics; it
applies a chaos schedule (:mod:`soak.schedule`, YAML), records every component's RSS and CPU, the
micro-batch durations, the audit lag, the window results and the alerts every minute
(:mod:`soak.recorder`), compares every final window with the verifier at the end (:mod:`soak.verdict`)
and writes a report (:mod:`soak.report`, HTML and Markdown with plots).

Like ``testbed``, this package stands beside the product: it may import any product package, and no
product package imports it except ``kafka_audit.cli``, which registers the command
(``docs/DESIGN.md``, "Layers").
"""
