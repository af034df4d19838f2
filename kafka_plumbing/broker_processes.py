"""The JVMs of a local cluster: the command lines, formatting the storage, starting and stopping by PID.

Nodes run ``kafka.Kafka`` from the Maven jars (:func:`~kafka_plumbing.jvm.classpath`), each in its own
session with its output appended to ``server.log``. A node is stopped by PID: SIGTERM (controlled
shutdown) or SIGKILL, then SIGKILL after a timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from importlib import resources
from pathlib import Path

from kafka_plumbing.jvm import classpath, java_executable
from kafka_plumbing.processes import pid_alive


def java_command(
    main: str, *args: str, heap_mb: int = 256, javaagent: str | None = None, heap_fixed: bool = False
) -> list[str]:
    """Return the command line running ``main`` from the Kafka jars with kafka-audit's log4j2 settings.

    Args:
        main: The main class, e.g. ``kafka.Kafka``.
        args: Its arguments.
        heap_mb: Maximum heap, MiB.
        javaagent: A ``-javaagent:...`` option, or None.
        heap_fixed: Commit and touch the whole heap at start (``-Xms`` = ``-Xmx``,
            ``-XX:+AlwaysPreTouch``); otherwise it starts at min(heap_mb, 256) MiB.

    Raises:
        JavaNotFoundError: if Java is missing.
    """
    log4j = resources.files("kafka_plumbing").joinpath("log4j2.properties")
    return [
        java_executable(),
        f"-Xmx{heap_mb}m",
        *([f"-Xms{heap_mb}m", "-XX:+AlwaysPreTouch"] if heap_fixed else [f"-Xms{min(heap_mb, 256)}m"]),
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        *([javaagent] if javaagent else []),
        "-cp",
        classpath("kafka"),
        main,
        *args,
    ]


def format_storage(properties: Path, cluster_id: str, extra: list[str]) -> subprocess.CompletedProcess[str]:
    """Format a node's storage with the Kafka storage tool (``kafka.tools.StorageTool format``).

    Args:
        properties: The node's ``server.properties``.
        cluster_id: The KRaft cluster id.
        extra: More arguments, e.g. ``--add-scram`` ones (which hold passwords: mask the output).

    Returns:
        The finished tool: ``returncode``, ``stdout`` and ``stderr`` (the caller judges them).

    Raises:
        JavaNotFoundError: if Java is missing.
    """
    return subprocess.run(
        java_command(
            "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(properties), *extra
        ),
        capture_output=True,
        text=True,
        check=False,
    )


def launch_broker(
    properties: Path, log_path: Path, heap_mb: int, javaagent: str | None, heap_fixed: bool
) -> subprocess.Popen[bytes]:
    """Start ``kafka.Kafka`` with ``properties`` in a new session, its output appended to ``log_path``.

    Args:
        properties: The node's ``server.properties``.
        log_path: Where stdout and stderr go.
        heap_mb: JVM heap, MiB (see :func:`java_command`).
        javaagent: A ``-javaagent:...`` option, or None.
        heap_fixed: Commit the whole heap at start (see :func:`java_command`).

    Raises:
        JavaNotFoundError: if Java is missing.
        OSError: the log cannot be opened or the JVM cannot be started.
    """
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            java_command(
                "kafka.Kafka", str(properties), heap_mb=heap_mb, javaagent=javaagent, heap_fixed=heap_fixed
            ),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def signal_stop(pid: int, kill: bool = False) -> None:
    """Send SIGTERM (controlled shutdown), or SIGKILL with ``kill``, to ``pid`` if it runs."""
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)


def stop_process(
    pid: int, timeout_s: float, kill: bool = False, child: subprocess.Popen[bytes] | None = None
) -> None:
    """Stop ``pid``: SIGTERM (or SIGKILL with ``kill``), then SIGKILL after ``timeout_s`` s.

    Args:
        pid: The process.
        timeout_s: How long it may take to exit after the first signal, s.
        kill: Send SIGKILL at once.
        child: Its ``Popen`` when this process started it: reaped (no zombie left), waiting up to
            ``timeout_s`` s.

    Raises:
        subprocess.TimeoutExpired: ``child`` was not reaped in time.
    """
    if pid_alive(pid):
        signal_stop(pid, kill)
        deadline = time.monotonic() + timeout_s
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    if child is not None:
        child.wait(timeout_s)
