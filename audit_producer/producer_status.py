"""What an audited producer reports about itself: read-only counts and its autotune state.

:class:`ProducerStatus` is a base of :class:`~audit_producer.AuditedProducer` holding its read-only
public properties: the last sequence number, the snapshots sent to the audit topic and their failed
deliveries, and, autotuned, the configuration running, the control record it came from, the hints for
the application and the configuration events (docs/DESIGN.md, "Autotuned producer").
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from audit_producer.librdkafka_config import controlled_properties

if TYPE_CHECKING:
    from audit_producer.audit_topic_writer import AuditTopicWriter
    from audit_producer.reconfiguration import LiveReconfiguration
    from audit_record import ProducerConfig


class ProducerStatus:
    """The read-only status properties of an audited producer (a base class; no state of its own).

    The subclass holds what they read: ``_seq`` (the last sequence number), ``_audit_topic`` (its
    :class:`~audit_producer.audit_topic_writer.AuditTopicWriter`), ``_reconfiguration`` (its
    :class:`~audit_producer.reconfiguration.LiveReconfiguration`) and ``reliability`` (the configuration
    running).
    """

    # No slots of its own: the subclass's __slots__ name what these properties read (no __dict__).
    __slots__ = ()

    if TYPE_CHECKING:
        _seq: int
        _audit_topic: AuditTopicWriter
        _reconfiguration: LiveReconfiguration
        reliability: ProducerConfig

    @property
    def last_sequence(self) -> int:
        """Sequence number stamped on the last message produce() accepted (0 before the first)."""
        return self._seq

    @property
    def snapshots_sent(self) -> int:
        """Snapshots handed to the audit topic's internal producer so far."""
        return self._audit_topic.snapshots_sent

    @property
    def audit_delivery_failures(self) -> int:
        """Snapshots whose delivery to the audit topic failed so far (the window's next snapshot heals it)."""
        return self._audit_topic.delivery_failures

    @property
    def current_config(self) -> dict[str, Any]:
        """The controlled librdkafka properties now running, canonical names and values.

        ``acks``, ``enable.idempotence``, ``batch.num.messages``, ``linger.ms`` (ms) and
        ``message.timeout.ms`` (ms, 0 = infinite).
        """
        return controlled_properties(self.reliability)

    @property
    def active_control_version(self) -> int | None:
        """Version of the control record whose configuration runs; None: the constructor's config."""
        return self._reconfiguration.version

    @property
    def hints(self) -> dict[str, Any] | None:
        """Hints for the application from the control records applied (a copy); None: none given.

        ``poll_interval_ms`` (the polling interval delta, ms) and ``producers`` (producers of the
        group), each None until a record gives it.
        """
        return self._reconfiguration.hints

    @property
    def config_events(self) -> Counter[str]:
        """Configuration events so far by kind: ``applied``, ``rejected``, ``rolled_back``."""
        return self._reconfiguration.config_events

    @property
    def control_records_dead_lettered(self) -> int:
        """Malformed control records of this producer's group sent to the dead-letter topic."""
        return self._reconfiguration.dead_lettered
