"""Typed settings of the alert rules and sinks (pydantic-settings; env prefix ``KAFKA_AUDIT_ALERTS_``).

Every field can be set from the environment, e.g. ``KAFKA_AUDIT_ALERTS_GAMMA_FOR_WINDOWS=3`` or
``KAFKA_AUDIT_ALERTS_ALERTMANAGER_URL=http://127.0.0.1:9093``; dicts and lists take JSON
(``KAFKA_AUDIT_ALERTS_EXTRA_CONFIG='{"security.protocol": "SSL"}'``). Constructor arguments win over
the environment, the environment over the defaults.
"""

from __future__ import annotations

from typing import Any

from pydantic import AnyHttpUrl, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from alerts.event import ALERT_NAMES, Severity
from kafka_plumbing.errors import config_error, setting_and_env_name

ENV_PREFIX = "KAFKA_AUDIT_ALERTS_"

DEFAULT_ALERTS_TOPIC = "__kafka_audit_alerts"


class AlertSettings(BaseSettings):
    """Thresholds, pending/keep-firing counts and sinks of the alert engine.

    "for" counts are how many consecutive bad observations move an alert from pending to firing
    (1: fire on the first bad one); "keep firing" counts are how many consecutive good observations
    it takes to resolve a firing alert (hysteresis, so one good window does not end it). Window rules
    count final windows of one (topic, tier); the audit-lag rule counts evaluations (``observe`` calls).

    Attributes:
        completeness_target: Completeness (unique / sent, fraction 0-1) below which a final window is bad.
        completeness_for_windows: Bad final windows in a row before KafkaAuditCompletenessBelowTarget fires.
        completeness_keep_firing_windows: Good final windows in a row before it resolves.
        completeness_severity: Its ``severity`` label.
        completeness_tier_lag_ms: A downstream tier (replication, application consumers) whose window
            still holds less than ``completeness_target`` of the tier before it this long after the
            window's end counts as a bad window for KafkaAuditCompletenessBelowTarget, ms (None: such
            tiers are judged on final windows only).
        gamma_target: KPI gamma target (Eq. 2, 0-1) used when a window result carries no ``gamma_target``
            (None: such windows are not judged).
        gamma_resolve_margin: A firing gamma alert resolves only at gamma >= target + margin (value
            hysteresis, gamma units).
        gamma_for_windows, gamma_keep_firing_windows, gamma_severity: As above, for
            KafkaAuditGammaBelowTarget.
        drift_windows: k: final windows in a row whose actual R_l lies outside the predicted 90% interval
            [p_loss_lo, p_loss_hi] before KafkaAuditPredictionDrift fires. Only windows whose
            ``model_calibrated`` is True count (the model fits this deployment); the others are unknown.
        drift_tolerance: Slack added on both sides of the interval (fraction of messages).
        drift_keep_firing_windows, drift_severity: As above, for KafkaAuditPredictionDrift.
        grace_ms: The reconciliation job's grace (``KAFKA_AUDIT_SPARK_GRACE_MS``), ms.
        audit_lag_margin_ms: A window still provisional at wall clock > window end + grace + margin is
            late, ms; attached to a job at least its emit delay (heartbeat + watermark delay + 3 x trigger
            interval: ``alerts.batch_listener.job_emit_delay_ms``) unless set.
        audit_lag_for_evaluations, audit_lag_keep_firing_evaluations, audit_lag_severity: As above,
            for KafkaAuditAuditLag (counted in evaluations).
        unaudited_producers_threshold: A final window with more unaudited producers than this is bad.
        unaudited_for_windows, unaudited_keep_firing_windows, unaudited_severity: As above, for
            KafkaAuditUnauditedProducers.
        unaudited_share_threshold: A final window whose unaudited messages (no audit stamp) make up
            more than this share of what the cluster holds (unaudited / received, fraction 0-1) is bad
            for KafkaAuditUnauditedTraffic; 0: any unaudited message.
        unaudited_traffic_needs_audited: Judge KafkaAuditUnauditedTraffic only on windows of topics that
            also have audited producers (a topic nobody instrumented is monitored, not alerted on).
        audited_producers_memory_ms: A topic (per tier) counts as having audited producers while its
            newest final window with some ended at most this long before the judged window starts, ms.
        unaudited_traffic_for_windows, unaudited_traffic_keep_firing_windows,
            unaudited_traffic_severity: As above, for KafkaAuditUnauditedTraffic.
        unaccounted_threshold: A final window with more unaccounted messages than this (their stamp
            names a producer id that sent no snapshot for the topic and window: a crashed producer
            whose snapshots were lost, a client that copies headers, a garbled or forged stamp) is bad
            for KafkaAuditUnaccountedMessages, messages; 0: any.
        unaccounted_for_windows, unaccounted_keep_firing_windows, unaccounted_severity: As above, for
            KafkaAuditUnaccountedMessages.
        disabled_rules: Alert names not evaluated.
        bootstrap_servers: Kafka ``bootstrap.servers`` of the alerts topic (None: no Kafka sink).
        alerts_topic: Topic of the Avro AlertEvents (created if missing, keyed by fingerprint).
        extra_config: librdkafka properties for the alerts producer (security), passed through.
        kafka_message_timeout_ms: librdkafka ``message.timeout.ms`` of the alerts producer, ms.
        kafka_flush_timeout_ms: How long one dispatch waits for delivery reports, ms (in-flight
            events are reported on a later dispatch).
        alertmanager_url: Base URL of Prometheus Alertmanager (``http://host:9093``; None: no sink).
        alertmanager_resend_ms: Firing alerts are re-posted this often so Alertmanager keeps them, ms.
        alertmanager_ttl_ms: ``endsAt`` of a firing alert is now + this; Alertmanager resolves it by
            itself if the engine stops re-posting (a crashed job), ms.
        webhook_url: Generic JSON webhook (None: no sink).
        webhook_bearer_token: Optional ``Authorization: Bearer`` token of the webhook (never logged).
        http_timeout_s: Timeout of one HTTP request to Alertmanager or the webhook, s.
        control_alert_ttl_ms: How long a control-loop decision (a configuration change, rollback, advice)
            stays an active ``info`` alert in Alertmanager, ms (``alerts.control_events``).
        generator_url: ``generatorURL`` of the alerts (e.g. the Grafana dashboard), optional.
        max_pending_events: Undelivered events kept per sink for retry; the oldest are dropped beyond it.

    Example:
        >>> from alerts import AlertSettings
        >>> s = AlertSettings(completeness_target=0.999, alertmanager_url="http://alertmanager:9093")
        >>> s.completeness_target, str(s.alertmanager_url)
        (0.999, 'http://alertmanager:9093/')
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    completeness_target: float = Field(0.999, ge=0.0, le=1.0)
    completeness_for_windows: int = Field(1, ge=1)
    completeness_keep_firing_windows: int = Field(2, ge=1)
    completeness_severity: Severity = "critical"
    completeness_tier_lag_ms: int | None = Field(30_000, ge=0)

    gamma_target: float | None = Field(None, ge=0.0, le=1.0)
    gamma_resolve_margin: float = Field(0.0, ge=0.0, le=1.0)
    gamma_for_windows: int = Field(2, ge=1)
    gamma_keep_firing_windows: int = Field(2, ge=1)
    gamma_severity: Severity = "warning"

    drift_windows: int = Field(3, ge=1)
    drift_tolerance: float = Field(0.0, ge=0.0, le=1.0)
    drift_keep_firing_windows: int = Field(3, ge=1)
    drift_severity: Severity = "warning"

    grace_ms: int = Field(60_000, ge=0)
    audit_lag_margin_ms: int = Field(30_000, ge=0)
    audit_lag_for_evaluations: int = Field(1, ge=1)
    audit_lag_keep_firing_evaluations: int = Field(1, ge=1)
    audit_lag_severity: Severity = "critical"

    unaudited_producers_threshold: int = Field(0, ge=0)
    unaudited_for_windows: int = Field(1, ge=1)
    unaudited_keep_firing_windows: int = Field(2, ge=1)
    unaudited_severity: Severity = "warning"

    unaudited_share_threshold: float = Field(0.0, ge=0.0, lt=1.0)
    unaudited_traffic_needs_audited: bool = True
    audited_producers_memory_ms: int = Field(3_600_000, ge=0)
    unaudited_traffic_for_windows: int = Field(1, ge=1)
    unaudited_traffic_keep_firing_windows: int = Field(2, ge=1)
    unaudited_traffic_severity: Severity = "warning"

    unaccounted_threshold: int = Field(0, ge=0)
    unaccounted_for_windows: int = Field(1, ge=1)
    unaccounted_keep_firing_windows: int = Field(2, ge=1)
    unaccounted_severity: Severity = "warning"

    disabled_rules: list[str] = Field(default_factory=list)

    bootstrap_servers: str | None = None
    alerts_topic: str = DEFAULT_ALERTS_TOPIC
    extra_config: dict[str, str] = Field(default_factory=dict)
    kafka_message_timeout_ms: int = Field(30_000, gt=0)
    kafka_flush_timeout_ms: int = Field(2_000, ge=0)

    alertmanager_url: AnyHttpUrl | None = None
    alertmanager_resend_ms: int = Field(60_000, gt=0)
    alertmanager_ttl_ms: int = Field(300_000, gt=0)

    webhook_url: AnyHttpUrl | None = None
    webhook_bearer_token: SecretStr | None = None
    http_timeout_s: float = Field(5.0, gt=0)

    control_alert_ttl_ms: int = Field(3_600_000, gt=0)

    generator_url: AnyHttpUrl | None = None
    max_pending_events: int = Field(1_000, gt=0)

    @model_validator(mode="after")
    def _check(self) -> AlertSettings:
        unknown = sorted(set(self.disabled_rules) - set(ALERT_NAMES))
        if unknown:
            raise ValueError(
                f"disabled_rules: unknown alert name(s) {unknown}; allowed: {', '.join(ALERT_NAMES)}"
            )
        if self.alertmanager_ttl_ms <= self.alertmanager_resend_ms:
            raise ValueError(
                f"alertmanager_ttl_ms ({self.alertmanager_ttl_ms}) must exceed alertmanager_resend_ms "
                f"({self.alertmanager_resend_ms}), or Alertmanager resolves firing alerts between re-posts"
            )
        return self


def load_settings(**overrides: Any) -> AlertSettings:
    """Return :class:`AlertSettings` from ``overrides`` (None values ignored), the environment and defaults.

    Raises:
        ConfigError: a value is out of range; the message names the setting (and its environment variable).
    """
    try:
        return AlertSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise config_error(exc, "invalid alert settings", setting_and_env_name(ENV_PREFIX)) from None
