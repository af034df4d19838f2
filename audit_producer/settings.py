"""Typed settings of the audited producer (pydantic-settings; env prefix ``KAFKA_AUDIT_PRODUCER_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from audit_record import DEFAULT_AUDIT_TOPIC, DEFAULT_DLQ_TOPIC, DEFAULT_WINDOW_MS
from audit_record.control_record import DEFAULT_CONTROL_TOPIC
from audit_record.finality import DEFAULT_TCP_DRAIN_WAIT_MS


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
        autotune: Follow the control topic for ``group`` and apply its configurations (docs/DESIGN.md,
            "Autotuned producer"); env ``KAFKA_AUDIT_PRODUCER_AUTOTUNE=1``.
        group: Producer group whose control records this producer follows (the control topic's key);
            None = the producer's librdkafka ``client.id``.
        control_topic: The compacted control topic (``audit_record.control_record``).
        dlq_topic: Where malformed control records go (docs/DESIGN.md, invariant 7).
        autotune_connect_timeout_ms: A prepared inner producer must answer a metadata request within
            this long before it replaces the running one, else the configuration is rejected, ms.
        autotune_probation_reports: A new configuration is rolled back when this many of its first
            delivery reports are broker-side rejections (an invalid or unsupported configuration) and
            none of its messages has been delivered, messages.
        autotune_probation_ms: After this long a new configuration without a verdict is kept, ms.
        tcp_drain_wait_ms: Once every message of a window has a delivery report, the final snapshot
            waits until the process's TCP connections have delivered every byte written until then
            (:mod:`audit_producer.tcp_backlog`; acks=0 reports a message at the socket write), at most
            this long, ms; 0: it does not wait, and snapshots report ``in_flight_bytes`` null
            (docs/DESIGN.md, invariant 8).
        stamp_version: The audit stamp format written (:mod:`audit_record.stamp`): 2 (16 bytes of header
            key + value per message) or 1 (the format before 2, kept for mixed-topic tests and
            benchmarks); readers take both.
        counting: Who stamps and counts: ``python`` (the producer itself) or ``plugin`` (the librdkafka
            plugin, ``rdkafka_plugin/``, loaded into the inner producers in reader mode: it stamps and counts
            in C inside librdkafka, the producer reads its counts back and sends the snapshots;
            :mod:`audit_producer.rdkafka_plugin_producer`; needs ``make bootstrap``'s build and
            ``stamp_version`` 2). The snapshots, their counts and every other feature are the same either way.

    Example:
        >>> from audit_producer import ProducerAuditSettings
        >>> audit = ProducerAuditSettings(window_ms=10_000, delivery_reports="errors", autotune=True)
        >>> audit.window_ms, audit.delivery_reports, audit.autotune
        (10000, 'errors', True)
    """

    model_config = SettingsConfigDict(env_prefix="KAFKA_AUDIT_PRODUCER_", frozen=True)

    audit_topic: str = DEFAULT_AUDIT_TOPIC
    window_ms: int = Field(DEFAULT_WINDOW_MS, gt=0)
    snapshot_interval_ms: int = Field(5_000, gt=0)
    grace_ms: int = Field(10_000, ge=0)
    delivery_reports: Literal["all", "errors"] = "all"
    poll_interval_ms: float | None = Field(None, ge=0)
    autotune: bool = False
    group: str | None = Field(None, min_length=1)
    control_topic: str = Field(DEFAULT_CONTROL_TOPIC, min_length=1)
    dlq_topic: str = Field(DEFAULT_DLQ_TOPIC, min_length=1)
    autotune_connect_timeout_ms: int = Field(10_000, gt=0)
    autotune_probation_reports: int = Field(5, ge=1)
    autotune_probation_ms: int = Field(60_000, gt=0)
    tcp_drain_wait_ms: int = Field(DEFAULT_TCP_DRAIN_WAIT_MS, ge=0)
    stamp_version: Literal[1, 2] = 2
    counting: Literal["python", "plugin"] = "python"
