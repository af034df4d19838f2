"""Kafka client security, configured once: TLS and SASL (SCRAM) for every Kafka client the project runs.

:class:`KafkaSecurity` is one pydantic-settings model (environment prefix ``KAFKA_AUDIT_KAFKA_``, or the
``[kafka]`` section of the ``kafka-audit up`` config file) that renders

* librdkafka properties (``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``,
  ``ssl.ca.location``, ...) for the confluent-kafka clients: audited producer, audit consumer, verifier,
  topic admin, the Spark job's sinks and heartbeat (:func:`client_config`);
* Java Kafka client properties for the Spark Kafka source (``kafka.security.protocol``,
  ``kafka.sasl.jaas.config`` with ``ScramLoginModule``, ``kafka.ssl.truststore.type=PEM``, ...)
  (:func:`spark_kafka_options`).

Precedence: a librdkafka config that names its own ``security.protocol`` (``-X security.protocol=...``,
``extra_config``) is used as it is; otherwise the settings' properties are added to it. Passwords are
``SecretStr``: ``repr``, ``str`` and JSON dumps of the settings show ``**********``; only the rendered
client configs hold them in clear, and those are handed to the clients, never logged.

At component start :func:`wait_for_cluster` turns librdkafka's retry-forever behaviour on bad
credentials or an untrusted certificate into a :class:`KafkaAuthenticationError` /
:class:`KafkaTlsError` with the broker's reason and the setting to fix.

Sources: librdkafka CONFIGURATION.md; Kafka documentation, "Security" (SASL/SCRAM, SSL, PEM key stores
from KIP-651); Spark Structured Streaming + Kafka Integration Guide ("kafka."-prefixed options).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from kafka_plumbing.errors import ConfigError, KafkaAuditError, config_error

__all__ = [
    "ENV_PREFIX",
    "KafkaAuthenticationError",
    "KafkaConnectionError",
    "KafkaSecurity",
    "KafkaSecurityError",
    "KafkaTlsError",
    "client_config",
    "spark_kafka_options",
    "wait_for_cluster",
]

ENV_PREFIX = "KAFKA_AUDIT_KAFKA_"
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]

_JAAS_MODULES = {
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
}
SECURITY_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)
"""The librdkafka properties :class:`KafkaSecurity` renders and reads back."""


class KafkaSecurityError(KafkaAuditError):
    """A Kafka client could not connect securely; the message says why and which setting to check."""


class KafkaAuthenticationError(KafkaSecurityError):
    """The broker rejected the SASL credentials (wrong user name, password or mechanism)."""


class KafkaTlsError(KafkaSecurityError):
    """The TLS handshake failed (the broker's certificate is not trusted, or names another host)."""


class KafkaConnectionError(KafkaAuditError):
    """No broker of ``bootstrap.servers`` answered in time (down, wrong address, or wrong protocol)."""


class KafkaSecurity(BaseSettings):
    """How every Kafka client of the project authenticates and encrypts (librdkafka property names).

    Environment: ``KAFKA_AUDIT_KAFKA_SECURITY_PROTOCOL=SASL_SSL``, ``KAFKA_AUDIT_KAFKA_SASL_USERNAME``,
    ``KAFKA_AUDIT_KAFKA_SASL_PASSWORD``, ``KAFKA_AUDIT_KAFKA_SSL_CA_LOCATION``, ...

    Attributes:
        security_protocol: ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
            (case-insensitive, as in librdkafka).
        sasl_mechanism: ``sasl.mechanism``: SCRAM-SHA-256, SCRAM-SHA-512 (default) or PLAIN.
        sasl_username: ``sasl.username``; required with SASL_*.
        sasl_password: ``sasl.password``; required with SASL_*. Never shown.
        ssl_ca_location: PEM file of the CA certificate(s) that signed the brokers' certificates
            (``ssl.ca.location``; the Java clients read it as a PEM trust store). None: the system's CAs
            (librdkafka only; the Java clients use the JVM's default trust store).
        ssl_certificate_location: Client certificate (PEM) for mutual TLS, with ``ssl_key_location``.
        ssl_key_location: Client private key (PEM; PKCS#8 for the Java clients).
        ssl_key_password: Password of an encrypted client key. Never shown.
        ssl_endpoint_identification: Check that the broker's certificate names the host connected to
            (``ssl.endpoint.identification.algorithm`` https; False: none).

    Raises:
        ConfigError: on construction, if SASL_* lacks a user name or password, a file does not exist,
            or only one of the client certificate and key is given.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: Path | None = None
    ssl_certificate_location: Path | None = None
    ssl_key_location: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_endpoint_identification: bool = True

    @field_validator("security_protocol", "sasl_mechanism", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    def model_post_init(self, context: Any) -> None:
        """Check combinations that the field types cannot.

        Raises:
            ConfigError: naming the setting (and its environment variable) to fix.
        """
        if self.sasl and (not self.sasl_username or self.sasl_password is None):
            raise ConfigError(
                f"security_protocol={self.security_protocol} needs sasl_username and sasl_password "
                f"({ENV_PREFIX}SASL_USERNAME, {ENV_PREFIX}SASL_PASSWORD)"
            )
        if (self.ssl_certificate_location is None) != (self.ssl_key_location is None):
            raise ConfigError(
                "ssl_certificate_location and ssl_key_location go together (mutual TLS); give both or neither"
            )
        for name in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location"):
            path = getattr(self, name)
            if self.tls and path is not None and not Path(path).is_file():
                raise ConfigError(f"{name}={path}: no such file ({ENV_PREFIX}{name.upper()})")

    # ------------------------------------------------------------------------------ construction
    @staticmethod
    def _env_name(loc: tuple[int | str, ...]) -> str:
        """Name a validation error's ``loc`` by its environment variable (none for a model-level error)."""
        return f"{ENV_PREFIX}{'_'.join(str(x) for x in loc).upper()}" if loc else ""

    @classmethod
    def from_env(cls, **overrides: Any) -> KafkaSecurity:
        """Read the settings from ``KAFKA_AUDIT_KAFKA_*`` (``overrides`` win).

        Raises:
            ConfigError: for an invalid value, naming the environment variable and what is allowed.
        """
        try:
            return cls(**overrides)
        except ValidationError as exc:
            raise config_error(exc, "invalid Kafka security settings", cls._env_name) from None

    @classmethod
    def from_librdkafka(cls, config: Mapping[str, object]) -> KafkaSecurity:
        """Read the security properties of a librdkafka config back (the inverse of librdkafka_config).

        The environment is not read: absent properties take the defaults (PLAINTEXT).

        Raises:
            ConfigError: if they are incomplete or invalid (e.g. SASL_SSL without ``sasl.username``).
        """

        def get(key: str) -> Any:
            value = config.get(key)
            return None if value is None or value == "" else value

        endpoint = str(get("ssl.endpoint.identification.algorithm") or "https").lower()
        values = {
            "security_protocol": get("security.protocol") or "PLAINTEXT",
            "sasl_mechanism": get("sasl.mechanism") or get("sasl.mechanisms") or "SCRAM-SHA-512",
            "sasl_username": get("sasl.username"),
            "sasl_password": get("sasl.password"),
            "ssl_ca_location": get("ssl.ca.location"),
            "ssl_certificate_location": get("ssl.certificate.location"),
            "ssl_key_location": get("ssl.key.location"),
            "ssl_key_password": get("ssl.key.password"),
            "ssl_endpoint_identification": endpoint != "none",
        }
        try:  # every field is given, so no environment variable is read
            return cls(**values)
        except ValidationError as exc:
            raise config_error(exc, "invalid librdkafka security properties") from None

    # ------------------------------------------------------------------------------ rendering
    @property
    def sasl(self) -> bool:
        """True for SASL_PLAINTEXT and SASL_SSL."""
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        """True for SSL and SASL_SSL."""
        return self.security_protocol.endswith("SSL")

    def librdkafka_config(self) -> dict[str, str]:
        """Return the librdkafka security properties, passwords in clear: hand them to a client, never log.

        Returns:
            ``security.protocol`` always; ``sasl.*`` with SASL; ``ssl.*`` with TLS.
        """
        out = {"security.protocol": self.security_protocol}
        if self.sasl:
            assert self.sasl_username is not None and self.sasl_password is not None  # model_post_init
            out["sasl.mechanism"] = self.sasl_mechanism
            out["sasl.username"] = self.sasl_username
            out["sasl.password"] = self.sasl_password.get_secret_value()
        if self.tls:
            if self.ssl_ca_location is not None:
                out["ssl.ca.location"] = str(self.ssl_ca_location)
            if self.ssl_certificate_location is not None and self.ssl_key_location is not None:
                out["ssl.certificate.location"] = str(self.ssl_certificate_location)
                out["ssl.key.location"] = str(self.ssl_key_location)
            if self.ssl_key_password is not None:
                out["ssl.key.password"] = self.ssl_key_password.get_secret_value()
            out["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_endpoint_identification else "none"
            )
        return out

    def java_config(self) -> dict[str, str]:
        """Return the same settings as Java Kafka client properties (passwords in clear; never log).

        SASL credentials go into ``sasl.jaas.config`` (``ScramLoginModule`` / ``PlainLoginModule``); the CA
        file becomes a PEM trust store (``ssl.truststore.type=PEM``), and a client certificate and key a
        PEM key store (one ``ssl.keystore.location`` when both are in one file, else their contents in
        ``ssl.keystore.certificate.chain`` and ``ssl.keystore.key``).
        """
        out = {"security.protocol": self.security_protocol}
        if self.sasl:
            assert self.sasl_username is not None and self.sasl_password is not None  # model_post_init
            out["sasl.mechanism"] = self.sasl_mechanism
            out["sasl.jaas.config"] = (
                f"{_JAAS_MODULES[self.sasl_mechanism]} required "
                f'username="{_jaas_quote(self.sasl_username)}" '
                f'password="{_jaas_quote(self.sasl_password.get_secret_value())}";'
            )
        if self.tls:
            if self.ssl_ca_location is not None:
                out["ssl.truststore.type"] = "PEM"
                out["ssl.truststore.location"] = str(self.ssl_ca_location)
            cert, key = self.ssl_certificate_location, self.ssl_key_location
            if cert is not None and key is not None:
                out["ssl.keystore.type"] = "PEM"
                if Path(cert).resolve() == Path(key).resolve():
                    out["ssl.keystore.location"] = str(cert)
                else:
                    out["ssl.keystore.certificate.chain"] = Path(cert).read_text()
                    out["ssl.keystore.key"] = Path(key).read_text()
            if self.ssl_key_password is not None:
                out["ssl.key.password"] = self.ssl_key_password.get_secret_value()
            out["ssl.endpoint.identification.algorithm"] = "https" if self.ssl_endpoint_identification else ""
        return out


def _jaas_quote(value: str) -> str:
    """Escape a value for a double-quoted JAAS option (Kafka's JaasConfig uses StreamTokenizer)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def client_config(config: Mapping[str, Any], security: KafkaSecurity | None = None) -> dict[str, Any]:
    """Return a copy of a librdkafka config with the security properties added.

    Args:
        config: librdkafka config (not mutated). If it names ``security.protocol`` it is returned as is
            (copied): explicit client properties win.
        security: The settings to add; None reads ``KAFKA_AUDIT_KAFKA_*`` (PLAINTEXT when unset).

    Raises:
        ConfigError: if the environment holds invalid security settings.
    """
    if "security.protocol" in config:
        return dict(config)
    sec = security if security is not None else KafkaSecurity.from_env()
    return {**sec.librdkafka_config(), **config}


def spark_kafka_options(config: Mapping[str, Any]) -> dict[str, str]:
    """Return Spark Kafka source/sink options (``kafka.``-prefixed Java client properties) for a config.

    Args:
        config: librdkafka config as :func:`client_config` returns it (``bootstrap.servers``, security,
            and pass-through properties, which keep their names).

    Returns:
        ``kafka.bootstrap.servers``, the security properties as Java client properties, and every other
        string-valued property of ``config`` with the ``kafka.`` prefix.

    Raises:
        ConfigError: if the security properties are incomplete.
    """
    out = {
        f"kafka.{k}": str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in config.items()
        if k not in SECURITY_KEYS and isinstance(v, str | int | float)
    }
    out.update({f"kafka.{k}": v for k, v in KafkaSecurity.from_librdkafka(config).java_config().items()})
    return out


class _Client(Protocol):
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...

    def poll(self, timeout: float = -1) -> Any: ...


def _security_failure(errors: list[Any], config: Mapping[str, Any]) -> KafkaSecurityError | None:
    """Map librdkafka errors (from ``error_cb``) to an authentication or TLS error, if one is among them."""
    from confluent_kafka import KafkaError

    servers = config.get("bootstrap.servers", "?")
    for err in errors:
        text = err.str()
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            return KafkaAuthenticationError(
                f"Kafka authentication failed at bootstrap.servers={servers} as user "
                f"{config.get('sasl.username')!r} (sasl.mechanism={config.get('sasl.mechanism')}): {text}. "
                f"Check {ENV_PREFIX}SASL_USERNAME, {ENV_PREFIX}SASL_PASSWORD and {ENV_PREFIX}SASL_MECHANISM."
            )
        if err.code() == KafkaError._SSL or "SSL_HANDSHAKE" in text or "certificate verify failed" in text:
            return KafkaTlsError(
                f"TLS handshake with bootstrap.servers={servers} failed: {text}. Check "
                f"{ENV_PREFIX}SSL_CA_LOCATION (the CA that signed the broker's certificate) and that the "
                f"certificate names the host (or set {ENV_PREFIX}SSL_ENDPOINT_IDENTIFICATION=false)."
            )
    return None


def wait_for_cluster(client: _Client, errors: list[Any], config: Mapping[str, Any], timeout_s: float) -> None:
    """Poll until the cluster answers a metadata request; fail fast on bad credentials or certificates.

    librdkafka retries failed authentication forever and only reports it to ``error_cb``; this turns
    it into an exception at component start instead of a hang.

    Args:
        client: A confluent-kafka ``AdminClient``/``Consumer``/``Producer`` created with
            ``error_cb=errors.append``.
        errors: The list its ``error_cb`` appends ``KafkaError`` objects to.
        config: Its connection config (for the message; passwords are never included).
        timeout_s: Deadline, s.

    Raises:
        KafkaAuthenticationError: if the broker rejected the SASL credentials.
        KafkaTlsError: if the TLS handshake failed.
        KafkaConnectionError: if no broker answered within ``timeout_s``.
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            client.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            last = exc.args[0].str() if hasattr(exc.args[0], "str") else str(exc)
        client.poll(0)  # serves error_cb
        failure = _security_failure(errors, config)
        if failure is not None:
            raise failure
        if time.monotonic() >= deadline:
            seen = "; ".join(dict.fromkeys(e.str() for e in errors)) or last
            protocol = config.get("security.protocol", "PLAINTEXT")
            raise KafkaConnectionError(
                f"no broker of bootstrap.servers={config.get('bootstrap.servers')} answered in "
                f"{timeout_s:.0f} s (security.protocol={protocol}): {seen}"
            )
