"""The model registry: versions, atomic save, champion pointer, decision log (torn lines)."""

from __future__ import annotations

import copy
import json

import pytest

from kafka_plumbing.errors import ConfigError
from predictor.model import Predictor, default_predictor
from predictor.registry import SHIPPED_VERSION, ModelRegistry, model_version


def _model() -> Predictor:
    shipped = default_predictor()
    return Predictor(copy.deepcopy(shipped.ensemble), copy.deepcopy(shipped.card))


def test_empty_registry_serves_the_base_model(tmp_path):
    reg = ModelRegistry(tmp_path / "models")
    assert reg.champion_version() == SHIPPED_VERSION
    assert reg.champion_dir() is None
    assert reg.next_version() == "v0001"
    assert reg.decisions() == []
    assert ModelRegistry(tmp_path, base_version="pinned").champion_version() == "pinned"


def test_model_version_of_a_card():
    assert model_version(default_predictor()) == SHIPPED_VERSION
    model = _model()
    model.card["version"] = "v0007"
    assert model_version(model) == "v0007"


def test_save_promote_and_reload(tmp_path):
    reg = ModelRegistry(tmp_path)
    model = _model()
    path = reg.save(model, reg.next_version())
    assert path == tmp_path / "v0001"
    assert model.card["version"] == "v0001"
    assert Predictor.load(path).card["version"] == "v0001"
    assert reg.next_version() == "v0002"
    assert reg.champion_version() == SHIPPED_VERSION  # saved is not promoted
    reg.promote("v0001")
    assert reg.champion_version() == "v0001"
    assert reg.champion_dir() == path
    pointer = json.loads((tmp_path / "champion.json").read_text())
    assert pointer["version"] == "v0001" and pointer["promoted_at_ms"] > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_save_refuses_an_existing_or_malformed_version(tmp_path):
    reg = ModelRegistry(tmp_path)
    reg.save(_model(), "v0001")
    with pytest.raises(ConfigError, match="already stored"):
        reg.save(_model(), "v0001")
    with pytest.raises(ConfigError, match="expected v0001"):
        reg.save(_model(), "latest")


def test_promote_unknown_version_fails_and_shipped_rolls_back(tmp_path):
    reg = ModelRegistry(tmp_path)
    with pytest.raises(ConfigError, match="no stored model version 'v0009'"):
        reg.promote("v0009")
    reg.save(_model(), "v0001")
    reg.promote("v0001")
    reg.promote(SHIPPED_VERSION)
    assert reg.champion_version() == SHIPPED_VERSION
    assert reg.champion_dir() is None


def test_champion_pointing_at_a_missing_version_serves_the_base_model(tmp_path):
    reg = ModelRegistry(tmp_path)
    (tmp_path / "champion.json").write_text('{"version": "v0003", "promoted_at_ms": 1}')
    assert reg.champion_dir() is None
    assert reg.champion_version() == SHIPPED_VERSION
    (tmp_path / "champion.json").write_text('{"vers')  # torn by hand: still the base model
    assert reg.champion_version() == SHIPPED_VERSION


def test_half_written_version_directory_is_not_a_version(tmp_path):
    reg = ModelRegistry(tmp_path)
    (tmp_path / ".tmp-v0001-123").mkdir()  # a killed save
    (tmp_path / "v0002").mkdir()  # no files: not loadable
    assert reg.version_dir("v0002") is None
    assert reg.next_version() == "v0003"  # never reuses a name that exists on disk


def test_decisions_from_an_index_and_torn_last_line(tmp_path):
    reg = ModelRegistry(tmp_path)
    for i in range(3):
        reg.record({"challenger_version": f"v000{i + 1}", "promoted": i == 1})
    assert [d["challenger_version"] for d in reg.decisions()] == ["v0001", "v0002", "v0003"]
    assert [d["challenger_version"] for d in reg.decisions(2)] == ["v0003"]
    assert reg.decisions(3) == []
    with (tmp_path / "decisions.jsonl").open("a") as fh:
        fh.write('{"challenger_version": "v00')  # a writer killed mid-line
    assert len(reg.decisions()) == 3
    reg.record({"challenger_version": "v0004", "promoted": False})  # cuts the torn line off first
    assert [d["challenger_version"] for d in reg.decisions(3)] == ["v0004"]
    assert len((tmp_path / "decisions.jsonl").read_text().splitlines()) == 4
