"""Predictor latency: model load, vectorised predict (rows/s) and one suggest() call.

Run: .venv/bin/python bench/predictor.py
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ is first on sys.path when run as a script; drop it so `predictor` is the package, not this file
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import time

import numpy as np
import pandas as pd


def main() -> None:
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    from predictor.model import Predictor

    model = Predictor.load()
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    n = 20_000
    frame = pd.DataFrame(
        {
            "acks": rng.integers(0, 2, n),
            "packet_loss_pct": rng.uniform(0, 25, n),
            "delay_ms": rng.uniform(30, 280, n),
            "message_size_bytes": rng.uniform(100, 1100, n),
            "batch_num_messages": rng.integers(1, 11, n),
            "message_timeout_ms": rng.uniform(100, 7000, n),
            "poll_interval_ms": rng.uniform(0, 90, n),
        }
    )
    model.predict(frame.head(10))
    t1 = time.perf_counter()
    model.predict(frame)
    pred_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    one = 200
    for i in range(one):
        model.predict(frame.iloc[i : i + 1])
    single_ms = (time.perf_counter() - t2) / one * 1000
    from predictor.suggest import suggest

    t3 = time.perf_counter()
    suggest(
        {"acks": 1, "batch.num.messages": 1, "message.timeout.ms": 5000},
        {"packet_loss_pct": 15, "delay_ms": 30, "message_size_bytes": 100},
        0.9,
        predictor=model,
    )
    suggest_ms = (time.perf_counter() - t3) * 1000
    print(f"load (torch already imported): {load_s:.2f} s")
    print(f"predict {n} rows: {pred_s * 1000:.0f} ms ({n / pred_s:,.0f} rows/s, 1 thread)")
    print(f"predict 1 row: {single_ms:.2f} ms")
    print(f"suggest (grid of 1,600 configurations x 8 producer counts): {suggest_ms:.0f} ms")


if __name__ == "__main__":
    main()
