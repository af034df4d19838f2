"""Prometheus metrics of the control loop, in the Spark job's registry (``docs/DESIGN.md``, "Metrics").

* ``kafka_audit_control_decisions_total{group,kind,reason}``: decisions by kind (``change``,
  ``rollback``, ``kept``, ``advice``, ``held``) and reason (:data:`control_loop.decide.REASONS`). Every
  (kind, reason) series of a group is exported at 0 from the first final window of the group on, so
  ``increase()`` has data before the first decision.
* ``kafka_audit_control_kill_switch``: 1 while the kill switch is on (setting, file or environment).
* ``kafka_audit_control_write_failures_total``: control records not acknowledged by the control topic
  (written again on the next micro-batch).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from control_loop.decide import REASONS, ControlDecision


class ControlMetrics:
    """The control-loop metrics, registered once in ``registry``.

    Raises:
        ValueError: the registry already holds these names (prometheus-client's duplicate check).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "kafka_audit_control_decisions_total",
            "Control-loop decisions per producer group, by kind and reason",
            ("group", "kind", "reason"),
            registry=registry,
        )
        self.kill_switch = Gauge(
            "kafka_audit_control_kill_switch",
            "1 while the control loop's kill switch is on",
            registry=registry,
        )
        self.write_failures = Counter(
            "kafka_audit_control_write_failures_total",
            "Control records not acknowledged by the control topic (retried)",
            registry=registry,
        )
        self._groups: set[str] = set()

    def add_groups(self, groups: Iterable[str]) -> None:
        """Export every (kind, reason) series of new ``groups`` at 0."""
        for group in set(groups) - self._groups:
            for kind, reasons in REASONS.items():
                for reason in reasons:
                    self.decisions.labels(group, kind, reason)
            self._groups.add(group)

    def count(self, decisions: Iterable[ControlDecision]) -> None:
        """Count ``decisions`` by group, kind and reason."""
        for d in decisions:
            self.add_groups([d.group])
            self.decisions.labels(d.group, d.kind, d.reason).inc()


__all__ = ["ControlMetrics"]
