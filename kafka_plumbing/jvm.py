"""Where the JVM and the project's Maven jars are (fetched by ``make bootstrap`` from ``jvm/pom.xml``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kafka_plumbing.errors import KafkaAuditError


class JavaNotFoundError(KafkaAuditError):
    """No ``java`` executable: install a JDK/JRE 17+ (``apt-get install openjdk-17-jre-headless``)."""


class JarsNotFoundError(KafkaAuditError):
    """The Maven jars are missing: run ``make bootstrap`` (or set ``KAFKA_AUDIT_JARS_<PROFILE>``)."""


def cache_dir() -> Path:
    """Return the cache root: ``$KAFKA_AUDIT_CACHE`` or ``~/.cache/kafka-audit``."""
    return Path(os.environ.get("KAFKA_AUDIT_CACHE", Path.home() / ".cache" / "kafka-audit"))


def java_executable() -> str:
    """Return the path of ``java`` (``$JAVA_HOME/bin/java`` first, then ``PATH``).

    Raises:
        JavaNotFoundError: if neither exists.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise JavaNotFoundError(
            "java not found on PATH nor in $JAVA_HOME: install Java 17+ "
            "(apt-get install openjdk-17-jre-headless) or run `make bootstrap`"
        )
    return found


def jars_dir(profile: str) -> Path:
    """Return the directory holding the jars of ``profile`` (``kafka``, ``spark`` or ``jmx-exporter``).

    ``$KAFKA_AUDIT_JARS_<PROFILE>`` (upper case, ``-`` as ``_``) overrides ``<cache>/jars-<profile>``.

    Raises:
        JarsNotFoundError: if the directory has no jars.
    """
    override = os.environ.get(f"KAFKA_AUDIT_JARS_{profile.upper().replace('-', '_')}")
    path = Path(override) if override else cache_dir() / f"jars-{profile}"
    if not path.is_dir() or not any(path.glob("*.jar")):
        raise JarsNotFoundError(f"no {profile} jars in {path}: run `make bootstrap` first")
    return path


def classpath(profile: str) -> str:
    """Return a Java classpath with every jar of ``profile``."""
    return str(jars_dir(profile) / "*")
