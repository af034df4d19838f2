"""Window results and a clock for the control-loop tests (``tests/unit/test_control_*.py``)."""

from __future__ import annotations

from typing import Any

from audit_record import window_result

T0 = 1_800_000_000_000
W = 10_000
"""Window length of the test rows, ms."""


def now_after(i: int) -> int:
    """Wall clock just after window ``i`` is final: its end + 1 s (ms)."""
    return T0 + (i + 1) * W + 1_000


def row(
    i: int,
    *,
    topic: str = "orders",
    tier: str = "cluster:local",
    state: str = "final",
    gamma_actual: float | None = 0.70,
    gamma_predicted: float | None = 0.72,
    changes: dict[str, Any] | None = None,
    suggested_gamma: float | None = 0.93,
    acks: str = "1",
    batch: int = 1,
    timeout: int = 5_000,
    linger_ms: float = 5.0,
    producer_configs: int = 1,
    model_calibrated: bool | None = None,
) -> dict[str, Any]:
    """A final window result of window ``i`` with a suggestion (default ``batch.num.messages`` 1→4).

    ``changes={}`` gives a window without a suggestion.
    """
    start = T0 + i * W
    out = window_result.blank(
        topic=topic,
        window_start_ms=start,
        window_end_ms=start + W,
        tier=tier,
        state=state,
        sent=1_000,
        unique=700,
        acks=acks,
        enable_idempotence=False,
        batch_num_messages=batch,
        linger_ms=linger_ms,
        message_timeout_ms=timeout,
        poll_interval_ms=0.0,
        producers=1,
        producer_configs=producer_configs,
        packet_loss_pct_est=10.0,
        delay_ms_est=50.0,
        gamma_actual=gamma_actual,
        gamma_predicted=gamma_predicted,
        gamma_target=0.9,
    )
    if model_calibrated is not None:
        out["model_calibrated"] = model_calibrated
    changes = {"batch.num.messages": 4} if changes is None else changes
    if changes:
        out.update(window_result.suggestion_fields(changes))
        out.update(
            suggestion=", ".join(f"{k} → {v}" for k, v in changes.items()),
            suggested_gamma=suggested_gamma,
            suggested_p_loss=0.05,
            suggestion_meets_target=True,
        )
    return out
