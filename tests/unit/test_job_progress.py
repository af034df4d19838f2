"""The job's progress (``ReconciliationJob.progress``): no audit lag before Spark's watermark first moves."""

from __future__ import annotations

from datetime import UTC, datetime


class _Query:
    def __init__(self, watermark: str) -> None:
        self.lastProgress = {
            "eventTime": {"watermark": watermark},
            "stateOperators": [{"numRowsTotal": 3, "numRowsDroppedByWatermark": 0}],
        }


def test_the_epoch_watermark_of_a_job_without_rows_yet_is_no_lag(tmp_path):
    """`make demo` printed "audit lag 1795792626.1 s" while Spark still reported the epoch as watermark."""
    from spark_streaming.job import ReconciliationJob
    from spark_streaming.settings import SparkJobSettings

    job = ReconciliationJob(
        SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "checkpoint")
    )
    job.query = _Query("1970-01-01T00:00:00.000Z")
    first = job.progress()
    assert "lag_s" not in first and "watermark_ms" not in first
    assert first["state_rows"] == 3

    ten_s_ago = datetime.fromtimestamp(datetime.now(UTC).timestamp() - 10, UTC)
    job.query = _Query(ten_s_ago.isoformat(timespec="milliseconds").replace("+00:00", "Z"))
    later = job.progress()
    assert 9.0 <= later["lag_s"] <= 60.0
    assert later["watermark_ms"] > 0
