"""Retraining time and per-window prediction latency (issue 13, item 7). Not a test.

Measures, in one run on this machine:

* retraining (``predictor.retrain.retrain``: warm start + fine-tuning + conformal interval + metrics) on
  the paper's ``experiments.csv`` plus 1,000 and 10,000 synthetic local windows
  (``testbed.synthetic``), with torch threads 2 (target: <= 60 s for 10,000 windows) and 1;
* the whole background job (``predictor.promotion.run_retraining``: read the training store of 10,000
  windows in 1,000 micro-batch files, retrain, evaluate the champion, save, record) with 2 threads,
  without the counterfactual score (``loco_folds=0``, the job before issue 39) and with it (the default
  3 folds: three more retrainings) plus the property check;
* baseline: a full training from scratch of the shipped model's spec on the paper's data
  (``kafka-audit predictor train``), 2 threads;
* prediction latency per window as the job predicts it: ``Predictor.predict(one_row, invalid="nan")``,
  p50 and p99 over 2,000 calls, versus the per-row cost of one call on a batch of 1,000 rows.

Run: .venv/bin/python bench/retrain.py [--skip-full-train]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# bench/ is first on sys.path when run as a script; drop it so `predictor` is the package, not a file here
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does, before torch loads OpenMP

import argparse
import tempfile
import time

import numpy as np
from rich.console import Console
from rich.table import Table


def _retrain_seconds(n: int, threads: int) -> tuple[float, dict]:
    from testbed.synthetic import deployment_windows

    from predictor import SHARED_DATA
    from predictor.model import default_predictor
    from predictor.retrain import retrain
    from predictor.settings import RetrainSettings

    local = deployment_windows(n, seed=1)
    started = time.perf_counter()
    result = retrain(default_predictor(), local, [SHARED_DATA], RetrainSettings(threads=threads))
    return time.perf_counter() - started, result.model.card["metrics"]


def _job_seconds(n: int, threads: int, loco_folds: int) -> tuple[float, float]:
    from testbed.synthetic import deployment_windows

    from predictor import SHARED_DATA
    from predictor.promotion import run_retraining
    from predictor.registry import ModelRegistry
    from predictor.settings import RetrainSettings
    from predictor.training_store import TrainingStore

    with tempfile.TemporaryDirectory() as tmp:
        store = TrainingStore(Path(tmp) / "training")
        rows = deployment_windows(n, seed=1)
        for batch, start in enumerate(range(0, n, 10)):
            store.write(batch, rows.iloc[start : start + 10])
        started = time.perf_counter()
        store.load()
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        run_retraining(
            ModelRegistry(Path(tmp) / "models"),
            store.root,
            [SHARED_DATA],
            RetrainSettings(threads=threads, loco_folds=loco_folds),
        )
        return time.perf_counter() - started, load_s


def _full_train_seconds(threads: int) -> float:
    from predictor import SHARED_DATA
    from predictor.nets import IMPROVED_SPEC
    from predictor.training_run import train_model

    started = time.perf_counter()
    train_model([SHARED_DATA], IMPROVED_SPEC, threads=threads)
    return time.perf_counter() - started


def _latency_ms(threads: int) -> tuple[float, float, float]:
    import torch
    from testbed.synthetic import deployment_windows

    from predictor.model import default_predictor

    torch.set_num_threads(threads)
    model = default_predictor()
    frame = deployment_windows(2_000, seed=2)
    model.predict(frame.iloc[:1], invalid="nan")
    times = []
    for i in range(len(frame)):
        started = time.perf_counter()
        model.predict(frame.iloc[i : i + 1], invalid="nan")
        times.append(time.perf_counter() - started)
    batch = frame.iloc[:1_000]
    started = time.perf_counter()
    for _ in range(5):
        model.predict(batch, invalid="nan")
    per_row = (time.perf_counter() - started) / 5 / len(batch)
    p50, p99 = np.percentile(times, [50, 99])
    return p50 * 1e3, p99 * 1e3, per_row * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-full-train", action="store_true", help="skip the from-scratch baseline")
    args = parser.parse_args()
    console = Console(width=160)
    console.print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}")

    table = Table(title="retraining (paper experiments.csv + synthetic local windows)")
    for col in (
        "what",
        "threads",
        "seconds",
        "vs full train",
        "local MAE P_l",
        "coverage 90%",
        "paper MAE P_l",
    ):
        table.add_column(col, justify="left" if col == "what" else "right")
    full = None if args.skip_full_train else _full_train_seconds(2)
    if full is not None:
        table.add_row(
            "full train from scratch (paper data, 5 x 200 epochs)", "2", f"{full:.1f}", "1.00", "", "", ""
        )
    for n, threads in ((1_000, 2), (10_000, 2), (10_000, 1)):
        seconds, m = _retrain_seconds(n, threads)
        table.add_row(
            f"retrain, {n:,} local windows",
            str(threads),
            f"{seconds:.1f}",
            "-" if full is None else f"{seconds / full:.2f}",
            f"{m['local_test']['mae_p_loss']:.4f}",
            f"{m['local_test']['coverage_90_p_loss']:.1%}",
            f"{m['paper_heldout']['mae_p_loss']:.4f}",
        )
    for folds in (0, 3):
        job, load = _job_seconds(10_000, 2, folds)
        table.add_row(
            f"run_retraining, 10,000 windows in 1,000 files (store read {load:.1f} s), {folds} LOCO folds",
            "2",
            f"{job:.1f}",
            "-" if full is None else f"{job / full:.2f}",
            "",
            "",
            "",
        )
    console.print(table)

    lat = Table(title="prediction latency per window (Predictor.predict, invalid='nan')")
    for col in (
        "torch threads",
        "one-row p50 ms",
        "one-row p99 ms",
        "per row in a 1,000-row call ms",
        "p50 ratio",
    ):
        lat.add_column(col, justify="right")
    for threads in (1, 2):
        p50, p99, per_row = _latency_ms(threads)
        lat.add_row(str(threads), f"{p50:.3f}", f"{p99:.3f}", f"{per_row:.4f}", f"{p50 / per_row:.0f}x")
    console.print(lat)


if __name__ == "__main__":
    main()
