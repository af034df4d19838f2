"""Processes the soak starts and samples: start, SIGKILL, restart by PID; RSS and CPU from ``/proc``.

A :class:`Component` is one long-running program (an audit consumer, the Spark driver, Prometheus...)
with its incarnations (PID, start, end): the records say which incarnation a sample belongs to.
Memory and CPU are read from ``/proc/<pid>/status`` (``VmRSS``, kB) and ``/proc/<pid>/stat`` (utime +
stime, clock ticks; proc(5)), summed over the process and its descendants that no other component
claims (the driver's JVM belongs to the driver; an executor is its own component, not its worker's).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from audit_record import now_ms
from kafka_plumbing.processes import pid_alive

_PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
"""Clock ticks per second of ``/proc/<pid>/stat`` times (``getconf CLK_TCK``)."""


def children(pid: int) -> list[int]:
    """Return the direct children of ``pid`` (``/proc/<pid>/task/*/children``; [] when it is gone)."""
    out: list[int] = []
    try:
        for task in (_PROC / str(pid) / "task").iterdir():
            try:
                out.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
    except OSError:
        return []
    return out


def descendants(pid: int, exclude: Iterable[int] = ()) -> list[int]:
    """Return ``pid`` and its descendants, leaving out the subtrees rooted at ``exclude``."""
    skip = set(exclude)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in skip:
            continue
        out.append(p)
        todo.extend(children(p))
    return out


def rss_bytes(pid: int) -> int:
    """Resident set size of one process, bytes (``VmRSS``; 0 when it is gone or a kernel thread)."""
    try:
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0
    return 0


def cpu_seconds(pid: int) -> float:
    """CPU time of one process so far (user + system), s; 0.0 when it is gone."""
    try:
        fields = (_PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime: fields 14, 15 of proc(5)
    except (OSError, ValueError, IndexError):
        return 0.0


def command_name(pid: int) -> str:
    """Return the process's command name (``/proc/<pid>/comm``: ``java``, ``python3`` ...; '' when gone)."""
    try:
        return (_PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> str:
    """Return the process's command line, arguments joined by spaces ('' when it is gone)."""
    try:
        return (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class Incarnation:
    """One run of a component: its PID, when it started and (once over) ended, ms since the epoch."""

    pid: int
    started_ms: int
    ended_ms: int | None = None
    how_ended: str | None = None


@dataclass
class Component:
    """A long-running program of the soak that is sampled and may be killed.

    Attributes:
        name: Name in the records (``broker-1``, ``audit-consumer-2``, ``spark-driver`` ...).
        kind: Kind for grouping (``broker``, ``audit-consumer``, ``spark-executor`` ...).
        pid_of: Returns the current root PID (None while down).
        exclude: Returns root PIDs of other components inside this one's tree (not counted here).
        incarnations: Every run so far, oldest first.
    """

    name: str
    kind: str
    pid_of: Callable[[], int | None]
    exclude: Callable[[], Iterable[int]] = lambda: ()
    incarnations: list[Incarnation] = field(default_factory=list)

    def pids(self) -> list[int]:
        """Root PID and its descendants (other components' subtrees left out); [] while down."""
        pid = self.pid_of()
        if pid is None or not pid_alive(pid):
            return []
        self.note(pid)
        return descendants(pid, self.exclude())

    def note(self, pid: int) -> None:
        """Record ``pid`` as the current incarnation (a new one when the PID changed)."""
        if not self.incarnations or self.incarnations[-1].pid != pid:
            if self.incarnations and self.incarnations[-1].ended_ms is None:
                self.incarnations[-1].ended_ms = now_ms()
                self.incarnations[-1].how_ended = "replaced"
            self.incarnations.append(Incarnation(pid, now_ms()))

    def ended(self, how: str) -> None:
        """Mark the current incarnation over (``how``: ``SIGKILL``, ``stopped`` ...)."""
        if self.incarnations and self.incarnations[-1].ended_ms is None:
            self.incarnations[-1].ended_ms = now_ms()
            self.incarnations[-1].how_ended = how


class ManagedProcess:
    """A program the soak starts itself: ``argv`` with ``env``, output appended to ``log_path``.

    Started in its own session, so SIGKILL of the process group takes its children too (the driver's
    JVM, a Python worker). Stopped and killed by PID only.
    """

    def __init__(self, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """PID of the running process, None when not started or exited."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        return self.proc.pid

    def start(self) -> int:
        """Start the program; return its PID."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL the process and everything in its process group (no clean-up runs); reap it."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session leader's group: its JVM, workers
        self.proc.wait(30)

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL the process group; reap it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # leftovers of its group (a JVM that outlived it)
        self.proc.wait(30)

    def exited(self) -> int | None:
        """Exit code once it exited on its own, else None."""
        return None if self.proc is None else self.proc.poll()


@dataclass
class Sample:
    """One component's resource use at one time.

    Attributes:
        component: Component name.
        at_ms: When, ms since the epoch.
        pid: Root PID (None while down).
        rss_bytes: Resident memory of its processes, bytes.
        cpu_s: Their CPU time so far (user + system), s.
        processes: How many processes were summed.
        rss_by_command: ``rss_bytes`` split by command name (``/proc/<pid>/comm``: ``java``,
            ``python3`` ...), bytes, so growth can be told apart (the driver's JVM from its Python).
    """

    component: str
    at_ms: int
    pid: int | None
    rss_bytes: int
    cpu_s: float
    processes: int
    rss_by_command: dict[str, int] = field(default_factory=dict)


def sample(component: Component) -> Sample:
    """Read the component's RSS and CPU time now."""
    pids = component.pids()
    by_command: dict[str, int] = {}
    for p in pids:
        name = command_name(p)
        by_command[name] = by_command.get(name, 0) + rss_bytes(p)
    return Sample(
        component=component.name,
        at_ms=now_ms(),
        pid=pids[0] if pids else None,
        rss_bytes=sum(by_command.values()),
        cpu_s=sum(cpu_seconds(p) for p in pids),
        processes=len(pids),
        rss_by_command=by_command,
    )
