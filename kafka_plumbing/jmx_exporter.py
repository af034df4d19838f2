"""Broker metrics: the Prometheus JMX exporter java agent on the local brokers, and Prometheus scrape configs.

Every broker :class:`~kafka_plumbing.local_cluster.KafkaCluster` starts runs the agent
``io.prometheus.jmx:jmx_prometheus_javaagent`` (``jvm/pom.xml`` profile ``jmx-exporter``, copied by
``make bootstrap`` into ``<cache>/jars-jmx-exporter``) as
``-javaagent:<jar>=127.0.0.1:<port>:<rules>``: an HTTP server on the broker's own 127.0.0.1 port that
answers ``GET /metrics`` in the Prometheus text format. The rules (``jmx_exporter.yaml`` beside this
module) read these Kafka MBeans and name them as in :data:`BROKER_METRICS`:

* ``kafka.server:type=BrokerTopicMetrics,name={BytesIn,BytesOut,MessagesIn,FailedProduceRequests,
  FailedFetchRequests,...}PerSec[,topic=T]`` -> ``kafka_server_brokertopicmetrics_<name>_total``
  (cumulative bytes or messages or requests; per topic with label ``topic``, and for the whole broker
  without it, i.e. ``topic=""`` in PromQL);
* ``kafka.network:type=RequestMetrics,name={TotalTimeMs,RequestQueueTimeMs,RemoteTimeMs},request=R``
  -> ``kafka_network_requestmetrics_<name>{request, quantile}`` (milliseconds; quantiles ``0.50`` ...
  ``0.999`` of Kafka's decaying histogram) and ``kafka_network_requestmetrics_requests_total{request}``;
  ``name=ErrorsPerSec`` -> ``kafka_network_requestmetrics_errors_total{request, error}``;
* ``kafka.server:type=ReplicaManager``: ``UnderReplicatedPartitions``, ``LeaderCount``, ... (gauges)
  and ``IsrShrinksPerSec``, ``IsrExpandsPerSec`` (``..._isrshrinks_total``, ``..._isrexpands_total``);
* ``kafka.controller:type=KafkaController,name=OfflinePartitionsCount`` (and other controller gauges);
  ``kafka.controller:type=ControllerStats``: leader elections (``LeaderElectionRateAndTimeMs`` exists on
  ZooKeeper-mode controllers only; KRaft counts ``UncleanLeaderElectionsPerSec`` and
  ``ElectionFromEligibleLeaderReplicasPerSec``);
* ``kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent`` (a 0-1 ratio);
* the agent's JVM and process collectors: ``jvm_memory_used_bytes{area}``,
  ``jvm_gc_collection_seconds_{count,sum}{gc}``, ``process_cpu_seconds_total``, ...

The MBeans do not carry the broker id, so the scrape configuration labels each target
``broker="<node.id>"`` (:func:`target_groups`, :func:`scrape_config`); so does
``deploy/prometheus/prometheus.yml`` for docker-compose.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kafka_plumbing.jvm import JarsNotFoundError, jars_dir

#: Maven profile of ``jvm/pom.xml`` (and cache directory ``jars-<profile>``) holding the agent.
AGENT_PROFILE = "jmx-exporter"
AGENT_ARTIFACT = "jmx_prometheus_javaagent"
#: The exporter rules shipped in this package.
RULES_FILE = "jmx_exporter.yaml"
#: Prometheus job name of the broker exporters, and the target label holding the broker's ``node.id``.
JOB = "kafka-brokers"
BROKER_LABEL = "broker"
#: Where ``kafka-audit up`` serves the Spark job's metrics by default (``metrics_port`` 9464).
DEFAULT_AUDIT_EXPORTER = "127.0.0.1:9464"

#: The metric names the rules and the agent's default collectors export (checked against a live broker
#: by ``tests/integration/test_broker_metrics.py``); the "Kafka brokers" dashboard queries only these.
BROKER_METRICS = frozenset(
    {
        "kafka_server_brokertopicmetrics_bytesin_total",
        "kafka_server_brokertopicmetrics_bytesout_total",
        "kafka_server_brokertopicmetrics_bytesrejected_total",
        "kafka_server_brokertopicmetrics_messagesin_total",
        "kafka_server_brokertopicmetrics_failedproducerequests_total",
        "kafka_server_brokertopicmetrics_failedfetchrequests_total",
        "kafka_server_brokertopicmetrics_totalproducerequests_total",
        "kafka_server_brokertopicmetrics_totalfetchrequests_total",
        "kafka_server_brokertopicmetrics_replicationbytesin_total",
        "kafka_server_brokertopicmetrics_replicationbytesout_total",
        "kafka_network_requestmetrics_totaltimems",
        "kafka_network_requestmetrics_requestqueuetimems",
        "kafka_network_requestmetrics_remotetimems",
        "kafka_network_requestmetrics_requests_total",
        "kafka_network_requestmetrics_errors_total",
        "kafka_network_socketserver_networkprocessoravgidlepercent",
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
        "kafka_server_replicamanager_isrshrinks_total",
        "kafka_server_replicamanager_isrexpands_total",
        "kafka_server_replicamanager_failedisrupdates_total",
        "kafka_server_replicamanager_underreplicatedpartitions",
        "kafka_server_replicamanager_underminisrpartitioncount",
        "kafka_server_replicamanager_atminisrpartitioncount",
        "kafka_server_replicamanager_offlinereplicacount",
        "kafka_server_replicamanager_leadercount",
        "kafka_server_replicamanager_partitioncount",
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "kafka_controller_kafkacontroller_activecontrollercount",
        "kafka_controller_kafkacontroller_globalpartitioncount",
        "kafka_controller_kafkacontroller_globaltopiccount",
        "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
        "kafka_controller_kafkacontroller_activebrokercount",
        "kafka_controller_kafkacontroller_fencedbrokercount",
        "kafka_controller_controllerstats_uncleanleaderelections_total",
        "kafka_controller_controllerstats_electionfromeligibleleaderreplicas_total",
        "jvm_memory_used_bytes",
        "jvm_memory_max_bytes",
        "jvm_gc_collection_seconds_count",
        "jvm_gc_collection_seconds_sum",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    }
)
"""``kafka_controller_controllerstats_leaderelections_total`` (``LeaderElectionRateAndTimeMs``) is in the
rules too but absent on KRaft brokers (every broker kafka-audit starts), so it is not listed."""


def agent_jar() -> Path | None:
    """Return the exporter agent's jar, or None when ``make bootstrap`` has not fetched it.

    ``$KAFKA_AUDIT_JARS_JMX_EXPORTER`` overrides the directory (as for the other Maven profiles).
    """
    try:
        directory = jars_dir(AGENT_PROFILE)
    except JarsNotFoundError:
        return None
    jars = sorted(directory.glob(f"{AGENT_ARTIFACT}-*.jar"))
    return jars[-1] if jars else None


def rules_file() -> Path:
    """Return the path of the packaged exporter rules (``kafka_plumbing/jmx_exporter.yaml``)."""
    return Path(str(resources.files("kafka_plumbing").joinpath(RULES_FILE)))


def javaagent_option(jar: Path, port: int, host: str = "127.0.0.1", rules: Path | None = None) -> str:
    """Return the JVM option that starts the exporter: ``-javaagent:<jar>=<host>:<port>:<rules>``.

    Args:
        jar: The agent jar (:func:`agent_jar`).
        port: TCP port of the exporter's HTTP server.
        host: Address it binds (127.0.0.1: reachable from this machine only).
        rules: Rules file; default :func:`rules_file`.
    """
    return f"-javaagent:{jar}={host}:{port}:{rules or rules_file()}"


def target_groups(brokers: Mapping[int, str]) -> list[dict[str, Any]]:
    """Return one Prometheus target group per broker: ``{"targets": [addr], "labels": {"broker": id}}``.

    The groups serve as ``static_configs`` of a scrape job or as the content of a ``file_sd_configs``
    file.

    Args:
        brokers: ``node.id`` -> exporter address ``host:port``.
    """
    return [
        {"targets": [address], "labels": {BROKER_LABEL: str(node_id)}}
        for node_id, address in sorted(brokers.items())
    ]


def scrape_config(
    brokers: Mapping[int, str],
    *,
    scrape_interval: str = "15s",
    other_jobs: Mapping[str, Sequence[str]] | None = None,
    rule_files: Sequence[str] = (),
) -> dict[str, Any]:
    """Return a whole Prometheus configuration (``prometheus.yml``) scraping the broker exporters.

    Args:
        brokers: ``node.id`` -> exporter address ``host:port`` (job :data:`JOB`, label ``broker``).
        scrape_interval: Prometheus duration (``"1s"``, ``"15s"``), also the rule evaluation interval.
        other_jobs: More scrape jobs, job name -> ``host:port`` targets (e.g. ``{"kafka-audit":
            [DEFAULT_AUDIT_EXPORTER]}`` for the Spark job's exporter).
        rule_files: Paths of rule files to load (e.g. kafka-audit's alerting rules).
    """
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [{"job_name": JOB, "static_configs": target_groups(brokers)}],
    }
    for job, targets in (other_jobs or {}).items():
        config["scrape_configs"].append({"job_name": job, "static_configs": [{"targets": list(targets)}]})
    if rule_files:
        config["rule_files"] = list(rule_files)
    return config


def write_scrape_config(path: Path, brokers: Mapping[int, str], **kwargs: Any) -> Path:
    """Write :func:`scrape_config` as YAML to ``path`` (atomically: a temporary file, then rename).

    Args:
        path: Target file; its directory is created.
        brokers: ``node.id`` -> exporter address.
        **kwargs: Passed to :func:`scrape_config`.

    Returns:
        ``path``.

    Raises:
        OSError: if the directory or file cannot be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(
        "# Prometheus configuration scraping the local Kafka cluster's JMX exporters (kafka-audit).\n"
        + yaml.safe_dump(scrape_config(brokers, **kwargs), sort_keys=False)
    )
    os.replace(tmp, path)
    return path
