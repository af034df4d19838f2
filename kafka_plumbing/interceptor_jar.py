"""Where the JVM interceptors' jar is (``jvm/interceptors``, built by ``make bootstrap``).

``kafka-audit-interceptors-<version>.jar`` audits any Java Kafka client by configuration alone
(``interceptor.classes=io.kafkaaudit.interceptors.AuditProducerInterceptor`` or
``...AuditConsumerInterceptor``; docs/DESIGN.md, "JVM interceptors"; docs/guide/jvm-interceptors.md). The
bootstrap builds it with Maven into ``<cache>/jars-interceptors-<hash of the module's sources and the audit
record schema>`` and links ``<cache>/jars-interceptors`` to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from kafka_plumbing.jvm import JarsNotFoundError, cache_dir

INTERCEPTORS_VERSION = "0.1.0"
"""Version of the interceptors' Maven module (``jvm/interceptors/pom.xml``)."""

INTERCEPTORS_JAR = f"kafka-audit-interceptors-{INTERCEPTORS_VERSION}.jar"
"""File name of the shaded jar (Avro and RoaringBitmap relocated inside; kafka-clients is the host's)."""

PRODUCER_INTERCEPTOR = "io.kafkaaudit.interceptors.AuditProducerInterceptor"
"""Class name for a producer's ``interceptor.classes`` (the producer tier)."""

CONSUMER_INTERCEPTOR = "io.kafkaaudit.interceptors.AuditConsumerInterceptor"
"""Class name for a consumer's ``interceptor.classes`` (the tier ``consumer:<group.id>``)."""

BUILD_COMMAND = "make bootstrap (or: mvn -B -s jvm/settings.xml -f jvm/interceptors/pom.xml package)"
"""What builds the jar, named in errors."""


def interceptor_jar() -> Path:
    """Return the path of the interceptors' jar.

    ``$KAFKA_AUDIT_INTERCEPTORS_JAR`` (a jar file) overrides ``<cache>/jars-interceptors/``
    + :data:`INTERCEPTORS_JAR`.

    Raises:
        JarsNotFoundError: if the jar does not exist, naming the command that builds it.
    """
    override = os.environ.get("KAFKA_AUDIT_INTERCEPTORS_JAR")
    path = Path(override) if override else cache_dir() / "jars-interceptors" / INTERCEPTORS_JAR
    if not path.is_file():
        raise JarsNotFoundError(f"no JVM interceptors jar at {path}: run {BUILD_COMMAND}")
    return path


__all__ = [
    "BUILD_COMMAND",
    "CONSUMER_INTERCEPTOR",
    "INTERCEPTORS_JAR",
    "INTERCEPTORS_VERSION",
    "PRODUCER_INTERCEPTOR",
    "interceptor_jar",
]
