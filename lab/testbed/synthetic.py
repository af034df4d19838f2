"""A synthetic deployment: training-store rows from a network unlike the paper's, for tests and benchmarks.

Real local windows come from the job (:mod:`predictor.training_store`); these stand in for them where
no Kafka runs (unit tests, ``bench/retrain.py``, the promotion integration test). The deployment runs
in stages (a configuration and a network held for ``stage_windows`` consecutive windows), as the
testbed's scenarios do, with settings a real deployment uses and the paper's testbed did not: D of a
LAN or a region (0.2-60 ms; the paper's 30-280 ms), librdkafka's default ``batch.num.messages``
(10,000) and ``message.timeout.ms`` (300,000), messages of 200-2,000 bytes.

Its network (:func:`deployment_loss`) loses messages unlike the paper's testbed, shaped after the
repository's own testbed grid (``lab/experiments/batch-pktloss-grid/testbed-batch-pktloss.csv``:
R_l about 0.35 at L = 25% for B = 1,
falling with the batch size, and much the same for both acks): R_l = 0.35 (L/25)^2 (1 + log10 B)^-0.5
for at-most-once; for at-least-once the retries save a share that grows with message.timeout.ms,
R_l = that x (5,000 / T_o)^0.3 (capped at 1x). Measured R_l adds binomial noise for the window's message
count and a per-window noise of 0.01 (what repeated experiments with equal settings differ by).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.features import BASE_FEATURES, with_defaults
from predictor.training_store import COLUMNS, LOCAL_SOURCE

START_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z, the first synthetic window's start (ms since the epoch)."""


def deployment_loss(features: pd.DataFrame) -> np.ndarray:
    """Return the expected R_l (fraction 0-1) of the synthetic deployment for rows of BASE_FEATURES."""
    loss = features["packet_loss_pct"].to_numpy(dtype=float) / 25.0
    batch = features["batch_num_messages"].to_numpy(dtype=float)
    timeout = features["message_timeout_ms"].to_numpy(dtype=float)
    timeout = np.where(timeout > 0, timeout, 2_147_483_647.0)
    acks = features["acks"].to_numpy(dtype=float)
    base = 0.35 * loss**2 * (1.0 + np.log10(batch)) ** -0.5
    saved = np.minimum(1.0, (5_000.0 / timeout) ** 0.3)
    return np.clip(np.where(acks > 0.5, base * saved, base), 0.0, 1.0)


def deployment_windows(
    n: int,
    seed: int = 0,
    *,
    stage_windows: int = 20,
    window_ms: int = 10_000,
    start_ms: int = START_MS,
    topics: tuple[str, ...] = ("orders", "clicks", "metrics"),
) -> pd.DataFrame:
    """Return ``n`` training-store rows (:data:`~predictor.training_store.COLUMNS`) in time order.

    Args:
        n: Windows.
        seed: Seed of the stages and the noise (the same seed gives the same rows).
        stage_windows: Consecutive windows sharing one configuration and network.
        window_ms: Window length, ms.
        start_ms: First window's start, ms since the epoch.
        topics: Topics the stages take turns on.
    """
    rng = np.random.default_rng(seed)
    stages = -(-n // stage_windows)
    stage = {
        "acks": rng.integers(0, 2, stages).astype(float),
        "packet_loss_pct": np.where(rng.random(stages) < 0.25, 0.0, rng.uniform(0.0, 25.0, stages)),
        "delay_ms": rng.uniform(0.2, 60.0, stages),
        "message_size_bytes": rng.choice([200.0, 500.0, 1_000.0, 2_000.0], stages),
        "batch_num_messages": rng.choice([1.0, 10.0, 100.0, 1_000.0, 10_000.0], stages),
        "message_timeout_ms": rng.choice([5_000.0, 30_000.0, 300_000.0], stages),
        "poll_interval_ms": rng.choice([0.0, 1.0, 5.0], stages),
    }
    which = np.arange(n) // stage_windows
    frame = pd.DataFrame({name: values[which] for name, values in stage.items()})[list(BASE_FEATURES)]
    # the job estimates L and D per window: they scatter around the stage's network
    frame["packet_loss_pct"] = np.clip(frame["packet_loss_pct"] * rng.normal(1.0, 0.1, n), 0.0, 100.0)
    frame["delay_ms"] = np.clip(frame["delay_ms"] * rng.normal(1.0, 0.05, n), 0.0, None)
    sent = rng.integers(1_000, 20_000, n)
    lost = rng.binomial(sent, deployment_loss(frame)) / sent
    frame["p_loss"] = np.clip(lost + rng.normal(0.0, 0.01, n) * (lost > 0), 0.0, 1.0)
    dup = rng.binomial(sent, 0.002 * np.clip(frame["packet_loss_pct"] / 25.0, 0.0, 1.0)) / sent
    frame["p_dup"] = np.where(frame["acks"] > 0.5, dup, 0.0)
    frame["n_sent"] = sent
    frame["duration_s"] = window_ms / 1000.0
    frame["topic"] = [topics[s % len(topics)] for s in which]
    frame["tier"] = "cluster:local"
    frame["window_start_ms"] = start_ms + np.arange(n, dtype=np.int64) * window_ms
    frame["window_end_ms"] = frame["window_start_ms"] + window_ms
    frame["model_version"] = "shipped"
    for name in ("pred_p_loss", "pred_p_loss_lo", "pred_p_loss_hi", "pred_p_dup"):
        frame[name] = np.nan
    frame["source"] = LOCAL_SOURCE
    # the synthetic network has no retransmission-timeout rate: the optional features at their default
    return with_defaults(frame)[list(COLUMNS)]


def shuffle_loss(frame: pd.DataFrame, seed: int = 0, rows: np.ndarray | None = None) -> pd.DataFrame:
    """Return a copy with R_l (``p_loss``) permuted among ``rows`` (a bool mask; default all).

    Corrupted labels: they keep their distribution but no longer belong to their windows.
    """
    out = frame.copy()
    mask = np.ones(len(out), dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    values = out.loc[mask, "p_loss"].to_numpy()
    out.loc[mask, "p_loss"] = np.random.default_rng(seed).permutation(values)
    return out
