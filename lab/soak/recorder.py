"""What a soak records while it runs (``records/`` in its data directory).

Every ``record_interval_s`` (60 s):

* ``samples.jsonl``: per component its root PID, RSS (bytes) and CPU time so far (s) from ``/proc``
  (:func:`soak.processes.sample`), and ``cpu_pct``: CPU over the interval, percent of one core;
* ``minutes.jsonl``: one line per interval: ``minute`` since the load started, the micro-batches of
  the interval (count, p50 and max ``triggerExecution``, ms; from the driver's ``progress.jsonl``),
  the audit lag (s: now minus the job's watermark at its newest micro-batch), final and provisional
  window results so far (``results.jsonl``), and the alerts active in Alertmanager and firing in
  Prometheus (names).

Every 5 s it also asks Prometheus for its firing alerts, so the verdict sees each one with its
``activeAt`` (``prometheus_alerts``). The driver itself writes ``progress.jsonl`` and ``results.jsonl``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit_record import now_ms
from soak.processes import sample
from soak.verdict import percentile

if TYPE_CHECKING:
    from soak.run import Soak

log = logging.getLogger(__name__)
ALERT_POLL_S = 5.0


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every JSON line of ``path`` ([] when missing; a torn last line is skipped)."""
    return list(_lines(path))


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return
    for line in text.splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


class Recorder(threading.Thread):
    """The sampling thread of one soak."""

    def __init__(self, soak: Soak) -> None:
        super().__init__(name="recorder", daemon=True)
        self.soak = soak
        self._stop_event = threading.Event()
        self._cpu: dict[str, tuple[int | None, float, int]] = {}
        self._batches_seen = 0
        self._prom: dict[tuple[str, str, str, int], dict[str, Any]] = {}

    def stop(self) -> None:
        """Take a last record and stop."""
        if self._stop_event.is_set():
            return
        self._stop_event.set()
        if self.is_alive():
            self.join(60)

    def run(self) -> None:
        """Record now, then every interval, until stopped (a failing record is logged and skipped)."""
        next_record = 0.0
        import time

        while True:
            now = time.monotonic()
            try:
                self._poll_prometheus()
                if now >= next_record:
                    self.record()
                    next_record = now + self.soak.s.record_interval_s
            except Exception:
                log.warning("soak: record failed", exc_info=True)
            if self._stop_event.wait(ALERT_POLL_S):
                try:
                    self.record()
                except Exception:
                    log.warning("soak: last record failed", exc_info=True)
                return

    def _poll_prometheus(self) -> None:
        prom = self.soak.prometheus
        if prom is None:
            return
        for a in prom.firing():
            if a.get("state") != "firing":
                continue
            labels = a.get("labels", {})
            started = _ms(a["activeAt"]) if a.get("activeAt") else now_ms()
            key = (labels.get("alertname", ""), labels.get("topic", ""), labels.get("tier", ""), started)
            self._prom.setdefault(
                key,
                {
                    "alertname": key[0],
                    "topic": key[1],
                    "tier": key[2],
                    "starts_at_ms": started,
                    "status": "firing",
                    "source": "prometheus",
                    "first_seen_ms": now_ms(),
                },
            )

    def prometheus_alerts(self) -> list[dict[str, Any]]:
        """Every Prometheus alert seen firing (one per episode: name, topic, tier, activeAt)."""
        return list(self._prom.values())

    def record(self) -> None:
        """Take one record: component samples and the minute line."""
        soak = self.soak
        at = now_ms()
        minute = (at - soak.load_started_ms) / 60_000
        with open(soak.records / "samples.jsonl", "a") as f:
            for comp in list(soak.components.values()):
                s = sample(comp)
                prev = self._cpu.get(comp.name)
                cpu_pct = None
                if prev is not None and prev[0] == s.pid and s.at_ms > prev[2]:
                    cpu_pct = 100 * (s.cpu_s - prev[1]) / ((s.at_ms - prev[2]) / 1000)
                self._cpu[comp.name] = (s.pid, s.cpu_s, s.at_ms)
                f.write(json.dumps({**asdict(s), "cpu_pct": cpu_pct, "minute": round(minute, 2)}) + "\n")
        progress = read_jsonl(soak.records / "progress.jsonl")
        new = progress[self._batches_seen :]
        self._batches_seen = len(progress)
        durations = [float(r["duration_ms"]) for r in new]
        lag = progress[-1].get("lag_s") if progress else None
        results = soak.final_results()
        am = soak.alertmanager.alerts() if soak.alertmanager else []
        prom = soak.prometheus.firing() if soak.prometheus else []
        line = {
            "at_ms": at,
            "minute": round(minute, 2),
            "batches": len(durations),
            "batch_p50_ms": percentile(durations, 50) if durations else None,
            "batch_max_ms": max(durations) if durations else None,
            "lag_s": lag,
            "final_windows": len(results),
            "alertmanager": sorted({a.get("labels", {}).get("alertname", "") for a in am}),
            "prometheus": sorted(
                {a.get("labels", {}).get("alertname", "") for a in prom if a.get("state") == "firing"}
            ),
        }
        with open(soak.records / "minutes.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")
