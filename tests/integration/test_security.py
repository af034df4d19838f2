"""Issue 6, item 5: SASL/SCRAM over TLS for every Kafka client, configured once (KAFKA_AUDIT_KAFKA_*).

The module starts its own broker with a SASL_SSL listener (certificates made here with the openssl CLI,
SCRAM users created at format time). Every client is given only ``bootstrap.servers`` of that listener:
the security settings come from the environment, set once per test.
"""

from __future__ import annotations

import json
import logging
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from audit_consumer.consumer import AuditConsumer, describe
from audit_consumer.ground_truth import verify_topic
from audit_producer import AuditedProducer, ProducerAuditSettings
from kafka_audit.cli import app
from kafka_audit.verification_report import cluster_counts, compare_with_cluster
from kafka_plumbing.cluster_nodes import SaslSslListener
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.security import KafkaAuthenticationError, KafkaSecurity, KafkaTlsError
from kafka_plumbing.topics import ensure_topic
from spark_streaming.job import ReconciliationJob
from spark_streaming.results import final_results, read_results
from spark_streaming.settings import SparkJobSettings
from tests.conftest import release_clients

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for, wait_for_final_windows

pytestmark = pytest.mark.integration
WINDOW_MS = 5_000
USER = "kafka-audit"


def unique_topic(request: pytest.FixtureRequest) -> str:
    return f"pytest_{request.node.name[:40]}_{secrets.token_hex(4)}"


def generate_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """Make a CA and a server certificate for 127.0.0.1/localhost signed by it (openssl CLI).

    Returns:
        (CA certificate PEM, server key store PEM = PKCS#8 key + certificate, another CA's certificate).
    """
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)

    for name in ("ca", "other-ca"):
        openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN=kafka-audit test {name}",
        )  # fmt: skip
    (folder / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost",
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "server.ext", "-out", "server.crt",
    )  # fmt: skip
    keystore = folder / "server-keystore.pem"
    keystore.write_text((folder / "server.key").read_text() + (folder / "server.crt").read_text())
    return folder / "ca.pem", keystore, folder / "other-ca.pem"


@dataclass
class SecureCluster:
    cluster: KafkaCluster
    ca: Path
    other_ca: Path
    password: str

    @property
    def bootstrap(self) -> str:
        return self.cluster.sasl_ssl_bootstrap_servers


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("sasl-ssl")
    ca, keystore, other_ca = generate_certificates(folder / "tls")
    password = secrets.token_urlsafe(24)
    cluster = KafkaCluster.create(
        folder / "kafka", sasl_ssl=SaslSslListener(keystore), scram_users={USER: SecretStr(password)}
    )
    cluster.start()
    try:
        yield SecureCluster(cluster, ca, other_ca, password)
    finally:
        release_clients()
        cluster.stop()


def set_security(monkeypatch: pytest.MonkeyPatch, secure: SecureCluster, **overrides: str) -> None:
    """Configure every client once, through the environment."""
    env = {
        "SECURITY_PROTOCOL": "SASL_SSL",
        "SASL_MECHANISM": "SCRAM-SHA-512",
        "SASL_USERNAME": USER,
        "SASL_PASSWORD": secure.password,
        "SSL_CA_LOCATION": str(secure.ca),
        **overrides,
    }
    for k, v in env.items():
        monkeypatch.setenv(f"KAFKA_AUDIT_KAFKA_{k}", v)


def assert_secret_absent(secret: str, *texts: str) -> None:
    for i, text in enumerate(texts):
        assert secret not in text, f"the password appears in output #{i}"


def test_producer_consumer_and_verifier_count_exactly_over_sasl_ssl(
    secure, monkeypatch, request, audit_topics, caplog, capfd
):
    caplog.set_level(logging.DEBUG)
    set_security(monkeypatch, secure)
    conf = {"bootstrap.servers": secure.bootstrap}  # no security here: it comes from the environment
    topic = unique_topic(request)
    ensure_topic(conf, topic, 3)
    audit = ProducerAuditSettings(
        window_ms=WINDOW_MS,
        grace_ms=1_000,
        snapshot_interval_ms=1_000,
        audit_topic=audit_topics["audit_topic"],
    )
    n = 3_000
    settings = consumer_settings(secure.bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)
    assert settings.kafka.security_protocol == "SASL_SSL"
    with running_consumer(settings):
        with AuditedProducer({**conf, "client.id": "secure", "linger.ms": 5}, audit) as producer:
            for i in range(n):
                producer.produce(topic, f"message {i}".encode(), partition=i % 3)
                if i % 500 == 0:
                    producer.poll(0)
            assert producer.flush(30) == 0
        wait_for_final_windows(conf, topic, audit_topics["audit_topic"], 90)
    v = verify_topic(conf, topic, WINDOW_MS, audit_topic=audit_topics["audit_topic"])
    assert sum(r.sent for r in v.rows.values()) == n
    assert sum(r.unique for r in v.rows.values()) == n
    assert sum(r.duplicated for r in v.rows.values()) == 0
    assert compare_with_cluster(v, CLUSTER) == []
    assert sum(c["received"] for c in cluster_counts(v.audit_log, CLUSTER, topic).values()) == n

    cli = CliRunner().invoke(app, ["verify", "-b", secure.bootstrap, "--topic", topic, "--json"])
    assert cli.exit_code == 0, cli.output
    assert sum(json.loads(line)["received"] for line in cli.output.splitlines() if line.startswith("{")) == n

    out, err = capfd.readouterr()
    assert_secret_absent(
        secure.password,
        caplog.text,
        out,
        err,
        cli.output,
        repr(settings),
        str(settings),
        settings.model_dump_json(),
        repr(settings.model_dump()),
        str(describe(settings)),
        repr(KafkaSecurity.from_env()),
        repr(audit),
        (secure.cluster.data_dir / "cluster.json").read_text(),
        (secure.cluster.data_dir / "node-1" / "server.properties").read_text(),
        (secure.cluster.data_dir / "node-1" / "server.log").read_text(errors="replace"),
    )


def test_wrong_password_is_a_clear_authentication_error(
    secure, monkeypatch, audit_topics, tmp_path, caplog, capfd
):
    caplog.set_level(logging.DEBUG)
    wrong = f"wrong-{secrets.token_hex(8)}"
    set_security(monkeypatch, secure, SASL_PASSWORD=wrong)
    conf = {"bootstrap.servers": secure.bootstrap}
    messages = []

    producer = AuditedProducer(  # no network I/O here: the check is explicit (or at first use)
        {**conf, "client.id": "wrong"}, ProducerAuditSettings(audit_topic=audit_topics["audit_topic"])
    )
    t0 = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as producer_error:
        producer.check()
    assert time.monotonic() - t0 < 15, "the error should come at once, not after retrying"
    producer.close()
    messages.append(str(producer_error.value))

    t0 = time.monotonic()
    produce_cli = CliRunner().invoke(
        app, ["produce", "-b", secure.bootstrap, "--topic", "t", "--count", "1", "--rate", "0"]
    )
    assert produce_cli.exit_code == 2, produce_cli.output
    assert time.monotonic() - t0 < 15, "kafka-audit produce should fail at once, not after retrying"
    messages.append(produce_cli.output)

    consumer = AuditConsumer(consumer_settings(secure.bootstrap, ["t"], audit_topics))
    with pytest.raises(KafkaAuthenticationError) as consumer_error:
        consumer.run()
    messages.append(str(consumer_error.value))

    job = ReconciliationJob(
        SparkJobSettings(
            bootstrap_servers=secure.bootstrap,
            audit_topic=audit_topics["audit_topic"],
            checkpoint_dir=tmp_path / "checkpoint",
            parquet_dir=tmp_path / "parquet",
        )
    )
    with pytest.raises(KafkaAuthenticationError) as job_error:
        job.start()  # fails before a Spark session is created
    assert job.spark is None
    messages.append(str(job_error.value))

    cli = CliRunner().invoke(app, ["verify", "-b", secure.bootstrap, "--topic", "t"])
    assert cli.exit_code == 2
    messages.append(cli.output)

    for text in messages:
        flat = " ".join(text.split())
        assert "authentication failed" in flat.lower(), text
        assert "invalid credentials" in flat and "SCRAM-SHA-512" in flat, text
        assert USER in flat and "KAFKA_AUDIT_KAFKA_SASL_PASSWORD" in flat, text
    out, err = capfd.readouterr()
    assert_secret_absent(wrong, caplog.text, out, err, *messages)


def test_untrusted_broker_certificate_is_a_clear_tls_error(secure, monkeypatch):
    set_security(monkeypatch, secure, SSL_CA_LOCATION=str(secure.other_ca))
    with pytest.raises(KafkaTlsError, match="certificate verify failed") as exc:
        ensure_topic({"bootstrap.servers": secure.bootstrap}, "never-created")
    assert "KAFKA_AUDIT_KAFKA_SSL_CA_LOCATION" in str(exc.value)


@pytest.mark.slow
def test_spark_job_reads_audit_topic_and_writes_results_over_sasl_ssl(
    secure, monkeypatch, request, audit_topics, tmp_path, capfd
):
    set_security(monkeypatch, secure)
    conf = {"bootstrap.servers": secure.bootstrap}
    topic = unique_topic(request)
    ensure_topic(conf, topic, 3)
    audit = ProducerAuditSettings(
        window_ms=WINDOW_MS,
        grace_ms=1_000,
        snapshot_interval_ms=1_000,
        audit_topic=audit_topics["audit_topic"],
    )
    n = 2_000
    with running_consumer(consumer_settings(secure.bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)):
        with AuditedProducer({**conf, "client.id": "secure-spark"}, audit) as producer:
            for i in range(n):
                producer.produce(topic, f"message {i}".encode())
            assert producer.flush(30) == 0
        wait_for_final_windows(conf, topic, audit_topics["audit_topic"], 90)
    # The job starts on a backlog: its heartbeat moves the watermark past every window at once.
    settings = SparkJobSettings(
        bootstrap_servers=secure.bootstrap,
        audit_topic=audit_topics["audit_topic"],
        dlq_topic=audit_topics["dlq_topic"],
        results_topic=f"{audit_topics['audit_topic']}.results",
        commits_topic=f"{audit_topics['audit_topic']}.commits",
        checkpoint_dir=tmp_path / "checkpoint",
        parquet_dir=tmp_path / "parquet",
        clusters=[CLUSTER],
        trigger_ms=1_000,
        watermark_delay_ms=2_000,
        grace_ms=4_000,
        heartbeat_ms=500,
        shuffle_partitions=1,
        query_name=f"q-secure-{audit_topics['audit_topic'][-8:]}",
    )
    assert settings.kafka.security_protocol == "SASL_SSL"
    job = ReconciliationJob(settings)
    job.start()
    try:

        def finals() -> dict:
            if job.exception() is not None:
                raise AssertionError(f"the Spark query failed: {job.exception()}")
            rows = final_results(read_results(conf, settings.results_topic))
            mine = {k: v for k, v in rows.items() if k[0] == topic and k[2] == f"cluster:{CLUSTER}"}
            return mine if sum(r[0]["received"] for r in mine.values()) == n else {}

        results = wait_for(finals, 120, "final results of every window")
    finally:
        job.stop()
    assert sum(r[0]["sent"] for r in results.values()) == n
    assert all(r[0]["loss_rate"] == 0 and r[0]["duplicate_rate"] == 0 for r in results.values())
    out, err = capfd.readouterr()
    assert_secret_absent(secure.password, out, err, repr(settings), settings.model_dump_json())
