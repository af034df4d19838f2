"""``../replay.py`` with the stored L rescaled: a crude stand-in for a configuration-independent L.

Usage (from the repository root): ``FACTOR0=0.85 OMP_WAIT_POLICY=PASSIVE PYTHONPATH=. .venv/bin/python
lab/experiments/predictor-learning/counterfactual/l-probe/replay_rescaled.py NAME FACTOR [EXTRA_CSV ...]``.
Every acks-1 window's ``packet_loss_pct`` and ``tcp_timeout_pct`` (the stored training windows and the
held-out runs' features) is multiplied by ``FACTOR``, every acks-0 window's by ``$FACTOR0`` (default 1),
as the L probe (README, "A configuration-independent L") measured RetransSegs over data transmissions
against today's RetransSegs / OutSegs; then ``replay.main`` runs as without. Prints its JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import replay  # ../replay.py, after its folder is on the path

FACTOR = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
FACTOR0 = float(os.environ.get("FACTOR0", "1.0"))
_features = replay._features
_read_csv = pd.read_csv


def rescaled_features(
    windows: pd.DataFrame, stages: dict[str, Any], size: float, poll: float
) -> pd.DataFrame:
    """``replay._features`` with L and the timeout rate multiplied by the run's factor."""
    f = _features(windows, stages, size, poll)
    k = FACTOR0 if str(stages["stages"][0]["config"]["acks"]) == "0" else FACTOR
    f["packet_loss_pct"] *= k
    f["tcp_timeout_pct"] *= k
    return f


def read_csv(path: Any, *args: Any, **kwargs: Any) -> pd.DataFrame:
    """``pandas.read_csv``; a stored training-windows file with L and the timeout rate rescaled per acks."""
    d = _read_csv(path, *args, **kwargs)
    if "training-windows-" in str(path):
        d = d.copy()
        k = d["acks"].map(lambda a: FACTOR0 if a == 0 else FACTOR)
        d["packet_loss_pct"] *= k
        d["tcp_timeout_pct"] *= k
    return d


if __name__ == "__main__":
    replay._features = rescaled_features
    replay.pd.read_csv = read_csv
    print(json.dumps(replay.main(sys.argv[1], [Path(p) for p in sys.argv[3:]]), indent=1))
