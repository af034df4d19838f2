"""The librdkafka plugin's counts, read back into an audited producer's windows (the plugin path).

With ``counting="plugin"`` (:class:`~audit_producer.settings.ProducerAuditSettings`) the inner producers
load the plugin (``rdkafka_plugin/``) in reader mode: ``kafka.audit.emit=false`` and ``kafka.audit.id`` = the
audited producer's id. The plugin then stamps every message in librdkafka's ``on_send`` (the v2 stamp,
``audit_record.stamp``) and counts it per (topic, window of its CreateTime): sent and value bytes in
``on_send``, acknowledged and failed per partition (librdkafka error names, the highest acknowledged offset)
in ``on_acknowledgement``. It sends no snapshots. Every inner producer of one audited producer shares one
plugin auditor (by the id), so a swapped-in producer continues the sequence and the window counts.

:class:`PluginCounts` reads them through the plugin's exported reader functions
(``rdkafka_plugin/src/reader.c``: ``kafka_audit_find``, ``kafka_audit_last_sequence``,
``kafka_audit_read``, loaded with ctypes from the same ``.so`` file, which the dynamic linker gives as the
copy librdkafka loaded) and adds what changed since its previous reading to the producer's count lists
(:mod:`audit_producer.window_counts` layout). The snapshot emitter then sends them as on the Python path,
so each count has one definition: the plugin's (the same as the Python path's: value bytes at send,
partition -1 for a failure before assignment, ``KafkaError.name()`` = ``rd_kafka_err2name``).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from audit_producer.window_counts import (
    ACKED,
    ACKED_BY,
    BYTES,
    DIRTY,
    FAILED,
    FAILED_BY,
    LAST_OFFSET_BY,
    LAST_PRODUCE_MS,
    LAST_SEQ,
    SENT,
    new_window,
)
from kafka_plumbing.errors import KafkaAuditError

log = logging.getLogger(__name__)

READ_BUFFER_BYTES = 1 << 16
"""First size of the buffer a reading is written into, bytes (grown to what the plugin asks for)."""
FAILURES_JUDGED_PER_READING = 1_000
"""At most this many of a window's new failures of one error go to autotune's probation per reading."""

WindowKey = tuple[str, int]
"""A window of the audited producer: (topic, window start in ms since the epoch UTC)."""


def plugin_config(library: Path, producer_id: str, window_ms: int) -> dict[str, str]:
    """Return the librdkafka properties that load the plugin in reader mode for producer ``producer_id``.

    Args:
        library: The plugin's ``.so`` (:func:`kafka_plumbing.rdkafka_plugin.rdkafka_plugin`).
        producer_id: The audited producer's v2 id (``~`` + 16 hex digits); the plugin stamps with it.
        window_ms: Window length, ms (the producer's ``window_ms``).
    """
    return {
        "plugin.library.paths": str(library),
        "kafka.audit.emit": "false",
        "kafka.audit.id": producer_id,
        "kafka.audit.window.ms": str(window_ms),
    }


@dataclass(slots=True)
class PluginWindow:
    """One window's cumulative counts in one reading (a ``W`` line and its ``P`` and ``E`` lines).

    Attributes:
        wid: The plugin's id of the window (a window dropped and started again gets a new one).
        topic: Its topic.
        start: Its start, ms since the epoch UTC.
        sent: Messages stamped into it.
        acknowledged: Successful acknowledgements.
        failed: Failed acknowledgements.
        bytes: Value bytes of the messages stamped, bytes.
        first_sequence: Sequence number of its first message.
        last_sequence: Sequence number of its last message.
        partitions: Partition (-1: failed before assignment) -> (acknowledged, failed, highest acknowledged
            offset or -1).
        errors: (partition, librdkafka error name) -> failed acknowledgements.
        codes: librdkafka error name -> its code.
    """

    wid: int
    topic: str
    start: int
    sent: int
    acknowledged: int
    failed: int
    bytes: int
    first_sequence: int
    last_sequence: int
    partitions: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    errors: dict[tuple[int, str], int] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class PluginReading:
    """What one ``kafka_audit_read`` returned.

    Attributes:
        last_sequence: Sequence number of the last message stamped (0: none).
        unattributed: Acknowledgements the plugin could not place in a window (a dropped window's).
        windows_dropped: Windows dropped at ``kafka.audit.max.windows`` (their later counts are lost).
        internal_errors: Messages left unstamped and uncounted (memory exhausted).
        closed: Every client of the auditor is destroyed: nothing more is counted.
        windows: The open windows' cumulative counts.
    """

    last_sequence: int
    unattributed: int
    windows_dropped: int
    internal_errors: int
    closed: bool
    windows: list[PluginWindow]


def parse_reading(text: str) -> PluginReading:
    """Parse the text ``kafka_audit_read`` writes (format: ``rdkafka_plugin/src/reader.c``).

    Raises:
        KafkaAuditError: if the text does not start with its ``S`` line or a line is malformed.
    """
    lines = text.splitlines()
    if not lines or not lines[0].startswith("S "):
        raise KafkaAuditError(f"librdkafka plugin reading without its S line: {text[:80]!r}")
    try:
        last, unattributed, dropped, internal, closed = (int(x) for x in lines[0].split()[1:])
        reading = PluginReading(last, unattributed, dropped, internal, closed == 1, [])
        w: PluginWindow | None = None
        for line in lines[1:]:
            kind, rest = line[0], line[2:]
            if kind == "W":
                wid, start, sent, acked, failed, value_bytes, first, last_seq, topic = rest.split(" ", 8)
                w = PluginWindow(
                    int(wid),
                    topic,
                    int(start),
                    int(sent),
                    int(acked),
                    int(failed),
                    int(value_bytes),
                    int(first),
                    int(last_seq),
                )
                reading.windows.append(w)
            elif kind == "P" and w is not None:
                p, acked, failed, offset = (int(x) for x in rest.split())
                w.partitions[p] = (acked, failed, offset)
            elif kind == "E" and w is not None:
                p, code, n, name = rest.split(" ", 3)
                w.errors[(int(p), name)] = int(n)
                w.codes[name] = int(code)
            else:
                raise ValueError(line)
    except ValueError as exc:
        raise KafkaAuditError(f"malformed librdkafka plugin reading: {exc}") from exc
    return reading


class PluginCounts:
    """The plugin auditor of one audited producer, read into its count lists.

    Args:
        library: The plugin's ``.so`` the inner producers loaded (the same path).
        producer_id: The audited producer's id (``kafka.audit.id``).

    Raises:
        KafkaAuditError: if the plugin has no auditor of that id (no inner producer loaded it in reader
            mode, or the ``.so`` is an older build without the reader functions).
    """

    def __init__(self, library: Path, producer_id: str) -> None:
        try:
            lib = ctypes.CDLL(str(library))
            self._find = lib.kafka_audit_find
            self._last = lib.kafka_audit_last_sequence
            self._read = lib.kafka_audit_read
        except (OSError, AttributeError) as exc:
            raise KafkaAuditError(
                f"librdkafka plugin {library} has no reader functions ({exc}): rebuild it"
            ) from exc
        self._find.argtypes, self._find.restype = [ctypes.c_char_p], ctypes.c_void_p
        self._last.argtypes, self._last.restype = [ctypes.c_void_p], ctypes.c_longlong
        self._read.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_ulonglong),
            ctypes.c_longlong,
            ctypes.c_char_p,
            ctypes.c_longlong,
        ]
        self._read.restype = ctypes.c_longlong
        self._handle = self._find(producer_id.encode())
        if not self._handle:
            raise KafkaAuditError(f"the librdkafka plugin {library} counts no producer {producer_id}")
        self._buffer = ctypes.create_string_buffer(READ_BUFFER_BYTES)
        self._seen: dict[int, PluginWindow] = {}  # wid -> the window at the previous reading
        self._release: list[int] = []  # windows the producer closed: dropped by the next reading
        self.last_reading: PluginReading | None = None

    def last_sequence(self) -> int:
        """Return the sequence number of the last message the plugin stamped (0: none yet)."""
        return int(self._last(self._handle))

    def read(self) -> PluginReading:
        """Read every open window's cumulative counts; drop the windows released since the last reading.

        Raises:
            KafkaAuditError: if the plugin's memory is exhausted or its reading is malformed.
        """
        release = (ctypes.c_ulonglong * max(1, len(self._release)))(*self._release)
        while True:
            n = self._read(self._handle, release, len(self._release), self._buffer, len(self._buffer))
            if n >= 0:
                break
            if n == -1:
                raise KafkaAuditError("the librdkafka plugin could not write its counts (out of memory)")
            self._buffer = ctypes.create_string_buffer(-n * 2)
        self._release.clear()
        self.last_reading = parse_reading(self._buffer.raw[:n].decode())
        return self.last_reading

    def add_to(
        self,
        windows: dict[WindowKey, list[Any]],
        now: int,
        on_failure: Callable[[int, KafkaError], None],
        reopen: Callable[[WindowKey], list[Any] | None] = lambda key: None,
    ) -> None:
        """Read the plugin and add what changed since the previous reading to ``windows``' count lists.

        A window not in ``windows`` continues the list ``reopen`` gives for it (a window the producer
        closed before a late record, :meth:`~audit_producer.snapshot_emitter.SnapshotEmitter.reopen`),
        else gets a new list.

        Args:
            windows: The producer's open windows' count lists by (topic, start); changed in place.
            now: The caller's clock, ms since the epoch UTC (a window's last produce time when it grew).
            on_failure: Called as ``on_failure(sequence, err)`` for new failures (autotune's probation);
                ``sequence`` is the window's last sequence number (the plugin does not keep the failed
                message's own).
            reopen: The count list of a closed window by (topic, start), or None.
        """
        previous = self.last_reading
        reading = self.read()
        if previous is not None:
            _log_new_failures(previous, reading)
        seen: dict[int, PluginWindow] = {}
        for pw in reading.windows:
            seen[pw.wid] = pw
            before = self._seen.get(pw.wid)
            if before is not None and (pw.sent, pw.acknowledged, pw.failed) == (
                before.sent,
                before.acknowledged,
                before.failed,
            ):
                continue
            key = (pw.topic, pw.start)
            w = windows.get(key)
            if w is None:
                first = pw.first_sequence if before is None else before.last_sequence + 1
                w = windows[key] = reopen(key) or new_window(first, now)
            _add_window(w, pw, before, now, on_failure)
        self._seen = seen

    def release_closed(self, windows: dict[WindowKey, list[Any]]) -> None:
        """Have the next reading drop the plugin's windows that are no longer in ``windows`` (closed)."""
        self._release.extend(wid for wid, pw in self._seen.items() if (pw.topic, pw.start) not in windows)


def _log_new_failures(previous: PluginReading, reading: PluginReading) -> None:
    """Log a warning for each failure counter of the plugin that grew since ``previous``."""
    for name, what in (
        ("unattributed", "acknowledgements it could not place in a window"),
        ("windows_dropped", "windows dropped at kafka.audit.max.windows (their later counts are lost)"),
        ("internal_errors", "messages left unstamped and uncounted (out of memory)"),
    ):
        grew = getattr(reading, name) - getattr(previous, name)
        if grew > 0:
            log.warning("librdkafka plugin: %d more %s (%s in all)", grew, what, getattr(reading, name))


def _add_window(
    w: list[Any],
    pw: PluginWindow,
    before: PluginWindow | None,
    now: int,
    on_failure: Callable[[int, KafkaError], None],
) -> None:
    """Add ``pw``'s counts minus ``before``'s (None: none) to the count list ``w``."""
    sent = pw.sent - (before.sent if before else 0)
    w[SENT] += sent
    w[ACKED] += pw.acknowledged - (before.acknowledged if before else 0)
    w[FAILED] += pw.failed - (before.failed if before else 0)
    w[BYTES] += pw.bytes - (before.bytes if before else 0)
    w[LAST_SEQ] = max(w[LAST_SEQ], pw.last_sequence)
    if sent and now > w[LAST_PRODUCE_MS]:
        w[LAST_PRODUCE_MS] = now
    w[DIRTY] = 1
    acked_by: dict[int, int] = w[ACKED_BY]
    last_by: dict[int, int] = w[LAST_OFFSET_BY]
    for p, (acked, _, offset) in pw.partitions.items():
        old = before.partitions.get(p, (0, 0, -1)) if before else (0, 0, -1)
        if acked > old[0]:
            acked_by[p] = acked_by.get(p, 0) + acked - old[0]
        if offset > last_by.get(p, -1):
            last_by[p] = offset
    failed_by: dict[tuple[int, str], int] = w[FAILED_BY]
    for key, n in pw.errors.items():
        new = n - (before.errors.get(key, 0) if before else 0)
        if new <= 0:
            continue
        failed_by[key] = failed_by.get(key, 0) + new
        err = KafkaError(pw.codes[key[1]])
        for _ in range(min(new, FAILURES_JUDGED_PER_READING)):
            on_failure(pw.last_sequence, err)


__all__ = [
    "FAILURES_JUDGED_PER_READING",
    "READ_BUFFER_BYTES",
    "PluginCounts",
    "PluginReading",
    "PluginWindow",
    "parse_reading",
    "plugin_config",
]
