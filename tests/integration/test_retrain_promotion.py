"""Champion / challenger with real training on real data: a challenger trained on shuffled R_l is rejected.

No Kafka: the training store holds windows of a synthetic deployment (``testbed.synthetic``: a
network unlike the paper's, in stages, with binomial noise), the base data is the paper's
``experiments.csv``, and retraining runs as the live job runs it, ``python -m kafka_audit predictor
retrain --registry R --from-results T`` in a separate process (default steps and 2 threads).

The corruption is in what the challenger learns from: R_l is permuted among the windows it trains and
calibrates on (the oldest 80%), while the held-back test windows (the newest 20%) keep their measured
R_l - they are how the decision knows the truth. (Shuffling the test windows too would leave nothing
to tell a good model from a bad one.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from testbed.synthetic import deployment_windows, shuffle_loss

from predictor.registry import SHIPPED_VERSION, ModelRegistry
from predictor.retrain import TEST_FRACTION
from predictor.training_store import TrainingStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WINDOWS = 2_000


def _retrain(training: Path, registry: Path) -> dict:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafka_audit",
            "predictor",
            "retrain",
            "--from-results",
            str(training),
            "--registry",
            str(registry),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr  # exit 0 whether promoted or rejected
    return json.loads(result.stdout)


def _store(root: Path, rows) -> Path:
    store = TrainingStore(root)
    for batch, start in enumerate(range(0, len(rows), 250)):  # as micro-batches append them
        store.write(batch, rows.iloc[start : start + 250])
    return root


def test_shuffled_labels_challenger_is_rejected_and_the_champion_kept(tmp_path):
    windows = deployment_windows(WINDOWS, seed=1)
    trained_on = np.arange(WINDOWS) < WINDOWS - round(WINDOWS * TEST_FRACTION)
    shuffled = shuffle_loss(windows, seed=1, rows=trained_on)
    assert (shuffled.loc[~trained_on, "p_loss"] == windows.loc[~trained_on, "p_loss"]).all()
    clean_store = _store(tmp_path / "training-clean", windows)
    bad_store = _store(tmp_path / "training-shuffled", shuffled)

    # 1. the deployment's own windows: the challenger learns them and wins
    registry = ModelRegistry(tmp_path / "models")
    first = _retrain(clean_store, registry.root)
    n = first["numbers"]
    assert first["promoted"], first["reasons"]
    assert (first["challenger_version"], first["champion_version"]) == ("v0001", SHIPPED_VERSION)
    assert n["mae_local_challenger"] < n["mae_local_champion"] / 2
    assert n["mae_paper_challenger"] <= 0.02
    assert 0.80 <= n["coverage_local_challenger"] <= 0.97
    assert registry.champion_version() == "v0001"
    promoted_at = json.loads((registry.root / "champion.json").read_text())["promoted_at_ms"]

    # 2. corrupted labels: the challenger (warm-started from v0001) is rejected, v0001 keeps serving
    second = _retrain(bad_store, registry.root)
    assert not second["promoted"]
    assert (second["challenger_version"], second["champion_version"]) == ("v0002", "v0001")
    assert any(r.startswith(("(a)", "(c)")) for r in second["reasons"]), second["reasons"]
    assert second["numbers"]["mae_local_challenger"] > second["numbers"]["mae_local_champion"]
    assert registry.champion_version() == "v0001"
    assert json.loads((registry.root / "champion.json").read_text())["promoted_at_ms"] == promoted_at
    assert [d["promoted"] for d in registry.decisions()] == [True, False]
    card = json.loads((registry.root / "v0002" / "card.json").read_text())
    assert card["parent_version"] == "v0001" and card["decision"]["promoted"] is False

    # 3. the same corrupted store against the shipped model: rejected too, the shipped model kept
    fresh = ModelRegistry(tmp_path / "models-fresh")
    third = _retrain(bad_store, fresh.root)
    assert not third["promoted"], third["numbers"]
    assert fresh.champion_version() == SHIPPED_VERSION and fresh.champion_dir() is None
    assert not (fresh.root / "champion.json").exists()
