"""Predictor (PyTorch ANN): P_l, P_d and throughput from configuration and network; KPI gamma."""

from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parent / "base_data" / "wu2020" / "experiments.csv"
"""The measurements the default model is trained on (paper Sec. III-F, ~80% of the published rows).

Package data (``predictor/base_data/wu2020/experiments.csv``, installed with the wheel); where it comes
from and what its columns mean is in ``predictor/base_data/wu2020/README.md``. Its sha256 is in the
default model's card, so every install evaluates and retrains the same."""
