"""KafkaSecurity: librdkafka and Java/Spark properties, precedence, validation, no secret leaks."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from pydantic import SecretStr

from audit_consumer.settings import AuditConsumerSettings
from kafka_audit.up_settings import load_up_settings
from kafka_plumbing.cluster_nodes import SaslSslListener
from kafka_plumbing.errors import ConfigError
from kafka_plumbing.local_cluster import ClusterError, KafkaCluster
from kafka_plumbing.security import (
    KafkaAuthenticationError,
    KafkaConnectionError,
    KafkaSecurity,
    KafkaTlsError,
    client_config,
    spark_kafka_options,
    wait_for_cluster,
)
from spark_streaming.settings import SparkJobSettings

PASSWORD = 'pa"ss\\word-7f3a9c'  # a quote and a backslash: JAAS quoting must cope


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for key in (
        "SECURITY_PROTOCOL",
        "SASL_MECHANISM",
        "SASL_USERNAME",
        "SASL_PASSWORD",
        "SSL_CA_LOCATION",
        "SSL_CERTIFICATE_LOCATION",
        "SSL_KEY_LOCATION",
        "SSL_KEY_PASSWORD",
        "SSL_ENDPOINT_IDENTIFICATION",
    ):
        monkeypatch.delenv(f"KAFKA_AUDIT_KAFKA_{key}", raising=False)


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return path


@pytest.fixture
def secure_env(monkeypatch, ca):
    monkeypatch.setenv("KAFKA_AUDIT_KAFKA_SECURITY_PROTOCOL", "sasl_ssl")
    monkeypatch.setenv("KAFKA_AUDIT_KAFKA_SASL_USERNAME", "alice")
    monkeypatch.setenv("KAFKA_AUDIT_KAFKA_SASL_PASSWORD", PASSWORD)
    monkeypatch.setenv("KAFKA_AUDIT_KAFKA_SSL_CA_LOCATION", str(ca))


def test_default_is_plaintext_and_adds_nothing_else():
    assert KafkaSecurity.from_env().librdkafka_config() == {"security.protocol": "PLAINTEXT"}
    assert client_config({"bootstrap.servers": "b:9092"}) == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "PLAINTEXT",
    }


def test_environment_renders_librdkafka_properties(secure_env, ca):
    sec = KafkaSecurity.from_env()
    assert sec.librdkafka_config() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "https",
    }


def test_java_properties_for_spark_use_scram_jaas_and_a_pem_truststore(secure_env, ca):
    options = spark_kafka_options(
        client_config({"bootstrap.servers": "b:9093", "client.dns.lookup": "use_all_dns_ips"})
    )
    assert options == {
        "kafka.bootstrap.servers": "b:9093",
        "kafka.client.dns.lookup": "use_all_dns_ips",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="pa\\"ss\\\\word-7f3a9c";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca),
        "kafka.ssl.endpoint.identification.algorithm": "https",
    }


def test_plain_mechanism_and_no_hostname_check_in_java_names(ca):
    sec = KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="bob",
        sasl_password=SecretStr("x"),
        ssl_ca_location=ca,
        ssl_endpoint_identification=False,
    )
    java = sec.java_config()
    assert java["sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
    )
    assert java["ssl.endpoint.identification.algorithm"] == ""
    assert sec.librdkafka_config()["ssl.endpoint.identification.algorithm"] == "none"


def test_client_certificate_becomes_a_pem_keystore(tmp_path, ca):
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    cert.write_text("CERT")
    key.write_text("KEY")
    sec = KafkaSecurity(
        security_protocol="SSL", ssl_ca_location=ca, ssl_certificate_location=cert, ssl_key_location=key
    )
    assert sec.java_config()["ssl.keystore.certificate.chain"] == "CERT"
    assert sec.java_config()["ssl.keystore.key"] == "KEY"
    both = KafkaSecurity(security_protocol="SSL", ssl_certificate_location=cert, ssl_key_location=cert)
    assert both.java_config()["ssl.keystore.location"] == str(cert)
    assert sec.librdkafka_config()["ssl.certificate.location"] == str(cert)


def test_librdkafka_round_trip_ignores_the_environment(secure_env):
    sec = KafkaSecurity.from_env()
    assert KafkaSecurity.from_librdkafka(sec.librdkafka_config()) == sec
    assert KafkaSecurity.from_librdkafka({"bootstrap.servers": "b"}).security_protocol == "PLAINTEXT"


def test_explicit_security_protocol_in_the_config_wins_and_the_input_is_not_mutated(secure_env):
    config = {"bootstrap.servers": "b:9092", "security.protocol": "PLAINTEXT"}
    out = client_config(config)
    assert out == config and out is not config
    merged_input = {"bootstrap.servers": "b:9092"}
    merged = client_config(merged_input)
    assert merged["security.protocol"] == "SASL_SSL" and merged_input == {"bootstrap.servers": "b:9092"}
    given = KafkaSecurity(security_protocol="SSL")
    assert client_config(merged_input, given)["security.protocol"] == "SSL"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SECURITY_PROTOCOL": "SASL_SSL"}, "KAFKA_AUDIT_KAFKA_SASL_PASSWORD"),
        ({"SECURITY_PROTOCOL": "TLS"}, "KAFKA_AUDIT_KAFKA_SECURITY_PROTOCOL: Input should be 'PLAINTEXT'"),
        ({"SASL_MECHANISM": "GSSAPI"}, "'SCRAM-SHA-256', 'SCRAM-SHA-512' or 'PLAIN'"),
        ({"SECURITY_PROTOCOL": "SSL", "SSL_CA_LOCATION": "/nonexistent/ca.pem"}, "no such file"),
        ({"SSL_CERTIFICATE_LOCATION": "/tmp/x.crt"}, "go together"),
    ],
)
def test_bad_settings_are_clear_config_errors(monkeypatch, env, message):
    for k, v in env.items():
        monkeypatch.setenv(f"KAFKA_AUDIT_KAFKA_{k}", v)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        KafkaSecurity.from_env()
    with pytest.raises(ConfigError):
        AuditConsumerSettings()


def test_component_settings_read_the_same_environment(secure_env):
    assert AuditConsumerSettings().kafka == SparkJobSettings().kafka == KafkaSecurity.from_env()


def test_up_config_file_kafka_section_takes_the_password_from_the_environment(tmp_path, monkeypatch, ca):
    config = tmp_path / "up.toml"
    config.write_text(
        'bootstrap_servers = "b:9093"\n[kafka]\nsecurity_protocol = "SASL_SSL"\n'
        f'sasl_username = "alice"\nssl_ca_location = "{ca}"\n'
    )
    monkeypatch.setenv("KAFKA_AUDIT_KAFKA_SASL_PASSWORD", PASSWORD)
    s = load_up_settings(config)
    assert s.kafka.librdkafka_config()["sasl.password"] == PASSWORD
    assert s.kafka.sasl_username == "alice"
    monkeypatch.delenv("KAFKA_AUDIT_KAFKA_SASL_PASSWORD")
    with pytest.raises(ConfigError, match=r"kafka: .*needs sasl_username and sasl_password"):
        load_up_settings(config)
    config.write_text('[kafka]\nsecurity_protocol = "SSL"\n')
    with pytest.raises(ConfigError, match="needs bootstrap_servers"):
        load_up_settings(config)


def test_password_never_shown_by_repr_str_json_or_logging(secure_env, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    config = tmp_path / "up.toml"
    config.write_text('bootstrap_servers = "b:9093"\n')
    objects = [
        KafkaSecurity.from_env(),
        AuditConsumerSettings(topics=["t"]),
        SparkJobSettings(),
        load_up_settings(config),
    ]
    log = logging.getLogger("test_security")
    texts = []
    for obj in objects:
        log.info("settings %s %r", obj, obj)
        texts += [repr(obj), str(obj), obj.model_dump_json(), json.dumps(obj.model_dump(mode="json"))]
    texts.append(caplog.text)
    for text in texts:
        assert PASSWORD not in text and "pa\\" not in text
        assert "**********" in text


def test_local_cluster_sasl_ssl_listener_properties_and_no_password_on_disk(tmp_path):
    tls = SaslSslListener(tmp_path / "server.pem")
    cluster = KafkaCluster.create(
        tmp_path, brokers=3, base_port=40000, sasl_ssl=tls, scram_users={"alice": SecretStr("s3cret")}
    )
    assert cluster.sasl_ssl_bootstrap_servers == "127.0.0.1:40006,127.0.0.1:40007,127.0.0.1:40008"
    props = cluster._properties(cluster.nodes[0])
    assert "SASL_SSL://127.0.0.1:40006" in props and "SASL_SSL:SASL_SSL" in props
    assert "inter.broker.listener.name=PLAINTEXT" in props
    assert f"ssl.keystore.location={tls.keystore_location}" in props
    assert "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config" in props
    assert cluster._scram_arguments().count("--add-scram") == 2
    assert "s3cret" not in props and "s3cret" not in repr(cluster)
    cluster._save()
    assert "s3cret" not in (tmp_path / "cluster.json").read_text()
    loaded = KafkaCluster.load(tmp_path)
    assert loaded is not None and loaded.sasl_ssl == tls
    assert loaded.sasl_ssl_bootstrap_servers == cluster.sasl_ssl_bootstrap_servers
    with pytest.raises(ClusterError, match="must not contain"):
        KafkaCluster.create(tmp_path, sasl_ssl=tls, scram_users={"bob": SecretStr("a,b")})
    with pytest.raises(ClusterError, match="no SASL_SSL listener"):
        _ = KafkaCluster.create(tmp_path / "plain").sasl_ssl_bootstrap_servers


class FakeClient:
    """list_topics always fails; poll() reports the given librdkafka errors to error_cb."""

    def __init__(self, errors: list, report: list[KafkaError]) -> None:
        self.errors, self.report = errors, report

    def list_topics(self, topic=None, timeout=-1):
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))

    def poll(self, timeout=-1):
        self.errors.extend(self.report)
        return 0


@pytest.mark.parametrize(
    ("report", "error", "text"),
    [
        (
            KafkaError(
                KafkaError._AUTHENTICATION,
                "SASL authentication error: Authentication failed during authentication due to invalid "
                "credentials with SASL mechanism SCRAM-SHA-512",
            ),
            KafkaAuthenticationError,
            "Kafka authentication failed at bootstrap.servers=b:9093 as user 'alice'",
        ),
        (
            KafkaError(KafkaError._TRANSPORT, "certificate verify failed (after 8ms in state SSL_HANDSHAKE)"),
            KafkaTlsError,
            "TLS handshake with bootstrap.servers=b:9093 failed",
        ),
    ],
)
def test_security_failures_reported_to_error_cb_raise_at_once(report, error, text):
    errors: list = []
    conf = {"bootstrap.servers": "b:9093", "sasl.username": "alice", "sasl.password": PASSWORD}
    with pytest.raises(error, match=text) as exc:
        wait_for_cluster(FakeClient(errors, [report]), errors, conf, timeout_s=30)
    assert PASSWORD not in str(exc.value)


def test_unreachable_cluster_is_a_connection_error_after_the_deadline():
    errors: list = []
    with pytest.raises(KafkaConnectionError, match=r"no broker of bootstrap\.servers=b:1 answered"):
        wait_for_cluster(FakeClient(errors, []), errors, {"bootstrap.servers": "b:1"}, timeout_s=0.3)
