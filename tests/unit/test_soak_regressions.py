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
