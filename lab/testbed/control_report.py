"""The closed-loop comparison (issue 14): each stream's default configuration versus the control loop.

Reads the ``stages.json`` files that ``kafka-audit testbed run --control off|apply`` wrote (one pair per
stream, same network stages and offered load) and puts R_l and R_d of each run beside the paper's
Table II (Wu, Shang, Wolter 2020, Sec. V: the overall loss rate with the stream's default configuration
and with the configuration chosen from the predicted gamma as the network changes).

R_l here is of the offered load: a message the load could not hand to its producer within
``message.timeout.ms`` counts as lost (issue 14 item 4), so lowering the rate is no way to lose less.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kafka_plumbing.errors import ConfigError

PAPER_TABLE_II: dict[str, tuple[float, float]] = {
    "social": (0.558, 0.176),
    "weblog": (0.429, 0.065),
    "game": (0.875, 0.139),
}
"""Paper Table II, overall R_l (fraction): (default configuration, dynamic configuration) per stream."""


@dataclass(frozen=True)
class LoopComparison:
    """One stream: the run without the loop next to the run with it.

    Attributes:
        stream: ``social``, ``weblog`` or ``game``.
        offered_off, offered_apply: Messages offered by the load, messages.
        loss_off, loss_apply: R_l of the offered load, fraction.
        dup_off, dup_apply: R_d, fraction.
        loss_ratio: loss_apply / loss_off (None when nothing was lost without the loop).
        exact_windows_off, exact_windows_apply, windows_off, windows_apply: final windows where the audit
            equals the verifier, and all final windows.
        changes: Configuration changes and rollbacks the controller decided (``change``/``rollback``).
        applied: Swaps the autotuned producers applied (``applied`` events, every stage producer).
        configs: The configurations it changed to, as ``property=value`` lists.
        paper_off, paper_dynamic: Table II's R_l for the stream (fractions), if it has one.
    """

    stream: str
    offered_off: int
    offered_apply: int
    loss_off: float
    loss_apply: float
    dup_off: float
    dup_apply: float
    loss_ratio: float | None
    exact_windows_off: int
    windows_off: int
    exact_windows_apply: int
    windows_apply: int
    changes: int
    applied: int
    configs: list[str]
    paper_off: float | None
    paper_dynamic: float | None


def _load(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    stages = run_dir / "stages.json"
    if not stages.is_file():
        raise ConfigError(f"{run_dir}: no stages.json (run `kafka-audit testbed run ... --out {run_dir}`)")
    data = json.loads(stages.read_text())
    with (run_dir / "windows.csv").open() as f:
        windows = list(csv.DictReader(f))
    return data, windows


def _exact(windows: list[dict[str, str]]) -> int:
    return sum(w.get("exact") == "True" for w in windows)


def compare(results: Path, streams: tuple[str, ...] = ("social", "weblog", "game")) -> list[LoopComparison]:
    """Compare ``results/<stream>-off`` with ``results/<stream>-apply`` for every stream present.

    Raises:
        ConfigError: if no stream has both runs.
    """
    out = []
    for stream in streams:
        off_dir, apply_dir = results / f"{stream}-off", results / f"{stream}-apply"
        if not (off_dir.is_dir() and apply_dir.is_dir()):
            continue
        (off, w_off), (on, w_on) = _load(off_dir), _load(apply_dir)
        t_off, t_on = off["totals"], on["totals"]
        decided = [d for d in on.get("decisions", []) if d.get("kind") in ("change", "rollback")]
        applied = [e for s in on["stages"] for e in s.get("config_events", []) if e.get("kind") == "applied"]
        configs = [
            ", ".join(f"{k}={v}" for k, v in (d.get("changes") or {}).items()) or str(d.get("kind"))
            for d in decided
        ]
        paper = PAPER_TABLE_II.get(stream)
        out.append(
            LoopComparison(
                stream=stream,
                offered_off=int(t_off["offered"]),
                offered_apply=int(t_on["offered"]),
                loss_off=float(t_off["loss_rate"]),
                loss_apply=float(t_on["loss_rate"]),
                dup_off=float(t_off["duplicate_rate"]),
                dup_apply=float(t_on["duplicate_rate"]),
                loss_ratio=float(t_on["loss_rate"]) / t_off["loss_rate"] if t_off["loss_rate"] else None,
                exact_windows_off=_exact(w_off),
                windows_off=len(w_off),
                exact_windows_apply=_exact(w_on),
                windows_apply=len(w_on),
                changes=len(decided),
                applied=len(applied),
                configs=configs,
                paper_off=paper[0] if paper else None,
                paper_dynamic=paper[1] if paper else None,
            )
        )
    if not out:
        raise ConfigError(f"{results}: no <stream>-off and <stream>-apply run directories")
    return out


def write_summary(rows: list[LoopComparison], path: Path) -> None:
    """Write the comparison as JSON (one object per stream)."""
    path.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")


__all__ = ["PAPER_TABLE_II", "LoopComparison", "compare", "write_summary"]
