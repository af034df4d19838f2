"""Predictor (PyTorch ANN): P_l, P_d and throughput from configuration and network; KPI gamma."""

from pathlib import Path

_SHARED = Path("/work/shared/data/wu2020/experiments.csv")
_REPO_COPY = Path(__file__).resolve().parent.parent / "data" / "wu2020" / "experiments.csv"
SHARED_DATA = _SHARED if _SHARED.is_file() else _REPO_COPY
"""The shared measurements the default model is trained on (paper Sec. III-F, ~80% of the published rows).

``/work/shared/data/wu2020/experiments.csv`` where it exists, else the byte-identical copy in the
repository's ``data/wu2020/`` (same sha256, so a clone elsewhere evaluates and retrains the same)."""
