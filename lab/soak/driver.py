"""The soak's Spark driver as its own process (so it can be SIGKILLed and restarted from its checkpoint).

``python -m soak.driver RECORDS_DIR`` runs the reconciliation job exactly as ``kafka-audit spark-job``
does (settings from ``KAFKA_AUDIT_SPARK_*``, the alert pipeline from ``KAFKA_AUDIT_ALERTS_*``, the
control loop from ``KAFKA_AUDIT_CONTROL_*``) against the master in ``KAFKA_AUDIT_SPARK_MASTER``, and
appends to ``RECORDS_DIR``:

* ``progress.jsonl``: one line per micro-batch from Spark's ``StreamingQueryProgress``: ``batch_id``,
  ``at_ms`` (the trigger's start), ``duration_ms`` (``durationMs.triggerExecution``: the whole
  micro-batch), ``input_rows``, ``watermark_ms``, ``lag_s`` (now - watermark at the batch's end),
  ``state_rows``, ``pid`` (this driver incarnation);
* ``results.jsonl``: every window result the job wrote, provisional and final (a batch Spark re-runs
  after a crash may repeat rows; readers keep the newest final one per key).

Executors get ``PYSPARK_SUBMIT_ARGS`` (memory, ``spark.cores.max``) from the soak.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from audit_record import now_ms


def _progress_rows(progress: list[Any], after: int) -> list[dict[str, Any]]:
    """Turn Spark progress entries with ``batchId > after`` into progress records (oldest first)."""
    rows = []
    for p in progress:
        d = p if isinstance(p, dict) else json.loads(p.json)
        batch = int(d.get("batchId", -1))
        if batch <= after:
            continue
        wm = (d.get("eventTime") or {}).get("watermark")
        wm_ms = int(datetime.fromisoformat(wm.replace("Z", "+00:00")).timestamp() * 1000) if wm else None
        wm_ms = wm_ms or None  # 0: no watermark yet (the epoch), not a lag of 56 years
        started = datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
        duration = int((d.get("durationMs") or {}).get("triggerExecution", 0))
        rows.append(
            {
                "batch_id": batch,
                "at_ms": int(started),
                "duration_ms": duration,
                "input_rows": int(d.get("numInputRows", 0)),
                "watermark_ms": wm_ms,
                "lag_s": None if wm_ms is None else max(0.0, (started + duration - wm_ms) / 1000),
                "state_rows": sum(op.get("numRowsTotal", 0) for op in d.get("stateOperators") or []),
                "pid": os.getpid(),
            }
        )
    return sorted(rows, key=lambda r: r["batch_id"])


def _new_progress(query: Any, after: int) -> list[Any]:
    """Return the progress entries a poll needs: the newest alone when it is the next batch.

    Spark keeps the last 100 entries (``recentProgress``); converting all of them every second once the
    list is full costs thousands of py4j calls a second on the driver, so the whole list is read only
    when batches were missed (the first poll, a restart from the checkpoint, a slow poll).
    """
    latest = query.lastProgress
    if latest is None:
        return []
    d = latest if isinstance(latest, dict) else json.loads(latest.json)
    batch = int(d.get("batchId", -1))
    if batch <= after:
        return []
    return [d] if batch == after + 1 else list(query.recentProgress)


def main() -> None:
    """Run the job until SIGTERM; write the records."""
    from alerts.settings import load_settings
    from control_loop.settings import load_control_settings
    from kafka_audit.assembly import build_audit_job
    from spark_streaming.settings import SparkJobSettings

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    records = Path(sys.argv[1])
    records.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    settings = SparkJobSettings()
    results_file = open(records / "results.jsonl", "a")  # noqa: SIM115 - closed at the end of main

    def on_results(batch_id: int, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            results_file.write(json.dumps({**r, "batch_id": batch_id}, sort_keys=True, default=str) + "\n")
        results_file.flush()

    job = build_audit_job(
        settings, alerts=load_settings(), control=load_control_settings(), listeners=[on_results]
    ).job
    job.start()
    print(f"driver {os.getpid()} running against {settings.master} at {now_ms()}", flush=True)
    last = -1
    with open(records / "progress.jsonl", "a") as progress:
        try:
            while not stop.wait(1.0):
                if job.exception() is not None:
                    print(f"query failed: {job.exception()}", flush=True)
                    sys.exit(3)
                for row in _progress_rows(_new_progress(job.query, last), last):
                    progress.write(json.dumps(row) + "\n")
                    last = row["batch_id"]
                progress.flush()
        finally:
            job.stop()
            results_file.close()


if __name__ == "__main__":
    main()
