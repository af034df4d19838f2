"""Predictor (PyTorch ANN): P_l, P_d and throughput from configuration and network; KPI gamma."""

from pathlib import Path

SHARED_DATA = Path("/work/shared/data/wu2020/experiments.csv")
"""The shared measurements the default model is trained on (paper Sec. III-F, ~80% of the published rows)."""
