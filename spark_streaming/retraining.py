"""Background retraining for the live job: when to start one, and the one process that runs it.

Retraining never runs inside a micro-batch. The driver, between micro-batches, asks
:class:`RetrainPolicy` whether one is due (every ``every_windows`` new windows in the training store,
or every ``every_minutes`` once ``min_windows`` new ones are stored) and, if so, starts
``kafka-audit predictor retrain --registry R --from-results T ...`` (:func:`retrain_command`) as a
child process (:class:`RetrainProcess`), one at a time, and polls it without waiting. The child does
everything else: it trains a challenger, records the decision in the registry, and promotes it if it
wins (:func:`predictor.promotion.run_retraining`); the job notices the promotion at the next
micro-batch boundary (:mod:`spark_streaming.live_model`).

A child that crashes or is killed leaves the registry as it was (its writes are atomic renames), so
the champion keeps serving and the job keeps running; its end is counted by result: ``completed``
(exit 0), ``failed`` (another exit code), ``killed`` (ended by a signal, or stopped with the job).

One writer per registry: the child holds an exclusive ``flock`` on ``<registry>/.retrain.lock``
(inherited from the driver, which lets go of its own copy), so a retraining that outlives a killed
driver finishes on its own and a restarted job starts none until it has.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from predictor.settings import RetrainSettings

log = logging.getLogger(__name__)

LOCK_FILE = ".retrain.lock"
"""In the registry directory: held by the running retraining process."""
LOG_FILE = "retrain.log"
"""In the registry directory: the retraining processes' output, appended."""
RESULTS = ("completed", "failed", "killed")
"""How a retraining process ended (``kafka_audit_retrain_runs_total{result}``)."""


@dataclass(frozen=True)
class RetrainPolicy:
    """When a retraining is due.

    Attributes:
        every_windows: New stored windows that start one.
        every_minutes: Minutes since the last start after which one starts anyway ...
        min_windows: ... if at least this many new windows are stored.
    """

    every_windows: int = 200
    every_minutes: float = 60.0
    min_windows: int = 50

    def due(self, new_windows: int, last_start_ms: float, now_ms: float) -> bool:
        """Return True if a retraining should start now.

        Args:
            new_windows: Windows stored since the last start.
            last_start_ms: When the last one started (or the job first started), ms since the epoch.
            now_ms: Now, ms since the epoch.
        """
        if new_windows >= self.every_windows:
            return True
        return new_windows >= self.min_windows and now_ms - last_start_ms >= self.every_minutes * 60_000


def retrain_command(
    registry_dir: Path,
    training_dir: Path,
    base_data: Sequence[Path],
    settings: RetrainSettings,
    base_model_dir: Path | None = None,
) -> list[str]:
    """Return the argument list of the background retraining (``python -m kafka_audit predictor retrain``).

    Args:
        registry_dir: The model registry (champion, versions, decisions).
        training_dir: The training store (``--from-results``).
        base_data: Base data CSVs (the paper's first, then testbed grids).
        settings: The job's retraining settings; only the fields set explicitly become options
            (e.g. ``RetrainSettings(min_windows=50, calibrated_mae=0.05)``: ``--calibrated-mae 0.05
            --min-windows 50``), the child reads the others from its environment
            (``KAFKA_AUDIT_RETRAIN_*``) or takes their defaults.
        base_model_dir: The job's pinned base model (``--model``; None: the shipped one).
    """
    cmd = [sys.executable, "-m", "kafka_audit", "predictor", "retrain"]
    cmd += ["--registry", str(registry_dir), "--from-results", str(training_dir)]
    for path in base_data:
        cmd += ["--data", str(path)]
    cmd += settings.command_line()
    if base_model_dir is not None:
        cmd += ["--model", str(base_model_dir)]
    return cmd


class RetrainProcess:
    """At most one retraining child process, started and polled without blocking.

    Args:
        registry_dir: Holds the lock file and the log (created if missing).
        env: Extra environment of the child.
    """

    def __init__(self, registry_dir: Path, env: dict[str, str] | None = None) -> None:
        self.registry_dir = Path(registry_dir)
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_ms = 0
        self._stopping = False
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """PID of the running child (None if none)."""
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        """True while a child started here has not been reaped by :meth:`poll` or :meth:`stop`."""
        return self.proc is not None

    def _lock(self) -> int | None:
        """Return an fd holding the registry's retrain lock, or None if another process holds it."""
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.registry_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def start(self, cmd: Sequence[str]) -> bool:
        """Start ``cmd`` unless a retraining runs (here or, holding the lock, anywhere); True if started."""
        if self.proc is not None:
            return False
        fd = self._lock()
        if fd is None:
            log.info("retraining not started: another process holds %s", self.registry_dir / LOCK_FILE)
            return False
        try:
            self._log = open(self.registry_dir / LOG_FILE, "ab")  # noqa: SIM115 - closed when reaped
            self._log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S%z')} {' '.join(cmd)}\n".encode())
            self._log.flush()
            self.proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                pass_fds=(fd,),  # the child keeps the lock for as long as it lives
                start_new_session=True,  # the job stops it itself (Ctrl-C on the job is not its signal)
            )
        except OSError:
            self._close_log()
            raise
        finally:
            os.close(fd)
        self.started_ms = int(time.time() * 1000)
        self._stopping = False
        log.info("retraining started (pid %d): %s", self.proc.pid, " ".join(cmd))
        return True

    def poll(self) -> str | None:
        """Reap the child if it has ended; return how (one of :data:`RESULTS`) or None if still running."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return self._reap()

    def _reap(self) -> str:
        assert self.proc is not None
        code = self.proc.returncode
        result = "completed" if code == 0 else "killed" if code < 0 or self._stopping else "failed"
        took = (time.time() * 1000 - self.started_ms) / 1000
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        level = logging.INFO if result == "completed" else logging.WARNING
        log.log(
            level,
            "retraining (pid %d) %s after %.1f s (%s); the champion keeps serving unless it promoted one"
            " (log: %s)",
            self.proc.pid,
            result,
            took,
            how,
            self.registry_dir / LOG_FILE,
        )
        self.proc = None
        self._close_log()
        return result

    def stop(self, timeout_s: float = 10.0) -> str | None:
        """Stop a running child (SIGTERM, then SIGKILL after ``timeout_s``); return how it ended."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._stopping = True
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return self._reap()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def describe(self) -> dict[str, Any]:
        """Return ``{"pid", "started_ms"}`` of the running child (empty if none)."""
        return {"pid": self.pid, "started_ms": self.started_ms} if self.proc is not None else {}
