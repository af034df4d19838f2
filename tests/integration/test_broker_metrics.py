"""Every panel of the "Kafka brokers" dashboard returns data from a live 3-broker cluster (issue 16).

A 3-broker local cluster (``KafkaCluster``, each broker with the Prometheus JMX exporter agent on its
own 127.0.0.1 port), audited load (``audit_producer.load.run_load``, acks=all) and a consumer reading it,
and Prometheus from Debian scraping the three exporters every second with the configuration the cluster
writes (``KafkaCluster.write_prometheus_config``). The dashboard comes from ``dashboards.build``; its
``$broker`` variable is "All" (``.+``) as Grafana sends it, and then one broker. Its one panel from
kafka-audit's own exporter (loss per leader broker) is checked by ``test_attribution.py``.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer
from typer.testing import CliRunner

from audit_producer import ProducerAuditSettings
from audit_producer.load import run_load
from dashboards.brokers import LOSS_BY_LEADER_TITLE, UID
from dashboards.build import dashboards, iter_queries
from kafka_audit.cli import app
from kafka_plumbing import jmx_exporter
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic
from tests.conftest import unique_name

from .helpers import wait_for
from .test_dashboards_live import PROMETHEUS, _free_port, _get, _query, _ready, _stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RATE_INTERVAL = "5s"  # 5 scrapes at 1 s: what Grafana's $__rate_interval is at this scrape interval


def substitute(expr: str, broker: str = ".+") -> str:
    """Replace Grafana's variables as the dashboard sends them (``$broker`` "All" is ``.+``)."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$broker", broker)
    assert "$" not in expr, expr
    return expr


def _brokers(result: list[dict]) -> set[str]:
    return {series["metric"].get("broker", "") for series in result}


def _consume(bootstrap: str, topic: str, stop: threading.Event) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g.{topic}",
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            consumer.poll(0.2)
    finally:
        consumer.close()


def test_every_broker_panel_returns_data_for_all_three_brokers(request, audit_topics, tmp_path):
    assert jmx_exporter.agent_jar() is not None, "the JMX exporter agent jar: run `make bootstrap`"
    # The audit's loss per leader broker comes from the Spark job's exporter once a window lost messages:
    # tests/integration/test_attribution.py queries it from Prometheus; here, the brokers' exporters.
    queries = [
        q for q in iter_queries(dashboards()[UID]) if not q.annotation and q.panel != LOSS_BY_LEADER_TITLE
    ]
    assert len(queries) >= 15
    cluster = KafkaCluster.create(tmp_path / "kafka", brokers=3, heap_mb=384)
    prom_log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed in the finally below
    prom: subprocess.Popen | None = None
    stop = threading.Event()
    threads: list[threading.Thread] = []
    loads: list = []
    t0 = time.monotonic()
    try:
        cluster.start()
        t_cluster = time.monotonic()
        # Each broker has its own exporter, listed by status() and `kafka-audit kafka status`.
        targets = cluster.metrics_targets
        assert sorted(targets) == [1, 2, 3] and len(set(targets.values())) == 3
        assert [row["metrics"] for row in cluster.status()] == [targets[1], targets[2], targets[3]]
        listed = CliRunner().invoke(app, ["kafka", "status", "--data-dir", str(cluster.data_dir)])
        assert listed.exit_code == 0, listed.output
        assert all(address in listed.output for address in targets.values()), listed.output

        config = cluster.write_prometheus_config(
            tmp_path / "prometheus.yml", scrape_interval="1s", other_jobs={}
        )
        port = _free_port()
        prom = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=prom_log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"

        topic = unique_name(request)
        bootstrap = cluster.bootstrap_servers
        ensure_topic({"bootstrap.servers": bootstrap}, topic, partitions=6)  # replication factor 3
        audit = ProducerAuditSettings(
            window_ms=5_000,
            grace_ms=1_000,
            snapshot_interval_ms=1_000,
            audit_topic=audit_topics["audit_topic"],
        )

        def load() -> None:
            config = {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "client.id": "broker-metrics",
            }
            loads.append(run_load(config, topic, "weblog", rate=300, duration_s=120, audit=audit, stop=stop))

        threads = [
            threading.Thread(target=load, daemon=True),
            threading.Thread(target=_consume, args=(bootstrap, topic, stop), daemon=True),
        ]
        for t in threads:
            t.start()
        wait_for(lambda: _ready(url), 60, "Prometheus ready")
        wait_for(
            lambda: len(_query(url, 'up{job="kafka-brokers"} == 1')) == 3, 30, "3 broker exporters scraped"
        )

        # Poll every panel query until it has data for every broker, with a deadline; report what is
        # missing. (Controller-side metrics too: each node of the local cluster is also a controller.)
        pending = {substitute(q.expr): q for q in queries}
        seen: dict[str, set[str]] = {}

        def complete() -> bool:
            for expr in sorted(pending):
                seen[expr] = _brokers(_query(url, expr))
                if seen[expr] == {"1", "2", "3"}:
                    del pending[expr]
            return not pending

        deadline = time.monotonic() + 60
        while not complete() and time.monotonic() < deadline:
            time.sleep(1)
        t_data = time.monotonic()
        missing = {f"{q.panel} [{q.ref_id}]": f"brokers {sorted(seen[e])}: {e}" for e, q in pending.items()}
        assert not missing, "panels without data for every broker:\n" + "\n".join(
            f"{k}: {v}" for k, v in sorted(missing.items())
        )
        # The broker variable filters: one broker selected -> that broker's series only.
        for q in queries:
            assert _brokers(_query(url, substitute(q.expr, broker="2"))) == {"2"}, q
        # Load really flowed through the brokers the panels show.
        [bytes_in_expr] = [q.expr for q in queries if q.panel == "Bytes in per second"]
        bytes_in = _query(url, substitute(bytes_in_expr))
        assert sum(float(s["value"][1]) for s in bytes_in) > 0, bytes_in
        names = set(_get(f"{url}/api/v1/label/__name__/values")["data"])
        assert names >= jmx_exporter.BROKER_METRICS, sorted(jmx_exporter.BROKER_METRICS - names)
        print(  # timing of the phases, shown with -s
            f"cluster {t_cluster - t0:.0f} s, every panel with data +{t_data - t_cluster:.0f} s"
        )
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        if prom is not None:
            _stop(prom)
        prom_log.close()
        cluster.stop()
    assert loads and loads[0].produced > 0, loads
