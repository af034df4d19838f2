"""A local Apache Kafka cluster in KRaft mode, run from the Maven jars (``kafka.Kafka``).

Each node is a combined broker + controller on 127.0.0.1 with its own data directory under
``data_dir/node-N``; the static quorum is ``controller.quorum.voters``. Storage is formatted by the
Kafka storage tool (``kafka.tools.StorageTool format``). Replication settings follow the broker count:
1 broker -> replication factor 1, ``min.insync.replicas`` 1; 3 brokers -> 3 and 2.

Every broker runs the Prometheus JMX exporter java agent on its own 127.0.0.1 port when its jar is
there (``make bootstrap``; :mod:`kafka_plumbing.jmx_exporter`); without the jar the brokers start without
it and ``status`` says so. On start the cluster writes ``data_dir/prometheus.yml``, a Prometheus
configuration scraping those exporters (label ``broker`` = ``node.id``) and kafka-audit's default
exporter.

State (ports, PIDs) is kept in ``data_dir/cluster.json`` so ``status`` and ``stop`` work from another
process. Processes are stopped by PID: SIGTERM (controlled shutdown), then SIGKILL after a timeout.

This module plans, records and runs the cluster; the nodes and listener it is made of are in
:mod:`kafka_plumbing.cluster_nodes`, their ports in :mod:`kafka_plumbing.cluster_ports`, their
``server.properties`` in :mod:`kafka_plumbing.broker_properties` and their JVMs in
:mod:`kafka_plumbing.broker_processes`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import SecretStr

from kafka_plumbing import jmx_exporter
from kafka_plumbing.broker_processes import format_storage, launch_broker, signal_stop, stop_process
from kafka_plumbing.broker_properties import (
    min_insync_replicas,
    replication_factor,
    scram_format_arguments,
    server_properties,
)
from kafka_plumbing.cluster_nodes import SCRAM_MECHANISMS, Node, SaslSslListener
from kafka_plumbing.cluster_ports import HOST, free_port, plan_ports, port_is_free
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.jvm import java_executable
from kafka_plumbing.processes import log_tail, pid_alive

#: The Prometheus configuration ``start`` writes into the data directory.
PROMETHEUS_CONFIG = "prometheus.yml"
#: The ``transactional.id`` :meth:`KafkaCluster.wait_transactions_ready` initializes (no records, no
#: transaction begun; the broker forgets it after ``transactional.id.expiration.ms``, 7 days by default).
READINESS_TRANSACTIONAL_ID = "kafka-audit.local-cluster.readiness"
log = logging.getLogger(__name__)


class ClusterError(KafkaAuditError):
    """The local cluster could not be started, reached or stopped; the message says why."""


class PortInUseError(ClusterError):
    """A port the cluster needs is taken; choose other ports with ``--base-port``."""


@dataclass
class KafkaCluster:
    """A local KRaft cluster of 1 or 3 nodes.

    Attributes:
        data_dir: Root of the cluster's data (logs, configs, ``cluster.json``).
        nodes: The nodes with their ports and PIDs.
        cluster_id: KRaft cluster id (22-char base64url UUID, as ``kafka-storage random-uuid`` prints).
        heap_mb: JVM heap per node, MiB.
        heap_fixed: Start each node with its whole heap committed and touched (``-Xms`` = ``-Xmx``,
            ``-XX:+AlwaysPreTouch``), as Kafka's operations guide advises for production, so that the
            resident set does not grow while the heap does (long soaks judge RSS growth). Otherwise
            the heap starts at min(heap_mb, 256) MiB and grows on demand.
        metrics: Start each broker with the Prometheus JMX exporter agent (when its jar is there).
    """

    data_dir: Path
    nodes: list[Node] = field(default_factory=list)
    cluster_id: str = ""
    heap_mb: int = 768
    heap_fixed: bool = False
    broker_host: str = HOST
    sasl_ssl: SaslSslListener | None = None
    metrics: bool = True
    scram_users: dict[str, SecretStr] = field(default_factory=dict, repr=False, compare=False)
    _procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False, compare=False)

    # ---------------------------------------------------------------- construction and state
    @classmethod
    def create(
        cls,
        data_dir: Path,
        brokers: int = 1,
        base_port: int | None = None,
        heap_mb: int = 768,
        broker_host: str = HOST,
        sasl_ssl: SaslSslListener | None = None,
        scram_users: dict[str, SecretStr] | None = None,
        metrics: bool = True,
        heap_fixed: bool = False,
    ) -> KafkaCluster:
        """Plan a new cluster (nothing is started).

        Args:
            data_dir: Where data, configs and state go; created if missing.
            brokers: 1 or 3.
            base_port: First port; node i uses ``base_port + 2i`` (broker) and ``+ 2i + 1`` (controller),
                with n brokers ``base_port + 3n + i`` for its JMX exporter. None picks free ports.
            heap_mb: JVM heap per node (MiB).
            broker_host: Address of the PLAINTEXT (client) listener, bound and advertised. 127.0.0.1 by
                default; the testbed uses the host end of its veth pair so that a producer in another
                network namespace can reach the brokers. The controller listener stays on 127.0.0.1.
            sasl_ssl: Also open a SASL_SSL client listener on 127.0.0.1 (port ``base_port + 2n + i``
                with n brokers, or a free port).
            scram_users: SCRAM users (name -> password) created for every SCRAM mechanism when the
                storage is first formatted; kept in memory only, never written to ``cluster.json``.
            metrics: Run the Prometheus JMX exporter agent on every broker (default; skipped with a
                warning while ``make bootstrap`` has not fetched its jar).
            heap_fixed: Commit and touch the whole heap at start (see the class attributes).

        Raises:
            ClusterError: if ``brokers`` is not 1 or 3, a mechanism is not SCRAM, or a user name or
                password holds one of ``,[]="`` (the storage tool's separators).
        """
        if brokers not in (1, 3):
            raise ClusterError(f"brokers must be 1 or 3, got {brokers}")
        if sasl_ssl is not None and not set(sasl_ssl.mechanisms) <= set(SCRAM_MECHANISMS):
            raise ClusterError(f"sasl_ssl mechanisms: allowed values are {', '.join(SCRAM_MECHANISMS)}")
        for name, password in (scram_users or {}).items():
            if set(',[]="') & set(name + password.get_secret_value()):
                raise ClusterError(f'SCRAM user {name!r}: name and password must not contain any of ,[]="')
        nodes = [
            Node(i, ports.broker, ports.controller, sasl_ssl_port=ports.sasl_ssl, metrics_port=ports.metrics)
            for i, ports in enumerate(plan_ports(brokers, base_port, sasl_ssl is not None), start=1)
        ]
        cid = "-"
        while cid.startswith("-"):  # as Kafka's Uuid.randomUuid(): never start with '-' (reads as an option)
            cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        return cls(
            data_dir=Path(data_dir),
            nodes=nodes,
            cluster_id=cid,
            heap_mb=heap_mb,
            heap_fixed=heap_fixed,
            broker_host=broker_host,
            sasl_ssl=sasl_ssl,
            metrics=metrics,
            scram_users=dict(scram_users or {}),
        )

    @classmethod
    def load(cls, data_dir: Path) -> KafkaCluster | None:
        """Return the cluster recorded in ``data_dir/cluster.json``, or None if there is none."""
        state = Path(data_dir) / "cluster.json"
        if not state.exists():
            return None
        data = json.loads(state.read_text())
        tls = data.get("sasl_ssl")
        known = {f.name for f in dataclasses.fields(Node)}
        return cls(
            data_dir=Path(data_dir),
            nodes=[Node(**{k: v for k, v in n.items() if k in known}) for n in data["nodes"]],
            cluster_id=data["cluster_id"],
            heap_mb=data.get("heap_mb", 768),
            heap_fixed=data.get("heap_fixed", False),
            broker_host=data.get("broker_host", HOST),
            sasl_ssl=SaslSslListener(Path(tls["keystore_location"]), tuple(tls["mechanisms"]))
            if tls
            else None,
            metrics=data.get("metrics", True),
        )

    def _save(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        data = {
            "cluster_id": self.cluster_id,
            "heap_mb": self.heap_mb,
            "heap_fixed": self.heap_fixed,
            "broker_host": self.broker_host,
            "metrics": self.metrics,
            "sasl_ssl": (
                {
                    "keystore_location": str(self.sasl_ssl.keystore_location),
                    "mechanisms": self.sasl_ssl.mechanisms,
                }
                if self.sasl_ssl
                else None
            ),
            "nodes": [asdict(n) for n in self.nodes],
        }
        (self.data_dir / "cluster.json").write_text(json.dumps(data, indent=2))

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every broker listener."""
        return ",".join(f"{self.broker_host}:{n.broker_port}" for n in self.nodes)

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """``127.0.0.1:port,...`` of every SASL_SSL listener.

        Raises:
            ClusterError: if the cluster was created without ``sasl_ssl``.
        """
        if self.sasl_ssl is None:
            raise ClusterError(f"cluster in {self.data_dir} has no SASL_SSL listener")
        return ",".join(f"{HOST}:{n.sasl_ssl_port}" for n in self.nodes)

    @property
    def replication_factor(self) -> int:
        """Replication factor for new topics: 1 on one broker, 3 on three."""
        return replication_factor(len(self.nodes))

    @property
    def min_insync_replicas(self) -> int:
        """``min.insync.replicas``: 1 on one broker, 2 on three."""
        return min_insync_replicas(len(self.nodes))

    def running_nodes(self) -> list[Node]:
        """Nodes whose JVM is alive."""
        return [n for n in self.nodes if n.pid is not None and pid_alive(n.pid)]

    @property
    def metrics_targets(self) -> dict[int, str]:
        """``node.id`` -> ``127.0.0.1:port`` of each broker started with the JMX exporter."""
        return {
            n.node_id: f"{HOST}:{n.metrics_port}"
            for n in self.nodes
            if n.metrics_enabled and n.metrics_port is not None
        }

    @property
    def prometheus_config_path(self) -> Path:
        """``data_dir/prometheus.yml``, written by ``start`` (see :meth:`write_prometheus_config`)."""
        return self.data_dir / PROMETHEUS_CONFIG

    def write_prometheus_config(
        self,
        path: Path | None = None,
        scrape_interval: str = "15s",
        other_jobs: dict[str, list[str]] | None = None,
        rule_files: list[str] | None = None,
    ) -> Path:
        """Write a Prometheus configuration scraping this cluster's JMX exporters.

        Job ``kafka-brokers``, one target per broker started with the exporter, labelled ``broker`` with
        its ``node.id`` (:func:`kafka_plumbing.jmx_exporter.scrape_config`).

        Args:
            path: Where to write; default :attr:`prometheus_config_path`.
            scrape_interval: Prometheus duration, e.g. ``"15s"`` (tests: ``"1s"``).
            other_jobs: More jobs (name -> ``host:port`` targets); default: job ``kafka-audit`` at
                ``127.0.0.1:9464``, where ``kafka-audit up`` serves the Spark job's metrics.
            rule_files: Rule files to load (e.g. kafka-audit's ``prometheus-rules.yml``).

        Returns:
            The path written.

        Raises:
            OSError: if the file cannot be written.
        """
        if other_jobs is None:
            other_jobs = {"kafka-audit": [jmx_exporter.DEFAULT_AUDIT_EXPORTER]}
        return jmx_exporter.write_scrape_config(
            path or self.prometheus_config_path,
            self.metrics_targets,
            scrape_interval=scrape_interval,
            other_jobs=other_jobs,
            rule_files=rule_files or [],
        )

    # ---------------------------------------------------------------- configuration
    def _node_dir(self, node: Node) -> Path:
        return self.data_dir / f"node-{node.node_id}"

    def _properties(self, node: Node) -> str:
        """Return ``node``'s ``server.properties`` text (see :mod:`kafka_plumbing.broker_properties`)."""
        return server_properties(
            node, self.nodes, self.broker_host, self._node_dir(node) / "data", self.sasl_ssl
        )

    # ---------------------------------------------------------------- lifecycle
    def start(self, timeout_s: float = 90.0) -> None:
        """Format storage where needed, start every node, and wait until all brokers serve metadata.

        Each broker gets the JMX exporter agent when :attr:`metrics` is on and the agent jar is there;
        then ``data_dir/prometheus.yml`` is written (:meth:`write_prometheus_config`).

        Raises:
            JavaNotFoundError: if Java is missing.
            PortInUseError: if a port is taken by another process.
            ClusterError: if a node exits or the cluster is not ready within ``timeout_s``.
        """
        java_executable()
        if self.running_nodes():
            raise ClusterError(f"cluster in {self.data_dir} is already running ({self.bootstrap_servers})")
        agent = self._agent_jar()
        for node in self.nodes:
            if agent is not None and node.metrics_port is None:  # state written before the exporter
                node.metrics_port = free_port()
            metrics_port = node.metrics_port if agent is not None else None
            for port in (node.broker_port, node.controller_port, node.sasl_ssl_port, metrics_port):
                if port is not None and not port_is_free(port):
                    raise PortInUseError(f"port {HOST}:{port} is already in use (node {node.node_id})")
        self._save()
        for node in self.nodes:
            ndir = self._node_dir(node)
            ndir.mkdir(parents=True, exist_ok=True)
            props = ndir / "server.properties"
            props.write_text(self._properties(node))
            if not (ndir / "data" / "meta.properties").exists():
                fmt = format_storage(props, self.cluster_id, self._scram_arguments())
                if fmt.returncode != 0:
                    out = fmt.stderr or fmt.stdout
                    for password in self.scram_users.values():
                        out = out.replace(password.get_secret_value(), "**********")
                    raise ClusterError(f"kafka storage format failed for node {node.node_id}: {out}")
        for node in self.nodes:
            self._launch(node, agent)
        self._save()
        try:
            self.wait_ready(timeout_s)
        except ClusterError:
            self.stop()
            raise
        self.write_prometheus_config()

    def _scram_arguments(self) -> list[str]:
        """``--add-scram MECHANISM=[name=...,password=...]`` for every user and SCRAM mechanism."""
        return scram_format_arguments(self.scram_users, self.sasl_ssl)

    def _agent_jar(self) -> Path | None:
        """Return the JMX exporter agent jar to start brokers with; None: metrics off or jar missing."""
        if not self.metrics:
            return None
        jar = jmx_exporter.agent_jar()
        if jar is None:
            log.warning(
                "Prometheus JMX exporter agent not found (run `make bootstrap`): "
                "the brokers in %s start without broker metrics",
                self.data_dir,
            )
        return jar

    def _launch(self, node: Node, agent: Path | None) -> None:
        """Start the node's JVM (with the JMX exporter agent ``agent`` unless None); record its PID."""
        ndir = self._node_dir(node)
        if agent is not None and node.metrics_port is None:
            node.metrics_port = free_port()
        javaagent = (
            jmx_exporter.javaagent_option(agent, node.metrics_port, HOST)
            if agent is not None and node.metrics_port is not None
            else None
        )
        proc = launch_broker(
            ndir / "server.properties", ndir / "server.log", self.heap_mb, javaagent, self.heap_fixed
        )
        node.pid = proc.pid
        node.metrics_enabled = javaagent is not None
        self._procs[proc.pid] = proc

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Poll until every broker is registered and answers metadata requests.

        Raises:
            ClusterError: if a node exits (its log tail is in the message) or the deadline passes.
        """
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        deadline = time.monotonic() + timeout_s
        last_error = ""
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.pid is None or not pid_alive(node.pid):
                    tail = log_tail(self._node_dir(node) / "server.log")
                    raise ClusterError(f"kafka node {node.node_id} exited during start-up; log tail:\n{tail}")
            try:
                md = admin.list_topics(timeout=2)
                if len(md.brokers) == len(self.nodes):
                    return
                last_error = f"{len(md.brokers)}/{len(self.nodes)} brokers registered"
            except Exception as exc:  # KafkaException while the brokers come up
                last_error = str(exc)
            time.sleep(0.5)
        raise ClusterError(f"cluster not ready after {timeout_s:.0f} s: {last_error}")

    def wait_transactions_ready(self, timeout_s: float = 60.0) -> bool:
        """Wait until the transaction coordinator answers ``InitProducerId``, quietly.

        A fresh cluster creates ``__transaction_state`` on the first transactional client and answers
        ``COORDINATOR_LOAD_IN_PROGRESS`` while it loads; librdkafka retries, and logs each retry as a
        warning (``Failed to acquire idempotence PID ... Coordinator load in progress: retrying``) that
        reads like a failure to someone starting ``kafka-audit up``. So ``up`` first initializes
        :data:`READINESS_TRANSACTIONAL_ID` here, with librdkafka's log off, and the audit consumer's
        transactional producer then finds the coordinator loaded (Kafka protocol ``InitProducerId``,
        KIP-98).

        Args:
            timeout_s: The longest wait, s.

        Returns:
            True once the coordinator answered; False if it did not within ``timeout_s`` (logged at INFO:
            the clients then wait and retry on their own, as without this call).
        """
        from confluent_kafka import KafkaException, Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "transactional.id": READINESS_TRANSACTIONAL_ID,
                "log_level": 0,
            }
        )
        try:
            producer.init_transactions(timeout_s)
            return True
        except KafkaException as exc:
            log.info("transaction coordinator not ready after %.0f s: %s", timeout_s, exc.args[0].str())
            return False

    def stop_node(self, node: Node, timeout_s: float = 30.0, kill: bool = False) -> None:
        """Stop one node by PID: SIGTERM (or SIGKILL with ``kill``), then SIGKILL after ``timeout_s``."""
        if node.pid is None:
            return
        stop_process(node.pid, timeout_s, kill, child=self._procs.pop(node.pid, None))
        node.pid = None
        self._save()

    def start_node(self, node: Node, timeout_s: float = 60.0) -> None:
        """Restart one stopped node and wait until the cluster is whole again."""
        self._launch(node, self._agent_jar())
        self._save()
        self.wait_ready(timeout_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every node (controlled shutdown), by PID."""
        for node in self.nodes:  # SIGTERM to every node first, then wait for each
            if node.pid is not None:
                signal_stop(node.pid)
        for node in self.nodes:
            self.stop_node(node, timeout_s)

    def status(self) -> list[dict[str, object]]:
        """One dict per node: id, ports, pid, running, and ``metrics``: the JMX exporter's address.

        ``metrics`` is ``127.0.0.1:<port>`` (Prometheus ``/metrics`` there) when the node was started with
        the exporter agent, else ``off (...)`` saying why.
        """
        return [
            {
                "node": n.node_id,
                "broker": f"{self.broker_host}:{n.broker_port}",
                "controller": f"{HOST}:{n.controller_port}",
                "metrics": self._metrics_status(n),
                "pid": n.pid,
                "running": n.pid is not None and pid_alive(n.pid),
            }
            for n in self.nodes
        ]

    def _metrics_status(self, node: Node) -> str:
        if node.metrics_enabled and node.metrics_port is not None:
            return f"{HOST}:{node.metrics_port}"
        if not self.metrics:
            return "off (disabled)"
        if node.pid is None:
            return "off (not started)"
        return "off (no agent jar: make bootstrap)"
