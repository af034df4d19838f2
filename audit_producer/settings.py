"""Typed settings of the audited producer (pydantic-settings; env prefix ``KAFKA_AUDIT_PRODUCER_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from audit_record import DEFAULT_AUDIT_TOPIC, DEFAULT_WINDOW_MS


class ProducerAuditSettings(BaseSettings):
    """How an :class:`~audit_producer.AuditedProducer` audits (the librdkafka config is separate).

    Attributes:
        audit_topic: Topic the window snapshots go to.
        window_ms: Window length, ms (windows aligned to the epoch).
        snapshot_interval_ms: Snapshots of changed windows are emitted at least this often, ms; a crash
            loses at most this much of the counts.
        grace_ms: A window closes (final snapshot, state dropped) this long after its end, once all its
            messages have delivery reports, ms.
        delivery_reports: ``all``: count acknowledged/failed from every delivery report (works with any
            caller callbacks); ``errors``: request only failed reports (``delivery.report.only.error``) and
            derive acknowledged = sent - failed once a window is settled, which is cheaper per message but
            incompatible with per-call ``on_delivery`` callbacks.
        poll_interval_ms: The application's polling interval (paper's delta), reported with the config.
    """

    model_config = SettingsConfigDict(env_prefix="KAFKA_AUDIT_PRODUCER_", frozen=True)

    audit_topic: str = DEFAULT_AUDIT_TOPIC
    window_ms: int = Field(DEFAULT_WINDOW_MS, gt=0)
    snapshot_interval_ms: int = Field(5_000, gt=0)
    grace_ms: int = Field(10_000, ge=0)
    delivery_reports: Literal["all", "errors"] = "all"
    poll_interval_ms: float | None = Field(None, ge=0)
