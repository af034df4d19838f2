"""MirrorMaker 2 between two clusters, run by the project like the local broker (dedicated mode).

Apache Kafka's MirrorMaker 2 (MM2, ``org.apache.kafka:connect-mirror``, KIP-382) from Maven Central
(``jvm/pom.xml`` profile ``mirror``, fetched by ``make bootstrap`` into ``<cache>/jars-mirror``; the same
Kafka version as the broker), started as ``org.apache.kafka.connect.mirror.MirrorMaker`` in *dedicated
mode* with a generated ``mm2.properties``:

* ``clusters = <source>, <target>``; the one flow ``<source>-><target>.enabled``, the reverse disabled;
  ``topics`` = the regexes to replicate (MM2's default ``topics.exclude`` keeps internal topics such as
  ``__kafka_audit`` and ``__consumer_offsets`` out).
* Key, value **and header** converters are ``ByteArrayConverter``: records, their CreateTime and their
  headers (the audit stamp, ``~a`` or v1 ``kafka-audit.stamp``) are copied as bytes, unchanged. The
  target partition is the source partition.
* ``replication.policy.class``: ``DefaultReplicationPolicy`` (copies are named ``<source>.<topic>``) or
  ``IdentityReplicationPolicy`` (same name); :mod:`kafka_plumbing.replication` maps the names back.
* ``sync.group.offsets.enabled = false``; checkpoints and heartbeats every ``emit_interval_s``; topic
  refresh every ``refresh_topics_interval_s``; source offsets flushed every ``offset_flush_interval_ms``.
* Every replication factor (copies, MM2's internal topics: configs, offsets, status, offset-syncs,
  checkpoints, heartbeats) is ``replication_factor``: 1 for the one-broker local clusters.

MM2 is at-least-once: after a crash (or a stop before its source offsets were flushed) it copies again
what it copied since the last flush, so the target can hold duplicates the source does not; the audit
counts them at the target's tier (``docs/DESIGN.md``, "Tiers").

State (aliases, servers, PID) is kept in ``data_dir/mirror.json`` so ``status`` and ``stop`` work from
another process; the JVM's output goes to ``data_dir/mirror.log`` (log4j2 ``log4j2-mirror.properties``).
Stopped by PID: SIGTERM (MM2 stops its connectors and flushes its offsets), then SIGKILL after a timeout.
Every client connects to 127.0.0.1 listeners only; MM2's REST server is not started (dedicated mode).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.jvm import classpath, java_executable
from kafka_plumbing.processes import log_tail, pid_alive
from kafka_plumbing.replication import ReplicationNaming, ReplicationPolicy

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
"""MM2's dedicated-mode entry point (``connect-mirror-maker.sh``)."""
BYTE_ARRAY_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
STATE_FILE = "mirror.json"
CONFIG_FILE = "mm2.properties"
LOG_FILE = "mirror.log"
HEARTBEATS_TOPIC = "heartbeats"
"""MM2's heartbeat topic on the target cluster (``MirrorClientConfig.HEARTBEATS_TOPIC``)."""


class MirrorError(KafkaAuditError):
    """MirrorMaker 2 could not be configured, started, reached or stopped; the message says why."""


def _heartbeats(consumer: Any, topics: dict[str, Any]) -> int:
    """Return the number of records in the target's ``heartbeats`` topic (0 while it does not exist)."""
    from confluent_kafka import TopicPartition

    meta = topics.get(HEARTBEATS_TOPIC)
    if meta is None:
        return 0
    return sum(
        consumer.get_watermark_offsets(TopicPartition(HEARTBEATS_TOPIC, p), timeout=5, cached=False)[1]
        for p in meta.partitions
    )


@dataclass
class MirrorMaker:
    """One MirrorMaker 2 process replicating topics from a source cluster to a target cluster.

    Attributes:
        data_dir: Where ``mm2.properties``, ``mirror.json`` and ``mirror.log`` go.
        source: MM2 alias of the source cluster (e.g. ``A``); the default policy prefixes copies with it.
        target: MM2 alias of the target cluster (e.g. ``B``).
        source_bootstrap: ``bootstrap.servers`` of the source cluster.
        target_bootstrap: ``bootstrap.servers`` of the target cluster.
        topics: Regexes of the source topics to replicate (MM2 ``topics``, joined by commas).
        policy: ``default`` (``<source>.<topic>``) or ``identity`` (same name).
        replication_factor: Replication factor of the copies and of MM2's internal topics.
        heap_mb: JVM heap, MiB.
        emit_interval_s: ``emit.checkpoints.interval.seconds`` and ``emit.heartbeats.interval.seconds``.
        refresh_topics_interval_s: ``refresh.topics.interval.seconds``: how soon a new matching topic
            is replicated, s.
        offset_flush_interval_ms: Connect's ``offset.flush.interval.ms``: how often MM2 records how far
            it copied; at most this much is copied again after a crash, ms.
        extra: More ``mm2.properties`` entries, written last (they win), e.g.
            ``{"A.security.protocol": "SSL"}``.
        pid: PID of the running JVM, or None.
    """

    data_dir: Path
    source: str
    target: str
    source_bootstrap: str
    target_bootstrap: str
    topics: list[str] = field(default_factory=lambda: [".*"])
    policy: ReplicationPolicy = "default"
    replication_factor: int = 1
    heap_mb: int = 512
    emit_interval_s: int = 1
    refresh_topics_interval_s: int = 5
    offset_flush_interval_ms: int = 5_000
    extra: dict[str, str] = field(default_factory=dict)
    pid: int | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if not self.source or not self.target or self.source == self.target:
            raise MirrorError(f"source and target aliases must differ and not be empty: {self.source!r}")
        for alias in (self.source, self.target):
            if not alias.replace("-", "").replace("_", "").isalnum():
                raise MirrorError(f"cluster alias {alias!r}: use letters, digits, '-' and '_' only")
        if not self.topics:
            raise MirrorError("no topics to replicate: give at least one regex")
        if self.replication_factor < 1:
            raise MirrorError(f"replication_factor must be >= 1, got {self.replication_factor}")
        ReplicationNaming(self.policy, (self.source,))  # raises ConfigError for an unknown policy

    # ---------------------------------------------------------------- naming and configuration
    @property
    def naming(self) -> ReplicationNaming:
        """How this flow names copies (:class:`~kafka_plumbing.replication.ReplicationNaming`)."""
        return ReplicationNaming(self.policy, (self.source,))

    def replicated_topic(self, topic: str) -> str:
        """Return the name of the copy of source ``topic`` on the target cluster."""
        return self.naming.replicated_topic(self.source, topic)

    @property
    def flow(self) -> str:
        """``<source>-><target>``, MM2's name of the replication flow."""
        return f"{self.source}->{self.target}"

    def properties(self) -> dict[str, str]:
        """Return the ``mm2.properties`` entries (in file order) for this flow."""
        rf = str(self.replication_factor)
        src, dst = self.source, self.target
        props = {
            "clusters": f"{src}, {dst}",
            f"{src}.bootstrap.servers": self.source_bootstrap,
            f"{dst}.bootstrap.servers": self.target_bootstrap,
            f"{src}->{dst}.enabled": "true",
            f"{src}->{dst}.topics": ",".join(self.topics),
            f"{dst}->{src}.enabled": "false",
            "replication.policy.class": self.naming.policy_class,
            "key.converter": BYTE_ARRAY_CONVERTER,
            "value.converter": BYTE_ARRAY_CONVERTER,
            "header.converter": BYTE_ARRAY_CONVERTER,
            "sync.group.offsets.enabled": "false",
            "sync.topic.acls.enabled": "false",
            "emit.checkpoints.interval.seconds": str(self.emit_interval_s),
            "emit.heartbeats.interval.seconds": str(self.emit_interval_s),
            "refresh.topics.interval.seconds": str(self.refresh_topics_interval_s),
            "refresh.groups.interval.seconds": "60",
            "offset.flush.interval.ms": str(self.offset_flush_interval_ms),
            "replication.factor": rf,
            "checkpoints.topic.replication.factor": rf,
            "heartbeats.topic.replication.factor": rf,
            "offset-syncs.topic.replication.factor": rf,
            "offset.storage.replication.factor": rf,
            "status.storage.replication.factor": rf,
            "config.storage.replication.factor": rf,
            "tasks.max": "1",
            "plugin.discovery": "service_load",  # every MM2 plugin has a manifest: skips a slow class scan
            # Copy soon after the source: small batches, short linger on MM2's producer.
            f"{dst}.producer.linger.ms": "5",
            f"{src}.consumer.auto.offset.reset": "earliest",
        }
        props.update(self.extra)
        return props

    def write_config(self) -> Path:
        """Write ``data_dir/mm2.properties`` (mode 0600: ``extra`` may hold credentials); return its path."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / CONFIG_FILE
        text = "# Generated by kafka-audit (kafka_plumbing/mirror.py); rewritten on every start.\n"
        text += "".join(f"{k} = {v}\n" for k, v in self.properties().items())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path

    # ---------------------------------------------------------------- state
    @classmethod
    def load(cls, data_dir: Path) -> MirrorMaker | None:
        """Return the MirrorMaker recorded in ``data_dir/mirror.json``, or None if there is none."""
        path = Path(data_dir) / STATE_FILE
        if not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text())
        known = {f.name for f in fields(cls)} - {"_proc", "data_dir"}
        return cls(data_dir=Path(data_dir), **{k: v for k, v in data.items() if k in known})

    def _save(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("_proc", "data_dir")}
        data["extra"] = {k: v for k, v in self.extra.items() if "password" not in k.lower()}
        (self.data_dir / STATE_FILE).write_text(json.dumps(data, indent=2))

    @property
    def running(self) -> bool:
        """True while the MM2 JVM runs."""
        return self.pid is not None and pid_alive(self.pid)

    @property
    def log_path(self) -> Path:
        """``data_dir/mirror.log``: the JVM's output."""
        return self.data_dir / LOG_FILE

    def status(self) -> dict[str, Any]:
        """Return the flow, servers, topics, policy, PID and whether it runs (for ``mirror status``)."""
        return {
            "flow": self.flow,
            "source": self.source_bootstrap,
            "target": self.target_bootstrap,
            "topics": ",".join(self.topics),
            "policy": self.policy,
            "pid": self.pid,
            "running": self.running,
            "log": str(self.log_path),
        }

    # ---------------------------------------------------------------- lifecycle
    def _command(self, config: Path) -> list[str]:
        log4j = resources.files("kafka_plumbing").joinpath("log4j2-mirror.properties")
        return [
            java_executable(),
            f"-Xmx{self.heap_mb}m",
            f"-Xms{min(self.heap_mb, 128)}m",
            "-XX:+UseG1GC",
            "-XX:TieredStopAtLevel=1",  # C1 only: starts ~15% sooner; MM2's load here needs no C2
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath("mirror"),
            MAIN_CLASS,
            str(config),
            "--clusters",
            self.target,
        ]

    def start(self, timeout_s: float = 90.0, wait_topics: list[str] | None = None) -> None:
        """Write the configuration, start MM2 and wait until it replicates (:meth:`wait_ready`).

        Args:
            timeout_s: Deadline for :meth:`wait_ready`, s.
            wait_topics: Source topics whose copies must exist on the target before returning.

        Raises:
            JavaNotFoundError: Java is missing.
            JarsNotFoundError: the ``mirror`` jars are missing (run ``make bootstrap``).
            MirrorError: it is already running, exits during start-up (log tail in the message) or is
                not ready in time (then it is stopped).
        """
        java_executable()
        if self.running:
            raise MirrorError(
                f"MirrorMaker {self.flow} in {self.data_dir} is already running (pid {self.pid})"
            )
        command = self._command(self.write_config())
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid = self._proc.pid
        self._save()
        try:
            self.wait_ready(timeout_s, wait_topics)
        except MirrorError:
            self.stop()
            raise

    def wait_ready(self, timeout_s: float = 90.0, topics: list[str] | None = None) -> None:
        """Poll until MM2 emits new heartbeats to the target and every copy of ``topics`` exists there.

        Heartbeats (``heartbeats`` on the target, one per ``emit_interval_s``) beyond those present when
        the wait began mean the flow's connectors run (a restart finds the old ones there); a copy is
        created when MM2 first sees a matching source topic (within ``refresh_topics_interval_s``).

        Raises:
            MirrorError: if the JVM exits (log tail in the message) or the deadline passes.
        """
        from confluent_kafka import Consumer

        wanted = [self.replicated_topic(t) for t in topics or []]
        consumer = Consumer(
            {
                "bootstrap.servers": self.target_bootstrap,
                "group.id": "kafka-audit.mirror-ready",
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        deadline = time.monotonic() + timeout_s
        missing = "heartbeats"
        baseline: int | None = None
        try:
            while time.monotonic() < deadline:
                if not self.running:
                    tail = log_tail(self.log_path)
                    raise MirrorError(f"MirrorMaker {self.flow} exited during start-up; log tail:\n{tail}")
                try:
                    md = consumer.list_topics(timeout=5).topics
                    beats = _heartbeats(consumer, md)
                    if baseline is None:
                        baseline = beats
                    absent = [t for t in wanted if t not in md]
                    if beats > baseline and not absent:
                        return
                    missing = "new heartbeats" if beats <= baseline else ", ".join(absent)
                except Exception as exc:  # KafkaException while the target comes up
                    missing = str(exc)
                time.sleep(0.5)
        finally:
            consumer.close()
        raise MirrorError(
            f"MirrorMaker {self.flow} not replicating after {timeout_s:.0f} s (waiting for {missing})"
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop MM2 by PID: SIGTERM (connectors stop, offsets flush), then SIGKILL after ``timeout_s``."""
        pid = self.pid
        if pid is not None and pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid_alive(pid):
                log.warning(
                    "MirrorMaker %s (pid %s) did not stop in %.0f s: killing it", self.flow, pid, timeout_s
                )
                os.kill(pid, signal.SIGKILL)
        if self._proc is not None:  # our child: reap it
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("MirrorMaker %s (pid %s) not reaped", self.flow, pid)
            self._proc = None
        self.pid = None
        self._save()
