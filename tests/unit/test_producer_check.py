"""The audited producer's constructor does no network I/O; the audit topic check is explicit or lazy."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from typer.testing import CliRunner

import audit_producer.audit_topic_writer as audit_topic_writer_module
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_producer.load import run_load
from audit_record import decode
from kafka_audit.cli import app
from kafka_plumbing import topics
from kafka_plumbing.security import KafkaAuthenticationError
from kafka_plumbing.topics import AUDIT_TOPIC_CONFIG

UNREACHABLE = "192.0.2.1:9092"  # TEST-NET-1: no broker answers (connections are refused or hang)
WRONG = "authentication failed for user 'app' (SASL mechanism SCRAM-SHA-512): invalid credentials"


class NoAdminClient:
    """Stands in for ``AdminClient``: creating one is the network I/O the constructor must not do."""

    def __init__(self, config: Any) -> None:
        raise AssertionError("an admin client was created")


class FakeProducer:
    """Records what the audited producer hands to librdkafka; never connects."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, Any]] = []
        self.closed = False

    def produce(self, topic: str, value: Any = None, *args: Any, **kw: Any) -> None:
        self.produced.append((topic, value))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        return 0

    def __len__(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


class Recorder:
    """Stands in for ``ensure_topic``: records calls, waits for ``gate`` (if given), raises ``error``."""

    def __init__(self, error: Exception | None = None, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[tuple, dict]] = []
        self.error, self.gate = error, gate

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.error is not None:
            raise self.error


def with_fakes(p: AuditedProducer) -> tuple[FakeProducer, FakeProducer]:
    p._producer.close()
    p._audit_topic.producer.close()
    data, snapshots = FakeProducer(), FakeProducer()
    p._producer, p._produce, p._audit_topic.producer = data, data.produce, snapshots
    return data, snapshots


def join_check(p: AuditedProducer) -> None:
    assert p._audit_topic.check_thread is not None, "the first produce should start the audit topic check"
    p._audit_topic.check_thread.join(10)
    assert not p._audit_topic.check_thread.is_alive()


def test_the_constructor_does_no_network_io(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics, "AdminClient", NoAdminClient)
    t0 = time.monotonic()
    p = AuditedProducer({"bootstrap.servers": UNREACHABLE, "log_level": 0}, ProducerAuditSettings())
    elapsed = time.monotonic() - t0
    p.close()  # nothing produced: no check, no admin client here either
    assert p._audit_topic.check_thread is None
    assert elapsed < 2.0, f"the constructor took {elapsed:.1f} s"


def test_check_creates_the_audit_topic_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ensure = Recorder()
    monkeypatch.setattr(audit_topic_writer_module, "ensure_topic", ensure)
    p = AuditedProducer({"bootstrap.servers": UNREACHABLE}, ProducerAuditSettings(audit_topic="audit.t"))
    assert ensure.calls == []
    p.check(timeout_s=7)
    p.check()
    p.close()
    assert len(ensure.calls) == 1
    (conn, topic), kwargs = ensure.calls[0]
    assert (conn["bootstrap.servers"], topic) == (UNREACHABLE, "audit.t")
    assert kwargs == {"partitions": 3, "topic_config": AUDIT_TOPIC_CONFIG, "timeout_s": 7}


def test_check_raises_bad_credentials_and_tries_again_next_time(monkeypatch: pytest.MonkeyPatch) -> None:
    ensure = Recorder(KafkaAuthenticationError(WRONG))
    monkeypatch.setattr(audit_topic_writer_module, "ensure_topic", ensure)
    p = AuditedProducer({"bootstrap.servers": UNREACHABLE}, ProducerAuditSettings())
    for _ in range(2):
        with pytest.raises(KafkaAuthenticationError, match="invalid credentials"):
            p.check()
    p.close()
    assert len(ensure.calls) == 2


def test_without_check_the_first_produce_checks_in_the_background(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    ensure = Recorder(gate=gate)
    monkeypatch.setattr(audit_topic_writer_module, "ensure_topic", ensure)
    p = AuditedProducer({"bootstrap.servers": UNREACHABLE}, ProducerAuditSettings(audit_topic="audit.t"))
    data, snapshots = with_fakes(p)
    t0 = time.monotonic()
    for i in range(3):
        p.produce("t", b"abc", timestamp=1_700_000_000_000 + i)
    assert time.monotonic() - t0 < 2.0, "produce must not wait for the check"
    p.poll(0)
    assert snapshots.produced == [], "no snapshot before the audit topic is there"
    gate.set()
    assert p.flush() == 0  # waits for the check, then emits the due snapshot
    assert len(ensure.calls) == 1
    [(topic, value)] = snapshots.produced
    record = decode(value)
    assert (topic, record.topic, record.sent, record.final) == ("audit.t", "t", 3, False)
    p.close()
    assert data.closed and snapshots.closed
    assert [decode(v).final for _, v in snapshots.produced] == [False, True]


def test_a_failed_background_check_is_raised_by_poll_and_close(monkeypatch: pytest.MonkeyPatch) -> None:
    ensure = Recorder(KafkaAuthenticationError(WRONG))
    monkeypatch.setattr(audit_topic_writer_module, "ensure_topic", ensure)
    p = AuditedProducer({"bootstrap.servers": UNREACHABLE}, ProducerAuditSettings())
    data, snapshots = with_fakes(p)
    p.produce("t", b"abc")  # does not raise: the check runs in the background
    join_check(p)
    with pytest.raises(KafkaAuthenticationError, match="invalid credentials"):
        p.poll(0)
    p.poll(0)  # raised once; the next background attempt comes later
    with pytest.raises(KafkaAuthenticationError, match="invalid credentials"):
        p.close()  # the window's final snapshot cannot be sent: say so
    assert data.closed and snapshots.closed and snapshots.produced == []
    p.close()  # idempotent
    assert len(ensure.calls) == 2


def test_run_load_and_the_produce_command_fail_fast_on_bad_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ensure = Recorder(KafkaAuthenticationError(WRONG))
    monkeypatch.setattr(audit_topic_writer_module, "ensure_topic", ensure)
    progress: list[int] = []
    with pytest.raises(KafkaAuthenticationError, match="invalid credentials"):
        run_load({"bootstrap.servers": UNREACHABLE}, "t", count=10, rate=0, progress=progress.append)
    assert progress == [] and len(ensure.calls) == 1

    result = CliRunner().invoke(app, ["produce", "-b", UNREACHABLE, "--topic", "t", "--count", "1"])
    assert result.exit_code == 2, result.output
    assert "invalid credentials" in " ".join(result.output.split())
    assert len(ensure.calls) == 2
