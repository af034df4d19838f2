"""Issue 13: the MAE(P_l) any learner of the model's features can reach on this testbed's windows.

Reads the committed learning-experiment windows (rounds 1-7, ``training-windows.csv`` and
``holdout-windows.csv``) and prints two tables:

1. **Repeatability**: windows whose features (acks, ``batch.num.messages``, ``message.timeout.ms``,
   polling interval, measured L in percent, measured D in ms) are identical to another window's.
   For such a group the median of its R_l minimises the sum of absolute errors, so the MAE of the group
   medians is a lower bound on the MAE(P_l) that any deterministic function of these features can reach
   on those windows.
2. **Local learners on the held-out runs** (the ``shift`` scenario of rounds 2 to 7):
   k-nearest-neighbour medians and a logistic curve trained on the training windows (standardised
   features, log of D, B and T_o), beside a constant, the shipped model and the predictions the job served.
3. **Stage oracle on the held-out runs** (rounds 3 to 7, which recorded their stages): each window
   predicted by the median R_l of the windows of its own stage in the same run. It knows the held-out
   labels, so it is no model; it bounds from below what any predictor can reach whose inputs are the
   same for every window of a stage (the configuration, the polling interval and the stage's network),
   on these windows. Only the per-window L and D vary within a stage.

Usage: ``.venv/bin/python lab/experiments/predictor-learning/local_learners.py``
(no arguments; prints tables).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).parent
FEATURES = [
    "acks",
    "batch_num_messages",
    "message_timeout_ms",
    "poll_interval_ms",
    "packet_loss_pct",
    "delay_ms",
]


def _load(name: str, round_dir: str) -> pd.DataFrame:
    frame = pd.read_csv(HERE / round_dir / name)
    frame["round"] = round_dir
    return frame


def repeatability(windows: pd.DataFrame) -> tuple[int, int, float, float]:
    """Return (groups, windows in them, MAE to the group median, same over lossy groups only).

    A group is a set of >= 2 windows with identical features (L and D rounded to 0.01); lossy means a
    group median R_l above 0.01. R_l is a fraction.
    """
    keyed = windows.assign(L=windows["packet_loss_pct"].round(2), D=windows["delay_ms"].round(2))
    keys = [*FEATURES[:4], "L", "D"]
    sizes = keyed.groupby(keys)["p_loss"].transform("size")
    grouped = keyed[sizes >= 2]
    median = grouped.groupby(keys)["p_loss"].transform("median")
    err = (grouped["p_loss"] - median).abs()
    lossy = median > 0.01
    return grouped.groupby(keys).ngroups, len(grouped), float(err.mean()), float(err[lossy].mean())


def _matrix(frame: pd.DataFrame) -> np.ndarray:
    x = frame[FEATURES].to_numpy(dtype=float).copy()
    for col in (1, 2, 5):  # B, T_o, D: log scale
        x[:, col] = np.log1p(x[:, col])
    return x


def knn_mae(train: pd.DataFrame, test: pd.DataFrame, k: int) -> float:
    """MAE(P_l) on ``test`` of the median R_l of the ``k`` nearest training windows (fractions)."""
    xt, xh = _matrix(train), _matrix(test)
    mu, sd = xt.mean(0), xt.std(0) + 1e-9
    xt, xh = (xt - mu) / sd, (xh - mu) / sd
    dist = ((xh[:, None, :] - xt[None, :, :]) ** 2).sum(-1)
    nearest = np.argsort(dist, axis=1)[:, :k]
    pred = np.median(train["p_loss"].to_numpy()[nearest], axis=1)
    return float(np.abs(pred - test["p_loss"].to_numpy()).mean())


def logistic_mae(train: pd.DataFrame, test: pd.DataFrame, steps: int = 3000) -> float:
    """MAE(P_l) on ``test`` of a logistic curve fitted to the training windows' R_l (fractions).

    P_l = sigmoid(b0 + b . z) over the standardised features (acks, log B, log T_o, log delta, L in percent,
    log D), fitted by gradient descent (Adam) on the squared error weighted by each window's messages
    plus a ridge penalty 1e-3 |b|^2 (without it the fit follows single windows: 0.152 on round 4):
    seven numbers, one smooth monotone-in-each-feature curve, where k-nearest neighbours copy whichever
    training windows lie close.
    """
    xt, xh = _matrix(train), _matrix(test)
    xt[:, 3], xh[:, 3] = np.log1p(xt[:, 3]), np.log1p(xh[:, 3])
    mu, sd = xt.mean(0), xt.std(0) + 1e-9
    xt = np.column_stack([np.ones(len(xt)), (xt - mu) / sd])
    xh = np.column_stack([np.ones(len(xh)), (xh - mu) / sd])
    y, w = train["p_loss"].to_numpy(), train["n_sent"].to_numpy(dtype=float)
    w = w / w.sum()
    b, m, v = np.zeros(xt.shape[1]), np.zeros(xt.shape[1]), np.zeros(xt.shape[1])
    b[0] = -2.0
    for t in range(1, steps + 1):
        p = 1 / (1 + np.exp(-(xt @ b)))
        grad = xt.T @ (w * 2 * (p - y) * p * (1 - p)) + 2e-3 * np.r_[0.0, b[1:]]
        m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad**2
        b -= 0.05 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    pred = 1 / (1 + np.exp(-(xh @ b)))
    return float(np.abs(pred - test["p_loss"].to_numpy()).mean())


ROUNDS = (
    "round-01",
    "round-02",
    "round-03",
    "round-04",
    "round-05",
    "round-06",
    "round-07",
)
"""Round directories: round 1 (loaded host), round 2 (``round-02``, load 15-26), round 3 (quiet host),
round 4 (quiet host; each window's own network, D from the smallest RTT), round 5 (``round-05``:
as round 4, with the testbed's warm-up, prepared stage producers and stages on window boundaries),
round 6 (``round-06``: as round 5, every run at 2 ms polling, 500 messages/s), round 7
(``round-07``: round 6 again with criterion (a)'s calibrated exemption)."""
EXTRA_HELDOUT = {"round-05/holdout-p2": "round-05"}
"""Held-out runs in a subdirectory of a round (``holdout-windows.csv``, ``stages.json``) -> the round whose
training windows the local learners use: round 5's ``shift`` runs repeated at 2 ms."""
MIN_RTT_ROUNDS = ("round-04", "round-05", "round-06", "round-07")
"""Rounds whose D is the window's smallest RTT; the others' D is the mean RTT / 2 of the newest sample.
A held-out run of these rounds is compared with local learners trained on its own round's training
runs; one of rounds 2-3 with learners trained on rounds 1-3."""


def stage_oracle(round_dir: str) -> list[tuple[str, int, float]]:
    """Return (run, windows, MAE to the stage median) per held-out run of a round, and "both" at the end.

    A window belongs to the stage that sent the middle message of it: the stage producers send their
    ``sent`` messages one after the other (``stages.json``), so cumulative counts place each window.
    The held-out windows of a run are those with the run's ``batch.num.messages`` and
    ``message.timeout.ms``. R_l is a fraction.
    """
    runs = json.loads((HERE / round_dir / "stages.json").read_text())
    held = _load("holdout-windows.csv", round_dir)
    out, errors = [], []
    for name, run in sorted(runs.items()):
        if not name.startswith("shift"):
            continue
        stages = run["stages"] if isinstance(run, dict) else run
        config = stages[0]["config"]
        mine = held[
            (held["batch_num_messages"] == config["batch.num.messages"])
            & (held["message_timeout_ms"] == config["message.timeout.ms"])
        ].sort_values("window_start_ms")
        sent = mine["n_sent"].to_numpy(dtype=float)
        middle = np.cumsum(sent) - sent / 2
        stage = np.searchsorted(np.cumsum([s["sent"] for s in stages]), middle, side="right")
        median = mine.groupby(stage)["p_loss"].transform("median")
        err = (mine["p_loss"] - median).abs()
        errors.append(err)
        out.append((name, len(mine), float(err.mean())))
    both = pd.concat(errors)
    out.append(("both", len(both), float(both.mean())))
    return out


def main() -> None:
    """Print the repeatability table, the local-learner table per held-out run and the stage oracle."""
    console = Console()
    rep = Table(title="Windows with identical features: the floor for any model of these features")
    for col in ("round", "groups", "windows", "MAE to group median", "same, lossy groups"):
        rep.add_column(col, justify="right")
    for r in ROUNDS:
        windows = pd.concat([_load(n, r) for n in ("training-windows.csv", "holdout-windows.csv")])
        groups, n, mae, mae_lossy = repeatability(windows.reset_index(drop=True))
        if groups == 0:  # round 4: every window has its own L and D, so no two have identical features
            rep.add_row(r, "0", "0", "-", "-")
            continue
        rep.add_row(r or "1", str(groups), str(n), f"{mae:.3f}", f"{mae_lossy:.3f}")
    console.print(rep)

    every = pd.concat([_load("training-windows.csv", r) for r in ROUNDS], ignore_index=True)
    every = every[every["poll_interval_ms"] > 0]  # round 1 carried 0 (unknown polling interval)
    for h in (*ROUNDS[1:], *EXTRA_HELDOUT):
        # rounds 4 on (D = smallest RTT): their own training runs; rounds 2-3: every round before 4
        r = EXTRA_HELDOUT.get(h, h)
        train = (
            every[every["round"] == r] if r in MIN_RTT_ROUNDS else every[~every["round"].isin(MIN_RTT_ROUNDS)]
        )
        rounds = f"round {ROUNDS.index(r) + 1}" if r in MIN_RTT_ROUNDS else "rounds 1-3"
        held = _load("holdout-windows.csv", h)
        champion = str(held["model_version"].mode().iloc[0])
        table = Table(title=f"Held-out run of round {h} (shift, {len(held)} windows): MAE(P_l), fractions")
        table.add_column("predictor")
        table.add_column("MAE(P_l)", justify="right")
        truth = held["p_loss"].to_numpy()
        table.add_row(
            f"served by the job (champion {champion})", f"{np.abs(held['pred_p_loss'] - truth).mean():.3f}"
        )
        table.add_row("shipped model", f"{np.abs(held['shipped_p_loss'] - truth).mean():.3f}")
        table.add_row(
            "constant: median of training R_l", f"{np.abs(train['p_loss'].median() - truth).mean():.3f}"
        )
        for k in (1, 3, 5, 9, 15):
            table.add_row(
                f"{k}-nearest-neighbour median ({len(train)} local windows, {rounds})",
                f"{knn_mae(train, held, k):.3f}",
            )
        table.add_row(
            f"logistic curve of the features ({len(train)} local windows, {rounds})",
            f"{logistic_mae(train, held):.3f}",
        )
        console.print(table)

    oracle = Table(
        title="Stage oracle: each held-out window predicted by the median R_l of its own stage in its run "
        "(knows the labels: a floor for inputs constant within a stage), MAE(P_l), fractions"
    )
    for col in ("round", "held-out run", "windows", "MAE to stage median"):
        oracle.add_column(col, justify="right")
    for r in (*ROUNDS, *EXTRA_HELDOUT):
        if not (HERE / r / "stages.json").exists() or not r:
            continue
        for name, n, mae in stage_oracle(r):
            oracle.add_row(r, name, str(n), f"{mae:.3f}")
    console.print(oracle)


if __name__ == "__main__":
    main()
