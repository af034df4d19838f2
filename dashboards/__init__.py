"""Grafana dashboards and Prometheus rules as code, and the static HTML report.

* :mod:`dashboards.completeness`, :mod:`dashboards.producers`, :mod:`dashboards.predictor_model`: the "Kafka
  completeness", "Producer reliability" and "Predictor model" dashboards (grafana-foundation-sdk
  builders over the Spark job's Prometheus metrics).
* :mod:`dashboards.brokers`: the "Kafka brokers" dashboard over the brokers' JMX exporters
  (``kafka_plumbing/jmx_exporter.yaml``), per broker, with kafka-audit's alerts as annotations.
* :mod:`dashboards.build`: Grafana JSON + provisioning files (``kafka-audit dashboards build``).
* :mod:`dashboards.push`: upload with grafana-client (``kafka-audit dashboards push``).
* ``prometheus-rules.yml`` (+ ``prometheus-rules.test.yml`` for ``promtool test rules``): the alerts of
  :mod:`alerts` for Prometheus.
* :mod:`dashboards.report` (with :mod:`dashboards.report_figures`, :mod:`dashboards.report_tables`,
  :mod:`dashboards.report_data`): ``kafka-audit report`` from the Parquet results.
"""
