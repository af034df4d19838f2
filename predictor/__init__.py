"""Predictor (PyTorch ANN): P_l, P_d and throughput from configuration and network; KPI gamma."""

from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parent.parent / "data" / "wu2020" / "experiments.csv"
"""The measurements the default model is trained on (paper Sec. III-F, ~80% of the published rows).

The repository's ``data/wu2020/experiments.csv``; where it comes from and what its columns mean is in
``data/wu2020/README.md``. Its sha256 is in the default model's card, so every clone evaluates and
retrains the same."""
