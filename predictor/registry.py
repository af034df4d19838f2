"""The model registry: versioned model directories, the champion pointer and the decision log.

Layout under the registry root (the job's ``model_registry_dir``)::

    v0001/model.pt, v0001/card.json     one directory per retrained model (``Predictor.save``)
    v0002/...
    champion.json                       {"version": "v0002", "promoted_at_ms": 1767225600000}
    decisions.jsonl                     one promotion decision per line (promotion.Decision.to_json)

Every change is atomic: a model directory is written under a temporary name and renamed, the champion
pointer is replaced with ``os.replace``, a decision is one appended line, flushed and fsynced. A process
killed at any point leaves the previous champion serving. Without ``champion.json`` the champion is the
base model: the shipped default, or the model directory the job is pinned to (version
:data:`SHIPPED_VERSION` unless its card names one).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from kafka_plumbing.errors import ConfigError
from predictor.model import CARD_FILE, MODEL_FILE, Predictor

SHIPPED_VERSION = "shipped"
"""Version of a model whose card names none (the shipped default and models from ``predictor train``)."""

CHAMPION_FILE = "champion.json"
DECISIONS_FILE = "decisions.jsonl"
_VERSION = re.compile(r"^v(\d{4,})$")


def model_version(p: Predictor) -> str:
    """Return the version a model serves under: its card's ``version``, else :data:`SHIPPED_VERSION`."""
    return str(p.card.get("version") or SHIPPED_VERSION)


class ModelRegistry:
    """Versioned models under ``root`` (see the module docstring for the layout).

    Args:
        root: Registry directory (created on the first write).
        base_version: Version of the base model, the champion while no ``champion.json`` exists.
    """

    def __init__(self, root: Path, base_version: str = SHIPPED_VERSION) -> None:
        self.root = Path(root)
        self.base_version = base_version

    def _champion(self) -> dict[str, Any] | None:
        try:
            data = json.loads((self.root / CHAMPION_FILE).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) and data.get("version") else None

    def versions(self) -> list[str]:
        """Return the stored model versions (``v0001``, ...), oldest first."""
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), p.name) for p in self.root.iterdir() if (m := _VERSION.match(p.name))]
        return [name for _, name in sorted(found)]

    def champion_version(self) -> str:
        """Return the serving model's version: ``champion.json``'s, else the base model's (``shipped``)."""
        champion = self._champion()
        if champion is None or self.version_dir(champion["version"]) is None:
            return self.base_version
        return str(champion["version"])

    def version_dir(self, version: str) -> Path | None:
        """Return the directory of a stored ``version``, or None (the base model, or not stored)."""
        path = self.root / version
        if _VERSION.match(version) and (path / CARD_FILE).is_file() and (path / MODEL_FILE).is_file():
            return path
        return None

    def champion_dir(self) -> Path | None:
        """Return the champion's model directory, or None for the base model.

        None means the shipped default or the job's pinned ``model_dir``; also when ``champion.json``
        names a version that is not stored.
        """
        champion = self._champion()
        return None if champion is None else self.version_dir(str(champion["version"]))

    def next_version(self) -> str:
        """Return the next challenger's version: ``v0001``, ``v0002``, ... (one past the newest stored)."""
        stored = self.versions()
        n = int(_VERSION.match(stored[-1]).group(1)) + 1 if stored else 1  # type: ignore[union-attr]
        return f"v{n:04d}"

    def save(self, model: Predictor, version: str) -> Path:
        """Store ``model`` as ``version`` (its card's ``version`` is set to it); atomic.

        Raises:
            ConfigError: if ``version`` is malformed or already stored.
        """
        if not _VERSION.match(version):
            raise ConfigError(f"model version {version!r}: expected v0001, v0002, ...")
        target = self.root / version
        if target.exists():
            raise ConfigError(f"--registry {self.root}: version {version} is already stored")
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{version}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        model.card["version"] = version
        try:
            model.save(tmp)
            for name in (MODEL_FILE, CARD_FILE):
                with (tmp / name).open("rb") as fh:
                    os.fsync(fh.fileno())
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target

    def promote(self, version: str) -> None:
        """Make ``version`` the champion (atomic replace of ``champion.json``).

        ``version`` may be the base version (``shipped``): back to the base model.

        Raises:
            ConfigError: if ``version`` is neither stored nor the base version.
        """
        if version != self.base_version and self.version_dir(version) is None:
            raise ConfigError(f"--registry {self.root}: no stored model version {version!r}")
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / CHAMPION_FILE
        tmp = self.root / f".{CHAMPION_FILE}.{os.getpid()}.tmp"
        body = {"version": version, "promoted_at_ms": int(time.time() * 1000)}
        try:
            with tmp.open("w") as fh:
                fh.write(json.dumps(body) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def record(self, decision: dict[str, Any]) -> None:
        """Append one decision (a JSON object) as a line of ``decisions.jsonl``; flushed and fsynced.

        A torn last line (a writer killed mid-line; no reader ever returned it) is cut off first.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / DECISIONS_FILE
        line = json.dumps(decision, sort_keys=True, separators=(",", ":")) + "\n"
        with path.open("a+b") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            if size:
                fh.seek(max(0, size - 1))
                if fh.read(1) != b"\n":
                    fh.seek(0)
                    keep = fh.read().rfind(b"\n") + 1
                    fh.truncate(keep)
            fh.write(line.encode())
            fh.flush()
            os.fsync(fh.fileno())

    def decisions(self, start: int = 0) -> list[dict[str, Any]]:
        """Decisions from line index ``start`` on (0 = all), oldest first; a torn last line is skipped."""
        try:
            text = (self.root / DECISIONS_FILE).read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return []
        lines = text.split("\n")[:-1]  # the part after the last newline is empty or torn
        return [json.loads(line) for line in lines[start:]]
