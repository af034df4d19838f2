"""A Spark standalone cluster on 127.0.0.1: one master and one-core workers from pyspark's ``spark-class``.

``spark-class org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker`` run in the
foreground (``spark-class`` execs ``java``, so the PID we start is the JVM's), bound to 127.0.0.1
(``SPARK_LOCAL_IP``, ``--host``) on free ports, with ``SPARK_DAEMON_MEMORY`` heaps; each worker offers
1 core and ``executor_memory_mb`` to applications. They are stopped by PID. An executor is a child
process of its worker (``CoarseGrainedExecutorBackend``), found in ``/proc``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kafka_plumbing.cluster_ports import HOST, free_port
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.jvm import java_executable
from soak.processes import ManagedProcess, children, cmdline

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


class SparkClusterError(KafkaAuditError):
    """The standalone cluster did not come up; the message has the log tail."""


def spark_home() -> Path:
    """Return the pyspark package directory: its ``bin/spark-class`` and ``jars`` are a Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env(daemon_memory_mb: int = 256) -> dict[str, str]:
    """Environment of the master and workers: loopback only, Java from ``kafka_plumbing.jvm``."""
    java = Path(os.path.realpath(java_executable()))
    root = str(Path(__file__).resolve().parent.parent)  # the checkout, for the executors' Python workers
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [root, *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]
        ),
        "SPARK_HOME": str(spark_home()),
        "JAVA_HOME": str(java.parent.parent),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DAEMON_MEMORY": f"{daemon_memory_mb}m",
        "SPARK_NO_DAEMONIZE": "1",
    }


@dataclass
class Worker:
    """One standalone worker: its process, its number (1-based) and its work directory."""

    number: int
    process: ManagedProcess
    work_dir: Path

    def executor_pids(self) -> list[int]:
        """PIDs of the executors this worker runs (its ``CoarseGrainedExecutorBackend`` children)."""
        pid = self.process.pid
        if pid is None:
            return []
        return [c for c in children(pid) if EXECUTOR_CLASS in cmdline(c)]


class SparkStandalone:
    """Master + ``workers`` one-core workers under ``data_dir``.

    Attributes:
        master_url: ``spark://127.0.0.1:<port>`` once started.
    """

    def __init__(self, data_dir: Path, workers: int = 2, worker_memory_mb: int = 1024) -> None:
        self.data_dir = Path(data_dir)
        self.worker_memory_mb = worker_memory_mb
        self.port = free_port()
        self.webui_port = free_port()
        self.master_url = f"spark://{HOST}:{self.port}"
        self.master = ManagedProcess(
            [
                str(spark_home() / "bin" / "spark-class"),
                MASTER_CLASS,
                "--host",
                HOST,
                "--port",
                str(self.port),
                "--webui-port",
                str(self.webui_port),
            ],
            self.data_dir / "master.log",
            spark_env(),
        )
        self.workers = [self._worker(i + 1) for i in range(workers)]

    def _worker(self, number: int) -> Worker:
        work = self.data_dir / f"worker-{number}"
        argv = [
            str(spark_home() / "bin" / "spark-class"),
            WORKER_CLASS,
            "--host",
            HOST,
            "--cores",
            "1",
            "--memory",
            f"{self.worker_memory_mb}m",
            "--webui-port",
            str(free_port()),
            "--work-dir",
            str(work),
            self.master_url,
        ]
        return Worker(number, ManagedProcess(argv, self.data_dir / f"worker-{number}.log", spark_env()), work)

    def state(self) -> dict[str, object]:
        """Return the master's JSON status (``/json`` of its web UI): workers, applications."""
        with urllib.request.urlopen(f"http://{HOST}:{self.webui_port}/json", timeout=5) as reply:
            return json.loads(reply.read())

    def alive_workers(self) -> int:
        """Workers the master counts ALIVE (0 when the master does not answer)."""
        try:
            workers = self.state().get("workers", [])
        except OSError:
            return 0
        return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")

    def start(self, timeout_s: float = 90.0) -> None:
        """Start the master and every worker; return once the master counts every worker ALIVE.

        Raises:
            SparkClusterError: a process exited or the deadline passed (log tails in the message).
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.master.start()
        self._wait(lambda: self._master_up(), timeout_s, "master")
        for w in self.workers:
            w.process.start()
        self._wait(lambda: self.alive_workers() >= len(self.workers), timeout_s, "workers")

    def _master_up(self) -> bool:
        try:
            self.state()
        except OSError:
            return False
        return True

    def _wait(self, ready: object, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():  # type: ignore[operator]
            for p in (self.master, *(w.process for w in self.workers)):
                if p.proc is not None and p.exited() is not None:
                    tail = p.log_path.read_text(errors="replace")[-2000:]
                    raise SparkClusterError(f"{p.log_path.stem} exited with {p.exited()}:\n{tail}")
            if time.monotonic() > deadline:
                tail = self.master.log_path.read_text(errors="replace")[-2000:]
                raise SparkClusterError(f"Spark {what} not ready in {timeout_s:.0f} s; master log:\n{tail}")
            time.sleep(0.5)

    def kill_worker(self, number: int) -> list[int]:
        """SIGKILL worker ``number`` and its executors (executor loss); return the PIDs killed."""
        w = self.workers[number - 1]
        executors = w.executor_pids()
        killed = [p for p in [w.process.pid, *executors] if p is not None]
        w.process.kill()
        for pid in executors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return killed

    def restart_worker(self, number: int, timeout_s: float = 90.0) -> None:
        """Start worker ``number`` again; return once the master counts every worker ALIVE."""
        self.workers[number - 1].process.start()
        self._wait(lambda: self.alive_workers() >= len(self.workers), timeout_s, "restarted worker")

    def stop(self) -> None:
        """Stop workers (and their executors), then the master, by PID."""
        for w in self.workers:
            executors = w.executor_pids()
            w.process.stop(20)
            for pid in executors:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.master.stop(20)
