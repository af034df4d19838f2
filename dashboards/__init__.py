"""Grafana dashboards and Prometheus rules as code."""
