"""Issue 39 item 4: the controller decides from provisional windows once their counts settled.

The rows are what the job emits: the reconciler's results of real audit snapshots
(``spark_streaming.reconcile``), and for the timing test the live comparison of the shipped model
(``spark_streaming.predict.predict_rows``), as ``control_loop.attach_to_job`` wires it.
"""

from __future__ import annotations

import pytest

from audit_record import AuditRecord, NetworkStats, PartitionDelivery, ProducerConfig, window_result
from audit_record.tiers import TierOrder
from control_loop.decide import Controller, confidence_words
from control_loop.loop import ControlLoop
from control_loop.provisional import settled, usable, windows_by_group
from control_loop.settings import ControlSettings
from spark_streaming.predict import KpiConfig, predict_rows
from spark_streaming.reconcile import compact, reconcile
from spark_streaming.window_state import OUTPUT_COLUMNS

T0 = 1_800_000_000_000
W = 10_000
"""Window length, ms (the testbed's)."""


def _producer(pid: str, i: int, *, sent: int, acked: int, accounted: bool, batch: int = 1) -> AuditRecord:
    start = T0 + i * W
    return AuditRecord(
        tier="producer",
        source=pid,
        producer_id=pid,
        topic="orders",
        window_start_ms=start,
        window_end_ms=start + W,
        sent=sent,
        acknowledged=acked,
        failed=sent - acked if accounted else 0,
        producer_config=ProducerConfig(
            acks="1",
            enable_idempotence=False,
            batch_num_messages=batch,
            linger_ms=5,
            message_timeout_ms=3_000,
            message_send_max_retries=2,
            retry_backoff_ms=100,
        ),
        network=NetworkStats(rtt_avg_ms=60.0, rtt_min_ms=50.0, tcp_retransmit_pct=12.0),
        partitions=[PartitionDelivery(partition=0, acknowledged=acked, last_offset=acked - 1)],
        accounted=accounted,
        bytes=sent * 200,
    )


def _tier(pid: str, i: int, unique: int) -> AuditRecord:
    start = T0 + i * W
    return AuditRecord(
        tier="cluster:local",
        source="audit",
        producer_id=pid,
        topic="orders",
        partition=0,
        window_start_ms=start,
        window_end_ms=start + W,
        received=unique,
        unique=unique,
    )


def reconciled(i: int, *records: AuditRecord, state: str = "provisional") -> dict:
    """The window's result row of the cluster tier, as the reconciler emits it (then ``from_spark``)."""
    snaps = [compact(r, 0, n) for n, r in enumerate(records)]
    rows = reconcile(
        "orders", T0 + i * W, T0 + (i + 1) * W, snaps, ["local"], state, 8_000, TierOrder.derive(["local"])
    )
    (row,) = [r for r in rows if r["tier"] == "cluster:local"]
    return window_result.from_spark({**row, "kind": "result"})


def lossy(i: int, *, accounted: bool = True, unique: int = 700, state: str = "provisional") -> dict:
    """A window that lost 30%: 1,000 sent, 700 acknowledged, 300 failed (once accounted for)."""
    return reconciled(
        i, _producer("p1", i, sent=1_000, acked=700, accounted=accounted), _tier("p1", i, unique), state=state
    )


def test_settled_once_every_producer_accounted_and_the_tier_holds_every_acknowledged_message():
    row = lossy(0)
    assert (row["producers"], row["producers_accounted"], row["failed"]) == (1, 1, 300)
    assert settled(row) and usable(row)
    assert not settled(lossy(0, accounted=False))  # reports still missing: failed is not known yet
    assert lossy(0, accounted=False)["producers_accounted"] == 0
    assert not settled(lossy(0, unique=650))  # the tier has not read every acknowledged message yet
    final = lossy(0, state="final")
    assert not settled(final) and usable(final)
    two = reconciled(
        0,
        _producer("p1", 0, sent=500, acked=350, accounted=True),
        _producer("p2", 0, sent=500, acked=350, accounted=False),
        _tier("p1", 0, 350),
        _tier("p2", 0, 350),
    )
    assert (two["producers"], two["producers_accounted"]) == (2, 1) and not settled(two)


def _with_gamma(row: dict, gamma: float, **kw) -> dict:
    """The row as the live comparison fills it (measured gamma, a suggestion B 1 -> 4)."""
    out = {**row, "gamma_actual": gamma, "gamma_predicted": gamma + 0.02, "gamma_target": 0.9, **kw}
    out.update(window_result.suggestion_fields({"batch.num.messages": 4}))
    return {**out, "suggested_gamma": 0.95, "suggestion_meets_target": True}


def test_a_pending_tier_holds_the_whole_window_back():
    settled_row = _with_gamma(lossy(0), 0.7)
    pending = {**lossy(0, unique=600), "tier": "cluster:other"}
    assert windows_by_group([settled_row, pending], lambda t: t) == {}
    assert windows_by_group([settled_row], lambda t: t) == {"orders": {T0 + W: settled_row}}


def test_a_change_from_a_settled_provisional_window_and_its_final_result_changes_nothing():
    c = Controller(ControlSettings(mode="apply", dwell_ms=0))
    early = T0 + W + 3_000  # 3 s after the window's end: message.timeout.ms 3 s, before its final result
    (d,) = c.decide([_with_gamma(lossy(0), 0.7)], early)
    assert (d.kind, d.reason, d.window_state, d.window_end_ms) == (
        "change",
        "suggestion",
        "provisional",
        T0 + W,
    )
    assert c.decide([_with_gamma(lossy(0, state="final"), 0.7)], T0 + W + 20_000) == []  # taken once
    assert not c.is_new(lossy(0)) and c.is_new(lossy(1))
    unsettled = _with_gamma(lossy(1, accounted=False), 0.6)  # as if predicted: still not taken
    assert c.decide([unsettled], T0 + 2 * W + 3_000) == []
    assert c.state.groups["orders"].last_window_end_ms == T0 + W


def test_the_first_change_lands_within_one_window_after_the_window_that_asked(tmp_path):
    """The shipped model's suggestion for a 30%-lossy window, decided from its settled provisional result."""
    config = KpiConfig(gamma_target=0.9)
    predicted: list[int] = []

    def predict(rows: list[dict]) -> None:
        predicted.append(predict_rows(rows, config, list(OUTPUT_COLUMNS), (window_result.PROVISIONAL,)))

    loop = ControlLoop(ControlSettings(mode="advise", dwell_ms=0), {}, tmp_path, predict=predict)
    running = lossy(1, accounted=False, unique=300)  # window 1 still running: not settled
    assert loop.process([running], now_ms=T0 + W + 500) == [] and predicted == []
    asking = lossy(0)
    decided_at = T0 + W + 3_500  # the job's micro-batch after the producer's accounted snapshot
    (d,) = loop.process([asking, running], now_ms=decided_at)
    assert predicted == [1] and asking.get("gamma_actual") is None  # predicted on the loop's copy
    assert (d.kind, d.window_state, d.window_end_ms) == ("advice", "provisional", T0 + W)
    final = lossy(0, state="final")  # the same counts, final: the job's live comparison of it
    assert predict_rows([final], config, list(OUTPUT_COLUMNS)) == 1
    assert d.measured_gamma_before == pytest.approx(final["gamma_actual"])
    assert d.predicted_gamma_before == pytest.approx(final["gamma_predicted"]) and d.changes()
    assert (final["suggestion_calibrated"], final["suggestion_loco_mae_p_loss"]) == (False, None)
    assert final["suggestion"].endswith("(uncalibrated: no counterfactual score)")
    assert d.measured_gamma_before < 0.9 and d.predicted_gamma_after > d.predicted_gamma_before
    assert decided_at - d.window_end_ms < W  # within the window after the one that asked
    assert d.suggestion_calibrated is False  # the shipped model has no counterfactual score
    assert "uncalibrated: no counterfactual score" in d.detail
    assert loop.process([final], now_ms=T0 + W + 20_000) == []  # its final result: taken already


def test_confidence_words():
    assert confidence_words({"suggestion_loco_mae_p_loss": 0.031, "suggestion_calibrated": True}) == (
        "counterfactual MAE(P_l) 0.031"
    )
    other = confidence_words({"suggestion_loco_mae_p_loss": 0.031, "suggestion_calibrated": False})
    assert other == "uncalibrated: counterfactual MAE(P_l) 0.031 on other configurations"
    assert confidence_words({}) == "uncalibrated: no counterfactual score"


def test_attach_to_job_predicts_settled_windows_with_the_micro_batchs_model(tmp_path):
    from control_loop.loop import attach_to_job
    from spark_streaming.job import ReconciliationJob
    from spark_streaming.settings import SparkJobSettings

    job = ReconciliationJob(SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "c"))
    loop = attach_to_job(job, ControlSettings(mode="advise"))
    copy = lossy(0)
    assert loop.predict is not None
    loop.predict([copy])
    assert copy.get("gamma_actual") is None  # outside a micro-batch no model is chosen: nothing predicted
    job._batch_kpi = KpiConfig(gamma_target=0.9)  # what _on_batch sets from the live model
    loop.predict([copy])
    assert copy["gamma_actual"] is not None and copy["model_version"] == "shipped" and copy["suggestion"]
    off = ReconciliationJob(
        SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "d", predict=False)
    )
    assert attach_to_job(off, ControlSettings(mode="advise")).predict is None
