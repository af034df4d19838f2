"""Typed settings of a soak (pydantic-settings; env prefix ``KAFKA_AUDIT_SOAK_``).

The defaults are the 60-minute soak sized for a 2-core machine (``docs/DESIGN.md``, "Soak"): 4 audited
producers at 50 msg/s each over 2 topics (200 msg/s in all), 60 s windows, a 30 s micro-batch trigger.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

SCHEDULES = "schedules"
"""Directory of the shipped chaos schedules inside the package."""


def shipped_schedule(name: str) -> Path:
    """Return the path of a shipped schedule: ``soak-60m`` (the default) or ``soak-5m`` (``make test``)."""
    return Path(str(resources.files("soak").joinpath(SCHEDULES, f"{name}.yaml")))


class SoakSettings(BaseSettings):
    """What a soak runs, for how long, and how it is judged.

    Attributes:
        duration_s: How long the producers send, s (the chaos schedule must fit inside it).
        producers: Audited producers N (threads of one load process, one ``AuditedProducer`` each).
        topics: Audited topics M; producer i sends to topic ``i % M``.
        rate: Messages/s per producer (offered load; total N x rate).
        message_bytes: Fixed message size M, bytes.
        window_ms: Audit window, ms (producers, audit consumers and the Spark job).
        trigger_ms: Micro-batch trigger interval of the Spark job, ms; the acceptance wants p99 below it.
        message_timeout_ms: librdkafka ``message.timeout.ms`` of the producers, ms: longer than the longest
            fault (the 60 s network cut) plus a leader election, so no message is given up; windows are
            final after it + ``delivery_margin_ms`` (``docs/DESIGN.md``, invariant 8).
        consumer_grace_ms: Audit consumers' grace after a window's end, ms.
        spark_grace_ms: The Spark job's grace, ms (settle time = the two graces' gap, as ``up``).
        watermark_delay_ms: Spark watermark delay, ms.
        schedule: Chaos schedule YAML (:mod:`soak.schedule`); default the shipped ``soak-60m``.
        data_dir: Where everything goes (brokers, Spark, logs, records, report); wiped at start.
        record_interval_s: Sampling interval of the records (RSS, CPU, lag, results, alerts), s.
        settle_ms: After a chaos event ends, how long its effects may still show, ms: an alert whose
            window or start lies in a chaos event extended by this is a chaos alert, any other a false
            alert (:mod:`soak.verdict`).
        broker_heap_mb: JVM heap per broker, MiB.
        executor_memory_mb: ``spark.executor.memory`` per executor, MiB (each worker offers it); committed at
            start like the driver's (the 60-minute soak at commit b48d588 failed with an executor's JVM
            growing from 377 to 435 MiB between minutes 19 and 60 as G1 grew its heap: +10.2% of RSS).
        driver_memory_mb: ``spark.driver.memory``, MiB; committed at start like the brokers' heaps
            (``-Xms`` = ``-Xmx``, ``-XX:+AlwaysPreTouch``), so RSS does not step up as G1 grows the heap.
        final_timeout_s: After the load stops, how long to wait for every window to be final, s.
        retrain: Let the job retrain in the background as in production.
    """

    model_config = SettingsConfigDict(env_prefix="KAFKA_AUDIT_SOAK_", frozen=True, extra="forbid")

    duration_s: float = Field(3600.0, gt=0)
    producers: int = Field(4, ge=1)
    topics: int = Field(2, ge=1)
    rate: float = Field(50.0, gt=0)
    message_bytes: int = Field(512, gt=0)
    window_ms: int = Field(60_000, gt=0)
    trigger_ms: int = Field(30_000, gt=0)
    message_timeout_ms: int = Field(90_000, gt=0)
    consumer_grace_ms: int = Field(10_000, ge=0)
    spark_grace_ms: int = Field(30_000, ge=0)
    watermark_delay_ms: int = Field(10_000, ge=0)
    schedule: Path = Field(default_factory=lambda: shipped_schedule("soak-60m"))
    data_dir: Path = Path("var/soak")
    record_interval_s: float = Field(60.0, gt=0)
    settle_ms: int = Field(120_000, ge=0)
    broker_heap_mb: int = Field(512, ge=128)
    executor_memory_mb: int = Field(768, ge=256)
    driver_memory_mb: int = Field(1024, ge=256)
    final_timeout_s: float = Field(600.0, gt=0)
    retrain: bool = True

    @property
    def topic_names(self) -> list[str]:
        """The audited topics: ``soak.t0`` ... ``soak.t<M-1>``."""
        return [f"soak.t{i}" for i in range(self.topics)]

    @property
    def final_wait_ms(self) -> int:
        """How long after its end a window is final at the Spark job, at most, ms (invariant 8).

        ``message.timeout.ms`` + the 5 s delivery margin, plus the settle time (the graces' gap), plus the
        watermark delay and one trigger interval.
        """
        settle = max(0, self.spark_grace_ms - self.consumer_grace_ms)
        return self.message_timeout_ms + 5_000 + settle + self.watermark_delay_ms + self.trigger_ms
