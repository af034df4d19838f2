"""Issue 13 probe: where the within-stage spread of R_l on the testbed comes from.

Three runs of ``weblog`` (default configuration, 4,000 messages/s, ``--stage-seconds 90``), each with a
fresh cluster: ``nospark`` (``--no-spark``, before the warm-up existed), ``spark`` (the Spark job, no
warm-up: ``--warmup-seconds 0``), ``spark-warm`` (the Spark job, the 30-s warm-up and the prepared stage
producers of ``testbed/run.py``). For each run and stage this prints R_l per final window (the verifier's
``truth_loss_rate``), the stage oracle (mean distance of the windows' R_l from their stage's median:
what a perfect predictor whose inputs are the same for every window of a stage would miss by), and the
Spearman rank correlation of R_l with the CPU the Spark job and the brokers used in the window (cores,
from ``cpu_probe.py`` samples every 100 ms).

Usage: ``.venv/bin/python lab/experiments/predictor-learning/warm-up/analyze.py``
(no arguments; prints the tables
committed as ``analysis.txt``).
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import re
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
WINDOW_MS = 10_000
ROLES = ("handler", "producer", "spark", "broker", "consumer", "other")
CPU = {"nospark": "cpu-nospark.csv.gz", "spark": "cpu-spark.csv.gz", "spark-warm": "cpu-spark.csv.gz"}


def stages(run: Path, day: dt.date) -> list[tuple[float, str]]:
    """(start ms, name) of each stage from the run's ``[HH:MM:SS] stage i/n 'name'`` log lines."""
    out = []
    for line in (run / "stages.log").read_text().splitlines():
        m = re.match(r"\[(\d\d):(\d\d):(\d\d)\] stage \d/\d '([^']+)'", line)
        if m:
            t = dt.datetime(day.year, day.month, day.day, int(m[1]), int(m[2]), int(m[3]), tzinfo=dt.UTC)
            out.append((t.timestamp() * 1000, m[4]))
    return out


def cpu_per_window(samples: np.ndarray, start: int) -> dict[str, float] | None:
    """Cores each role used in the window starting at ``start`` (ms); None without samples."""
    x = samples[(samples[:, 0] >= start) & (samples[:, 0] < start + WINDOW_MS)]
    if len(x) < 5:
        return None
    used = np.clip(np.diff(x[:, 1:], axis=0), 0, None).sum(0)  # a process that ended gives a negative step
    seconds = (x[-1, 0] - x[0, 0]) / 1000
    return {role: used[2 + i] / 100 / seconds for i, role in enumerate(ROLES)}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (NaN when either is constant)."""
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def main() -> None:
    """Print the per-stage table of every run."""
    for name, cpu_file in CPU.items():
        run = HERE / "runs" / name
        with gzip.open(HERE / cpu_file, "rt") as f:
            samples = np.loadtxt(f, delimiter=",", skiprows=1)
        windows = [w for w in csv.DictReader((run / "windows.csv").open()) if int(w["sent"]) > 0]
        day = dt.datetime.fromtimestamp(int(windows[0]["window_start_ms"]) / 1000, dt.UTC).date()
        marks = stages(run, day)
        rows = []
        for w in windows:
            start = int(w["window_start_ms"])
            # a window belongs to the stage its middle lies in (before the first stage: the first)
            stage = ([marks[0][1]] + [s for t, s in marks if t <= start + WINDOW_MS / 2])[-1]
            rows.append((stage, float(w["truth_loss_rate"]), cpu_per_window(samples, start)))
        print(f"== {name}: {len(rows)} final windows")
        errors: list[float] = []
        for stage in dict.fromkeys(r[0] for r in rows):
            y = np.array([r[1] for r in rows if r[0] == stage])
            err = np.abs(y - np.median(y))
            errors += list(err)
            pairs = [(r[1], r[2]) for r in rows if r[0] == stage and r[2] is not None]
            yc = np.array([p[0] for p in pairs])
            cor = {r: round(spearman(yc, np.array([p[1][r] for p in pairs])), 2) for r in ("spark", "broker")}
            labels = " ".join(f"{v:.2f}" for v in y)
            print(f"  {stage:12s} n={len(y):2d} R_l {labels}; oracle {err.mean():.3f}; Spearman, CPU {cor}")
        print(f"  stage oracle over the run: {np.mean(errors):.3f}")


if __name__ == "__main__":
    main()
