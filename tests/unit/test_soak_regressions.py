"""Regression tests for the defects the soak (issue 18) found."""

from __future__ import annotations

from alerts import AlertSettings, attach_to_job


def _job(tmp_path, **settings):
    from spark_streaming.job import ReconciliationJob
    from spark_streaming.settings import SparkJobSettings

    return ReconciliationJob(
        SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "checkpoint", **settings)
    )


def test_audit_lag_margin_covers_the_jobs_own_emit_delay(tmp_path):
    """A job with a 10 s trigger emits a final window up to ~45 s after its wait: not an audit lag.

    Before the fix the margin stayed 30 s whatever the trigger, so in the soak (trigger 10 s, watermark
    delay 10 s) KafkaAuditAuditLag fired for windows that became final on time.
    """
    job = _job(
        tmp_path / "slow", trigger_ms=10_000, watermark_delay_ms=10_000, heartbeat_ms=2_000, grace_ms=30_000
    )
    pipeline = attach_to_job(job, AlertSettings())
    rule = pipeline.engine.lag_rule
    assert rule is not None and rule.margin_ms == 2_000 + 10_000 + 3 * 10_000
    end, wait = 1_000_000, 55_000
    on_time = end + wait + 40_000  # watermark delay + heartbeat + 2 micro-batches
    assert not rule.evaluate("t", "cluster:x", {end - 10_000: end}, on_time, {end - 10_000: wait}).bad
    late = end + wait + rule.margin_ms + 1
    assert rule.evaluate("t", "cluster:x", {end - 10_000: end}, late, {end - 10_000: wait}).bad
    pipeline.close()


def test_audit_lag_margin_of_a_fast_job_and_an_explicit_one_stay(tmp_path):
    fast = attach_to_job(_job(tmp_path / "fast", trigger_ms=5_000), AlertSettings())
    assert fast.engine.lag_rule.margin_ms == 30_000  # 2 + 10 + 15 s < the default 30 s
    fast.close()
    explicit = attach_to_job(
        _job(tmp_path / "set", trigger_ms=30_000), AlertSettings(audit_lag_margin_ms=7_000)
    )
    assert explicit.engine.lag_rule.margin_ms == 7_000
    explicit.close()


def _raise_kafka_error_object(err):
    """Raise ``err`` itself, as confluent-kafka does for a fatal producer (a KafkaError is no Exception)."""
    import ctypes

    set_object = ctypes.pythonapi.PyErr_SetObject
    set_object.argtypes = [ctypes.py_object, ctypes.py_object]
    set_object.restype = None
    set_object(type(err), err)


def _consumer(tmp_path):
    from audit_consumer.consumer import AuditConsumer
    from audit_consumer.settings import AuditConsumerSettings

    return AuditConsumer(
        AuditConsumerSettings(bootstrap_servers="127.0.0.1:9", topics=["t"], instance_id="regression")
    )


def test_a_fenced_producer_takes_its_transactional_id_back_and_rewinds(tmp_path, monkeypatch):
    """The soak's rolling restart: the coordinator aborted a timed-out transaction (epoch bumped), the
    next commit failed with fatal _FENCED, and the audit consumer exited although no other instance
    existed. Now it re-initialises its producer and rewinds, a bounded number of times."""
    import pytest
    from confluent_kafka import KafkaError, KafkaException

    from audit_consumer import transaction_recovery as module
    from audit_consumer.transaction_recovery import FENCED_RECOVERIES, AuditConsumerError

    c = _consumer(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(c, "_new_producer", lambda: calls.append("new producer"))
    monkeypatch.setattr(c, "_rewind", lambda: calls.append("rewind"))
    fenced = KafkaException(
        KafkaError(KafkaError._FENCED, "Producer attempted an operation with an old epoch", fatal=True)
    )
    for _ in range(FENCED_RECOVERIES):
        c._transaction_failed(fenced)
    assert calls == ["new producer", "rewind"] * FENCED_RECOVERIES
    with pytest.raises(AuditConsumerError, match="another instance"):  # a real second instance
        c._transaction_failed(fenced)
    now = module.time.monotonic()
    monkeypatch.setattr(module.time, "monotonic", lambda: now + module.FENCED_RECOVERY_WINDOW_S + 1)
    c._transaction_failed(fenced)  # the budget is per window
    assert calls[-2:] == ["new producer", "rewind"]
    c._close()


def test_close_survives_a_step_that_raises_a_kafka_error_object(tmp_path, caplog):
    """The fenced audit consumer's close raised the KafkaError object itself (not an Exception), which
    escaped ``except Exception``, skipped the remaining close steps and hid the real error."""
    from confluent_kafka import KafkaError

    c = _consumer(tmp_path)
    closed: list[str] = []

    class Fatal:
        def flush(self, timeout):
            _raise_kafka_error_object(KafkaError(KafkaError._FENCED, "fenced", fatal=True))

        def close(self):
            closed.append("producer")

    real = c._producer
    c._producer = Fatal()
    c._close()  # does not raise
    assert closed == ["producer"]
    assert "close step failed" in caplog.text
    real.close()


class _ErrorMessage:
    def __init__(self, err):
        self._err = err

    def error(self):
        return self._err

    def topic(self):
        return None

    def partition(self):
        return 0


def test_a_fatal_consumer_error_replaces_the_consumer_and_rewinds(tmp_path, monkeypatch):
    """The soak's 60 s broker cut: both audit consumers' librdkafka consumers failed with "Static consumer
    fenced by other consumer with same group.instance.id" (message error code _FATAL, fatal() False).
    It was logged and the instances went on polling dead consumers: every later window counted 0 at the
    cluster tier. Now the consumer is replaced (abort, new consumer, subscribe: the assignment loads the
    committed state), a bounded number of times."""
    import pytest
    from confluent_kafka import KafkaError

    from audit_consumer import transaction_recovery as module
    from audit_consumer.counts import PartitionCounts
    from audit_consumer.transaction_recovery import FENCED_RECOVERIES, AuditConsumerError

    c = _consumer(tmp_path)
    fenced = KafkaError(
        KafkaError._FATAL,
        "Fatal error: Broker: Static consumer fenced by other consumer with same group.instance.id",
    )
    assert not fenced.fatal()  # what librdkafka hands the application on the message
    c._on_error(_ErrorMessage(fenced))
    assert c._consumer_failed is fenced

    created: list[object] = []

    class NewConsumer:
        def __init__(self, config):
            self.config, self.subscribed = config, None
            created.append(self)

        def subscribe(self, topics, **callbacks):
            self.subscribed = topics

        def close(self):
            pass

    old_closed: list[bool] = []
    real_old = c._consumer
    c._consumer = type("Old", (), {"close": lambda self: old_closed.append(True)})()
    monkeypatch.setattr(module, "Consumer", NewConsumer)
    c._parts[("t", 0)] = PartitionCounts("t", 0, 60_000, 10_000)
    c.topics = ["t"]
    c._recover_consumer()
    assert old_closed == [True] and c._parts == {} and c._consumer_failed is None
    assert c._consumer is created[0] and created[0].subscribed == ["t"]
    assert created[0].config["group.instance.id"] == c._consumer_config["group.instance.id"]
    for _ in range(FENCED_RECOVERIES - 1):
        c._consumer_failed = fenced
        c._recover_consumer()
    c._consumer_failed = fenced
    with pytest.raises(AuditConsumerError, match="restart this instance"):
        c._recover_consumer()
    real_old.close()
    c._producer.close()
