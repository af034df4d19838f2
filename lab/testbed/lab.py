"""The testbed lab: a producer namespace, a local Kafka cluster reachable from it, and measured runs.

A :class:`Lab` owns (1) a :class:`~testbed.netns.ProducerNamespace` and (2) a
:class:`~kafka_plumbing.local_cluster.KafkaCluster` (3 brokers, like the paper's testbed) whose client
listener is bound to the host end of the veth pair, so the producer reaches the brokers only through the
impaired link while everything else (audit consumer, Spark, verifier) runs in the root namespace.
:meth:`Lab.produce` runs one audited producer process inside the namespace; :meth:`Lab.truth` asks the
verifier for the ground truth of that producer's messages.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit_consumer.ground_truth import Verification, verify_topic
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic, watermarks
from testbed.impairment import Impairment
from testbed.netns import DEFAULT_CONGESTION_CONTROL, ProducerNamespace
from testbed.producer_process import ProducerRun

_STDERR_LOGS: weakref.WeakKeyDictionary[subprocess.Popen[str], Path] = weakref.WeakKeyDictionary()
"""Where each producer process started by :meth:`Lab.start_producer` writes its stderr."""


class LabError(KafkaAuditError):
    """A testbed run failed (a producer process died, the cluster would not start...)."""


@dataclass
class ProducerOutcome:
    """One producer process's run and the ground truth of its messages.

    Attributes:
        producer_id: Audit producer id (the stamp's producer id).
        sent: Messages the producer was given (produce() calls), messages.
        seconds: Wall time from the first produce() to the end of the final flush, s.
        received: Copies in the topic, duplicates included (verifier).
        unique: Distinct sequence numbers in the topic (verifier).
        not_handed_over: Messages the load could not hand to the producer within its
            ``message.timeout.ms`` (a full queue): lost to the application although never sent.
        config_events: The autotuned producer's configuration events (applied, rejected, rolled back).
        producer_ids: Every audit producer id of the process (``producer_id`` first; more when its load
            followed a ``producers`` hint); the verifier's counts of all of them are the outcome's.
        max_producers: The most producers the process ran at once.
    """

    producer_id: str
    sent: int
    seconds: float
    received: int = 0
    unique: int = 0
    not_handed_over: int = 0
    config_events: list[dict[str, Any]] = field(default_factory=list)
    producer_ids: list[str] = field(default_factory=list)
    max_producers: int = 1

    def __post_init__(self) -> None:
        if self.producer_id not in self.producer_ids:
            self.producer_ids = [self.producer_id, *self.producer_ids]

    @property
    def offered(self) -> int:
        """Messages the application offered: sent + not handed over."""
        return self.sent + self.not_handed_over

    @property
    def p_loss_offered(self) -> float:
        """R_l of the offered load, fraction: (sent - unique + not handed over) / offered.

        Issue 14 item 4: a message the application could not hand to a producer counts as lost.
        """
        return (self.lost + self.not_handed_over) / self.offered if self.offered else 0.0

    @property
    def lost(self) -> int:
        """Sent - unique, messages."""
        return max(0, self.sent - self.unique)

    @property
    def duplicated(self) -> int:
        """Received - unique, messages."""
        return self.received - self.unique

    @property
    def p_loss(self) -> float:
        """R_l = (sent - unique) / sent (paper Eq. 3), fraction."""
        return self.lost / self.sent if self.sent else 0.0

    @property
    def p_dup(self) -> float:
        """R_d = duplicated / sent (paper Eq. 3), fraction."""
        return self.duplicated / self.sent if self.sent else 0.0


class Lab:
    """Namespace + cluster for testbed runs; a context manager that stops both (also on Ctrl-C).

    Args:
        data_dir: Where the cluster keeps its data.
        brokers: 1 or 3 (the paper's testbed had 3).
        seed: Seed of the packet handler.
        audit_topic: Topic of the audit snapshots.
        congestion_control: TCP congestion control of the producer's namespace
            (:data:`~testbed.netns.DEFAULT_CONGESTION_CONTROL`).

    Raises:
        NetworkError: if not root or the namespace cannot be created.
        ClusterError: if Kafka does not start.
    """

    def __init__(
        self,
        data_dir: Path,
        brokers: int = 3,
        seed: int = 0,
        audit_topic: str = "__kafka_audit",
        congestion_control: str = DEFAULT_CONGESTION_CONTROL,
    ) -> None:
        self.ns = ProducerNamespace(seed=seed, congestion_control=congestion_control)
        self.audit_topic = audit_topic
        self.logs_dir = Path(data_dir) / "producer-logs"
        self._log_numbers = itertools.count()
        try:
            self.cluster = KafkaCluster.create(
                Path(data_dir) / "kafka", brokers=brokers, broker_host=self.ns.host_ip, heap_mb=512
            )
            self.cluster.start()
        except BaseException:
            self.ns.close()
            raise

    @property
    def bootstrap_servers(self) -> str:
        """``bootstrap.servers`` of the lab's cluster (the veth host address)."""
        return self.cluster.bootstrap_servers

    @property
    def kconfig(self) -> dict[str, object]:
        """Librdkafka connection config for clients in the root namespace."""
        return {"bootstrap.servers": self.bootstrap_servers}

    def close(self) -> None:
        """Stop the cluster, then remove the namespace."""
        try:
            self.cluster.stop()
        finally:
            self.ns.close()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topic(self, name: str, partitions: int = 3) -> str:
        """Create ``name`` (replicated over every broker) unless it exists; return it."""
        ensure_topic(self.kconfig, name, partitions=partitions)
        return name

    def delete_topic(self, name: str) -> None:
        """Delete ``name`` (experiments clean up after themselves; errors are ignored)."""
        from confluent_kafka.admin import AdminClient

        with contextlib.suppress(Exception):
            AdminClient(dict(self.kconfig)).delete_topics([name], operation_timeout=10)[name].result(15)

    def apply(self, impairment: Impairment) -> None:
        """Impair the producer's link from now on (see :meth:`ProducerNamespace.apply`)."""
        self.ns.apply(impairment)

    def start_producer(self, run: ProducerRun) -> subprocess.Popen[str]:
        """Start one audited producer process inside the namespace (see :meth:`finish_producer`).

        Its stderr (librdkafka's log lines, Python warnings) goes to ``<data_dir>/producer-logs/<client
        id>-<n>.stderr``, not to a pipe: nobody reads a pipe until the process is finished, and a lossy
        link makes librdkafka log enough to fill one (64 KB), after which every write blocks, librdkafka's
        broker threads and the load's thread with it (the load stalled for minutes). Stdout carries one
        JSON line (the result) and stays a pipe.
        """
        spec = run.model_copy(update={"bootstrap_servers": self.bootstrap_servers})
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.logs_dir / f"{run.client_id}-{next(self._log_numbers)}.stderr"
        with log_path.open("w") as stderr:
            proc = self.ns.popen(
                [sys.executable, "-m", "testbed.producer_process", spec.model_dump_json()],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
            )
        _STDERR_LOGS[proc] = log_path
        return proc

    @staticmethod
    def finish_producer(proc: subprocess.Popen[str], timeout_s: float = 600.0) -> ProducerOutcome:
        """Wait for a producer process; return what it sent.

        Raises:
            LabError: if it fails or does not finish within ``timeout_s``.
        """
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.communicate()
            raise LabError(f"producer process did not finish within {timeout_s:.0f} s") from exc
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            log_path = _STDERR_LOGS.get(proc)
            if log_path is not None and log_path.exists():
                err = log_path.read_text(errors="replace")
            raise LabError(f"producer process failed ({proc.returncode}): {(err or '').strip()[-2000:]}")
        res: dict[str, Any] = json.loads(lines[-1])
        return ProducerOutcome(
            str(res["producer_id"]),
            int(res["produced"]),
            float(res["seconds"]),
            not_handed_over=int(res.get("not_handed_over") or 0),
            config_events=list(res.get("config_events") or []),
            producer_ids=[str(x) for x in res.get("producer_ids") or []],
            max_producers=int(res.get("max_producers") or 1),
        )

    def produce(self, run: ProducerRun, timeout_s: float = 600.0) -> ProducerOutcome:
        """Run one producer process to completion (no ground truth yet; see :meth:`truth`)."""
        return self.finish_producer(self.start_producer(run), timeout_s)

    def truth(
        self, topic: str, window_ms: int, outcomes: list[ProducerOutcome], timeout_s: float = 120.0
    ) -> Verification:
        """Read ``topic`` in full and fill each outcome's ``received`` and ``unique`` (verifier).

        Call it after the producers exited. It first waits until the producers' connections are drained
        (:meth:`ProducerNamespace.wait_drained`: the kernel keeps delivering an exited producer's send
        queue for seconds), reads while the producers' final snapshots are not visible yet, and reads
        again if the topic grew while it was being read (its watermarks hold more than was read).

        Raises:
            NetworkError: if the producers' connections are not drained within ``timeout_s``.
            VerifyError: if the topic cannot be verified within ``timeout_s``.
        """
        import time

        from audit_consumer.ground_truth import VerifyError

        deadline = time.monotonic() + timeout_s
        self.ns.wait_drained(timeout_s)
        while True:
            try:
                v = verify_topic(self.kconfig, topic, window_ms, audit_topic=self.audit_topic)
            except VerifyError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
                continue
            held = sum(high - low for low, high in watermarks(self.kconfig, topic).values())
            if v.messages >= held:
                break
            if time.monotonic() > deadline:
                raise VerifyError(f"topic {topic!r} still grows: {v.messages} messages read, it holds {held}")
        by_pid = {pid: o for o in outcomes for pid in o.producer_ids}
        for o in outcomes:
            o.received = o.unique = 0
        for (_, pid), row in v.rows.items():
            o = by_pid.get(pid or "")
            if o is not None:
                o.received += row.received
                o.unique += row.unique
        return v


def stop_quietly(proc: subprocess.Popen[Any]) -> None:
    """Terminate a child process (producer) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
