"""Retraining with the shipped card's data, spec, seed and threads reproduces the shipped model's metrics."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kafka_audit.cli import app
from predictor import SHARED_DATA
from predictor.data import file_sha256
from predictor.model import Predictor, default_predictor


@pytest.mark.slow
def test_retraining_reproduces_the_shipped_metrics(tmp_path):
    card = default_predictor().card
    data = [Path(d["file"]) if Path(d["file"]).is_file() else SHARED_DATA for d in card["data"]]
    assert [file_sha256(p) for p in data] == [d["sha256"] for d in card["data"]], "training data changed"
    spec = card["spec"]
    args = [
        "predictor",
        "train",
        "--out",
        str(tmp_path),
        "--seed",
        str(card["seed"]),
        "--arch",
        spec["arch"],
        "--epochs",
        str(spec["epochs"]),
        "--members",
        str(spec["members"]),
        "--threads",
        str(card["threads"]),
        "--json",
    ]
    for p in data:
        args += ["--data", str(p)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    retrained = Predictor.load(tmp_path).card
    assert retrained["spec"] == card["spec"]
    assert retrained["split"] == card["split"]
    new, old = retrained["metrics"]["heldout"], card["metrics"]["heldout"]
    assert new["n"] == old["n"]
    for key, tol in (
        ("mae_p_loss", 5e-4),
        ("mae_p_dup", 2e-5),
        ("coverage_90_p_loss", 0.02),
        ("coverage_90_p_dup", 0.02),
        ("median_rel_error_throughput", 5e-3),
    ):
        assert new[key] == pytest.approx(old[key], abs=tol), key
    assert retrained["interval"]["q_loss"] == pytest.approx(card["interval"]["q_loss"], abs=2e-3)
