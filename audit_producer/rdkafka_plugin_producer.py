"""The audited producer on the plugin path: the librdkafka plugin stamps and counts, the producer emits.

``AuditedProducer(config, ProducerAuditSettings(counting="plugin"))`` (or
``KAFKA_AUDIT_PRODUCER_COUNTING=plugin``) is a :class:`PluginAuditedProducer`. Its inner producers load the
librdkafka plugin (``rdkafka_plugin/``, :func:`kafka_plumbing.rdkafka_plugin.rdkafka_plugin`) in reader
mode with the producer's own id (:func:`~audit_producer.rdkafka_plugin_counts.plugin_config`): the plugin
adds the stamp inside librdkafka (``on_send``) and counts sent, acknowledged, failed and bytes per window
(``on_send``, ``on_acknowledgement``), so :meth:`PluginAuditedProducer.produce` hands the message to
librdkafka as it is, with no Python header and no Python delivery callback per message. At every tick the
producer reads the plugin's counts into its windows
(:class:`~audit_producer.rdkafka_plugin_counts.PluginCounts`) and everything else is the Python path's:
the snapshot emitter and its finality rule, the TCP drain before a final, network statistics and partition
leaders (``stats_cb``), live reconfiguration (a swapped-in inner producer shares the plugin's auditor, so
the sequence and the counts continue), the audit topic check. docs/DESIGN.md, "librdkafka plugin".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from time import time_ns as _time_ns
from typing import Any

from audit_producer.application_callbacks import ApplicationCallbacks
from audit_producer.audit_topic_writer import close_client
from audit_producer.producer import AuditedProducer
from audit_producer.rdkafka_plugin_counts import PluginCounts, PluginReading, plugin_config
from audit_producer.settings import ProducerAuditSettings
from audit_record import now_ms
from kafka_plumbing.errors import ConfigError
from kafka_plumbing.rdkafka_plugin import rdkafka_plugin


class PluginAuditedProducer(AuditedProducer):
    """An :class:`~audit_producer.AuditedProducer` whose stamps and counts the librdkafka plugin makes.

    Constructed by ``AuditedProducer(...)`` when the settings say ``counting="plugin"``; same arguments,
    methods and snapshots. The per-call and config delivery callbacks are the application's own, given to
    librdkafka unchanged; :attr:`plugin_reading` holds the plugin's last counters.

    Raises:
        ConfigError: if ``stamp_version`` is 1 (the plugin writes v2) or the config loads plugins itself
            (``plugin.library.paths``).
        PluginNotFoundError: if the plugin is not built (``make bootstrap``).
        KafkaAuditError: if the plugin found has no reader functions (an older build).
    """

    __slots__ = ("_plugin", "_plugin_library")

    def __init__(
        self,
        config: Mapping[str, Any],
        audit: ProducerAuditSettings | None = None,
        *,
        autotune: bool | None = None,
        on_reconfigure: Callable[[dict[str, Any]], None] | None = None,
        on_hints: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        settings = audit or ProducerAuditSettings()
        if settings.stamp_version != 2:
            raise ConfigError("counting='plugin' writes stamp_version 2 (allowed with counting='plugin': 2)")
        if "plugin.library.paths" in config:
            raise ConfigError(
                "counting='plugin' loads the kafka-audit plugin itself: plugin.library.paths must not be set "
                "(allowed: counting='python' with plugin.library.paths)"
            )
        self._plugin_library = rdkafka_plugin()
        super().__init__(
            config, settings, autotune=autotune, on_reconfigure=on_reconfigure, on_hints=on_hints
        )
        try:
            self._plugin = PluginCounts(self._plugin_library, self.producer_id)
        except BaseException:
            self._reconfiguration.close()
            self._audit_topic.close()
            close_client(self._producer)
            raise
        self._snapshots.errors_only = False  # the plugin counts every acknowledgement, in either report mode

    def _set_inner_callbacks(self, cfg: dict[str, Any], app: ApplicationCallbacks) -> None:
        """Load the plugin in reader mode; the application's delivery callback goes to librdkafka as is."""
        if app.on_delivery is not None:
            cfg["on_delivery"] = app.on_delivery
        cfg["stats_cb"] = self._statistics.callback(self._statistics.token)
        cfg.update(plugin_config(self._plugin_library, self.producer_id, self._window_ms))

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Callable[..., None] | None = None,
        timestamp: int = 0,
        headers: Any = None,
        callback: Callable[..., None] | None = None,
    ) -> None:
        """Produce one message; the plugin stamps and counts it. Arguments as ``confluent_kafka.Producer``.

        ``timestamp`` is CreateTime in ms since the Unix epoch UTC (0: librdkafka sets now, which is the
        window the plugin counts the message in). The stamp header goes after the caller's ``headers``.

        Raises:
            BufferError: if the local queue is full (the plugin counts nothing: librdkafka refuses the
                message before its ``on_send``).
            KafkaException: as ``confluent_kafka.Producer.produce``.
        """
        # Positional, as AuditedProducer.produce: (topic, value, key, partition, callback, on_delivery,
        # timestamp, headers); None in the 5th lets librdkafka call the config's on_delivery.
        self._produce(topic, value, key, partition, on_delivery or callback, None, timestamp, headers)
        now = _time_ns() // 1_000_000
        if now >= self._tick_at:
            self._due(now)

    @property
    def last_sequence(self) -> int:
        """The sequence number of the last message the plugin stamped (0: none yet)."""
        return self._plugin.last_sequence()

    @property
    def plugin_reading(self) -> PluginReading | None:
        """The plugin's last reading (None before the first tick).

        Its failure counters: ``unattributed``, ``windows_dropped``, ``internal_errors``.
        """
        return self._plugin.last_reading

    def close(self, timeout_s: float = 30.0) -> None:
        """As :meth:`AuditedProducer.close`; the plugin's counts are read before the TCP drain wait."""
        if not self._closed:
            self._producer.flush(timeout_s)
            self._read_plugin(now_ms())
        super().close(timeout_s)

    def _tick(self, now: int, close_all: bool = False) -> None:
        """Read the plugin's counts into the windows, run the base tick, release the closed windows."""
        self._read_plugin(now)
        super()._tick(now, close_all)
        self._plugin.release_closed(self._windows)

    def _read_plugin(self, now: int) -> None:
        """Add the plugin's new counts to the windows (a closed window's late records continue it)."""
        self._plugin.add_to(self._windows, now, self._reconfiguration.on_failure, self._snapshots.reopen)


__all__ = ["PluginAuditedProducer"]
