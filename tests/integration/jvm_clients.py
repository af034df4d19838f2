"""Java clients for the JVM-interceptor integration tests: Kafka's perf tools and a plain Java producer.

Both run on the ``kafka`` jars (kafka-clients 4.3) with the interceptors' jar on the classpath; the audit
is added by properties only (``interceptor.classes`` and ``kafka.audit.*``), as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from kafka_plumbing.interceptor_jar import interceptor_jar
from kafka_plumbing.jvm import classpath, java_executable

JAVA_DIR = Path(__file__).parent / "java"
PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"
"""``kafka-producer-perf-test.sh``'s main class (kafka-tools)."""


def client_classpath(*extra: Path) -> str:
    """The ``kafka`` jars, the interceptors' jar, then ``extra``."""
    return os.pathsep.join([classpath("kafka"), str(interceptor_jar()), *(str(p) for p in extra)])


def java_command(main: str, *args: str, extra: tuple[Path, ...] = ()) -> list[str]:
    """``java -cp <client classpath> main args`` with a small heap (the tests' clients are small)."""
    return [java_executable(), "-Xmx256m", "-XX:+UseSerialGC", "-cp", client_classpath(*extra), main, *args]


def perf_producer(
    topic: str, records: int, throughput: int, props: dict[str, str], size: int = 100
) -> list[str]:
    """``kafka-producer-perf-test --topic .. --num-records .. --record-size .. --producer-props ..``."""
    return java_command(
        PRODUCER_PERFORMANCE,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(size),
        "--throughput",
        str(throughput),
        "--command-property",
        *(f"{k}={v}" for k, v in props.items()),
    )


def compile_plain_producer(out: Path) -> Path:
    """Compile ``java/PlainProducer.java`` against kafka-clients into ``out``; return ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    javac = str(Path(java_executable()).with_name("javac"))
    subprocess.run(
        [javac, "-d", str(out), "-cp", classpath("kafka"), str(JAVA_DIR / "PlainProducer.java")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def plain_producer(
    classes: Path, topic: str, records: int, rate: float, window_ms: int, props: dict[str, str]
) -> list[str]:
    """The command of ``PlainProducer`` (see its class comment) compiled into ``classes``."""
    args = [topic, str(records), str(rate), str(window_ms), *(f"{k}={v}" for k, v in props.items())]
    return java_command("PlainProducer", *args, extra=(classes,))


def last_json_line(stdout: str) -> dict[str, Any]:
    """The last line of ``stdout`` that parses as a JSON object (PlainProducer's result)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    raise AssertionError(f"no JSON result in the output:\n{stdout[-2000:]}")
