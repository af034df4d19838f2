"""Reading the librdkafka plugin's counts into an audited producer's windows (the plugin path).

The plugin's readings are cumulative per plugin window id; the producer's count lists get what changed
since the previous reading, so a window the producer closed and the plugin dropped (a later record starts a
new one) or a late record after the producer's final adds up, never counts twice. The readings here are
the text ``rdkafka_plugin/src/reader.c`` writes; the integration tests read a real plugin. A bad
``counting`` value, or the plugin path with stamp v1 or the application's own plugins, fails clearly.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_producer.rdkafka_plugin_counts import PluginCounts, parse_reading, plugin_config
from audit_producer.window_counts import (
    ACKED,
    ACKED_BY,
    BYTES,
    DIRTY,
    FAILED,
    FAILED_BY,
    FIRST_SEQ,
    LAST_OFFSET_BY,
    LAST_SEQ,
    SENT,
)
from kafka_plumbing.errors import ConfigError, KafkaAuditError


def reader(*texts: str) -> PluginCounts:
    """A PluginCounts whose readings are ``texts`` in turn (no plugin loaded)."""
    counts = object.__new__(PluginCounts)
    counts._seen, counts._release, counts.last_reading = {}, [], None
    readings = iter(texts)
    counts.read = lambda: parse_reading(next(readings))  # type: ignore[method-assign]
    return counts


def test_a_reading_parses_windows_partitions_and_errors() -> None:
    r = parse_reading(
        "S 12 1 0 0 0\n"
        "W 7 60000 10 8 2 1000 3 12 orders.v1-eu\n"
        "P -1 0 1 -1\n"
        "E -1 -192 1 _MSG_TIMED_OUT\n"
        "P 2 8 1 41\n"
        "E 2 21 1 INVALID_REQUIRED_ACKS\n"
    )
    assert (r.last_sequence, r.unattributed, r.closed) == (12, 1, False)
    (w,) = r.windows
    assert (w.wid, w.topic, w.start, w.sent, w.acknowledged, w.failed, w.bytes) == (
        7,
        "orders.v1-eu",
        60000,
        10,
        8,
        2,
        1000,
    )
    assert (w.first_sequence, w.last_sequence) == (3, 12)
    assert w.partitions == {-1: (0, 1, -1), 2: (8, 1, 41)}
    assert w.errors == {(-1, "_MSG_TIMED_OUT"): 1, (2, "INVALID_REQUIRED_ACKS"): 1}
    assert w.codes == {"_MSG_TIMED_OUT": -192, "INVALID_REQUIRED_ACKS": 21}


@pytest.mark.parametrize("text", ["", "W 1 0 1 0 0 1 1 1 t\n", "S 1 0 0 0 0\nW 1 x 1 0 0 1 1 1 t\n", "S 1\n"])
def test_a_malformed_reading_is_an_error(text: str) -> None:
    with pytest.raises(KafkaAuditError):
        parse_reading(text)


def test_readings_add_what_changed_and_failures_reach_the_probation() -> None:
    counts = reader(
        "S 3 0 0 0 0\nW 1 60000 3 1 0 30 1 3 t\nP 0 1 0 5\n",
        "S 5 0 0 0 0\nW 1 60000 5 4 1 50 1 5 t\nP 0 3 0 9\nP 1 1 1 2\nE 1 -192 1 _MSG_TIMED_OUT\n",
        "S 5 0 0 0 0\nW 1 60000 5 4 1 50 1 5 t\n",  # nothing changed
    )
    windows: dict[tuple[str, int], list[Any]] = {}
    failures: list[tuple[int, str]] = []

    def on_failure(seq: int, err: KafkaError) -> None:
        failures.append((seq, err.name()))

    counts.add_to(windows, 1_000, on_failure)
    w = windows[("t", 60000)]
    assert (w[SENT], w[ACKED], w[FAILED], w[BYTES], w[FIRST_SEQ], w[LAST_SEQ]) == (3, 1, 0, 30, 1, 3)
    counts.add_to(windows, 2_000, on_failure)
    assert (w[SENT], w[ACKED], w[FAILED], w[BYTES], w[LAST_SEQ]) == (5, 4, 1, 50, 5)
    assert w[ACKED_BY] == {0: 3, 1: 1} and w[LAST_OFFSET_BY] == {0: 9, 1: 2}
    assert w[FAILED_BY] == {(1, "_MSG_TIMED_OUT"): 1}
    assert failures == [(5, "_MSG_TIMED_OUT")]
    w[DIRTY] = 0
    counts.add_to(windows, 3_000, on_failure)
    assert w[DIRTY] == 0 and w[SENT] == 5 and len(failures) == 1


def test_a_closed_window_is_released_and_a_late_record_counts_once_more() -> None:
    counts = reader(
        "S 2 0 0 0 0\nW 1 60000 2 2 0 20 1 2 t\nP 0 2 0 1\n",
        # the late record came before the release: the plugin's window 1 goes on counting it
        "S 3 0 0 0 0\nW 1 60000 3 3 0 30 1 3 t\nP 0 3 0 2\n",
        # after the release a later record starts the plugin's window 2
        "S 4 0 0 0 0\nW 2 60000 1 0 0 10 4 4 t\n",
    )
    windows: dict[tuple[str, int], list[Any]] = {}
    counts.add_to(windows, 1_000, lambda *_: None)
    del windows[("t", 60000)]  # the producer sent its final and closed it
    counts.release_closed(windows)
    assert counts._release == [1]
    counts.add_to(windows, 2_000, lambda *_: None)
    w = windows[("t", 60000)]
    assert (w[SENT], w[ACKED], w[BYTES], w[FIRST_SEQ], w[LAST_SEQ]) == (1, 1, 10, 3, 3)
    assert w[ACKED_BY] == {0: 1}
    counts.add_to(windows, 3_000, lambda *_: None)
    assert (w[SENT], w[ACKED], w[LAST_SEQ]) == (2, 1, 4)


def test_plugin_config_loads_the_plugin_in_reader_mode(tmp_path: Any) -> None:
    cfg = plugin_config(tmp_path / "p.so", "~0123456789abcdef", 5_000)
    assert cfg == {
        "plugin.library.paths": str(tmp_path / "p.so"),
        "kafka.audit.emit": "false",
        "kafka.audit.id": "~0123456789abcdef",
        "kafka.audit.window.ms": "5000",
    }


def test_plugin_path_settings_fail_clearly() -> None:
    with pytest.raises(ConfigError, match="stamp_version"):
        AuditedProducer(
            {"bootstrap.servers": "127.0.0.1:9"}, ProducerAuditSettings(counting="plugin", stamp_version=1)
        )
    with pytest.raises(ConfigError, match=r"plugin\.library\.paths"):
        AuditedProducer(
            {"bootstrap.servers": "127.0.0.1:9", "plugin.library.paths": "x.so"},
            ProducerAuditSettings(counting="plugin"),
        )
    with pytest.raises(ValueError, match="counting") as err:
        ProducerAuditSettings(counting="c")
    assert "'python' or 'plugin'" in str(err.value)
