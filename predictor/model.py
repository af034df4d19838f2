"""The contract API: :class:`Predictor` (load once, predict P_l, P_d, intervals, throughput vectorised).

A model directory holds ``model.pt`` (the :class:`~predictor.nets.Ensemble` state dict, loaded with
``torch.load(weights_only=True)``) and ``card.json`` (spec, data sha256, features, units, split,
metrics, seed, versions). The shipped default is ``predictor/default_model/``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from audit_record import window_result
from kafka_plumbing.errors import ConfigError
from predictor.features import current_card, feature_matrix, valid_rows, validate_frame

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "default_model"
MODEL_FILE = "model.pt"
CARD_FILE = "card.json"
OUTPUT_COLUMNS: tuple[str, ...] = (*window_result.PREDICTION_FIELDS, "throughput_msgs_per_s")
"""Columns of :meth:`Predictor.predict`: P_l, P_d as fractions 0-1 (lo/hi = 90% interval, 5th/95th
percentiles), throughput in messages/s per producer."""


class Predictor:
    """A trained model: P_l, P_d (with 90% intervals) and throughput from the features of Eq. 1.

    Load with :meth:`load` (or the per-process cached :func:`default_predictor`), then call
    :meth:`predict` with a DataFrame, e.g. inside Spark's ``mapInPandas``.
    """

    def __init__(self, ensemble: Any, card: dict[str, Any]) -> None:
        self.ensemble = ensemble
        self.card = card

    @classmethod
    def load(cls, path: Path | None = None) -> Predictor:
        """Load a model directory (``None`` = the shipped default model in ``predictor/default_model/``).

        Raises:
            ConfigError: if the directory lacks ``model.pt`` or ``card.json`` or they do not match.
        """
        import torch

        from predictor.nets import Ensemble, ModelSpec

        directory = Path(path) if path is not None else DEFAULT_MODEL_DIR
        card_path, weights_path = directory / CARD_FILE, directory / MODEL_FILE
        if not card_path.is_file() or not weights_path.is_file():
            raise ConfigError(
                f"--model {directory}: not a model directory (needs {CARD_FILE} and {MODEL_FILE}; "
                "create one with `kafka-audit predictor train --out DIR`)"
            )
        card = current_card(json.loads(card_path.read_text()))  # a card from before a feature rename
        ensemble = Ensemble(ModelSpec.from_json(card["spec"]))
        try:
            state = torch.load(weights_path, map_location="cpu", weights_only=True)
            ensemble.load_state_dict(state)
        except (RuntimeError, KeyError, ValueError) as exc:
            raise ConfigError(f"--model {directory}: weights do not match the card: {exc}") from exc
        ensemble.eval()
        return cls(ensemble, card)

    def save(self, path: Path) -> None:
        """Write ``model.pt`` and ``card.json`` into directory ``path`` (created if missing)."""
        import torch

        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.ensemble.state_dict(), path / MODEL_FILE)
        (path / CARD_FILE).write_text(json.dumps(self.card, indent=2, sort_keys=True) + "\n")

    def predict(self, frame: pd.DataFrame, invalid: Literal["raise", "nan"] = "raise") -> pd.DataFrame:
        """Predict every row of ``frame`` (vectorised; about 10 µs per row on one CPU core).

        Inputs outside the measured training range (``card["trained_ranges"]``) are clamped to it.

        Args:
            frame: One row per case with the :data:`~predictor.features.FEATURES` columns (other columns
                are ignored): acks 0/1, packet_loss_pct (percent), delay_ms, message_size_bytes,
                batch_num_messages (batch.num.messages), message_timeout_ms, poll_interval_ms.
            invalid: ``raise`` (default): a missing or out-of-range value raises; ``nan``: such rows get
                NaN outputs (for streaming jobs, where bad input is data, not a crash).

        Returns:
            DataFrame with the same index and float columns :data:`OUTPUT_COLUMNS`; P_l and P_d are
            fractions in [0, 1] with ``lo <= point <= hi``; P_d is 0 for acks=0 (at-most-once).

        Raises:
            ConfigError: if a feature column is missing, or (``invalid="raise"``) a value is out of
                range; the message names the column and the allowed range.
        """
        import torch

        from predictor.train import features_for

        if invalid == "raise":
            checked = validate_frame(frame)  # raises, naming the first bad column and row
            ok = np.ones(len(frame), dtype=bool)
        else:
            checked = feature_matrix(frame)
            ok = valid_rows(checked)
            checked = checked[ok]
        values = np.full((len(frame), len(OUTPUT_COLUMNS)), np.nan)
        if len(checked):
            x = torch.from_numpy(features_for(self.ensemble.spec, checked))
            with torch.inference_mode():
                res = self.ensemble(x)
            values[ok] = np.stack([res[c].numpy().astype("float64") for c in OUTPUT_COLUMNS], axis=1)
        return pd.DataFrame(values, index=frame.index, columns=list(OUTPUT_COLUMNS))


@functools.cache
def default_predictor() -> Predictor:
    """Return the shipped default model, loaded once per process (cheap to call from every Spark batch)."""
    return Predictor.load(None)
