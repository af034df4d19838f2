"""Issue 39 acceptance (b): the loop on the testbed, judged from the runs ``run.sh`` wrote.

Usage: ``acceptance.py RESULTS`` (``RESULTS/<stream>-off`` and ``RESULTS/<stream>-apply``). Prints JSON,
per stream:

* ``rollbacks``: every rollback with its measured gamma before and after and the target; ``bad`` ones
  rolled back a change whose measured gamma met the target or rose (must be none);
* ``changes``: every change and rollback, with the deciding window's end, the decision's and the first
  producer's ``applied`` time after that end (ms) and the window's state (``final`` or ``provisional``);
  the first change must be decided and applied within one window (``window_ms``) after the end of the
  window that asked for it;
* ``loss_off``, ``loss_apply``, ``ratio``: R_l of the offered load; for a stream whose default loses more
  than 5%, the ratio must be at most 0.35;
* ``exact``: final windows equal to the verifier, of all final windows, in each run (must be all).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

RATIO_MAX = 0.35
LOSSY_DEFAULT = 0.05
WINDOW_MS = 10_000


def _run(path: Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    data = json.loads((path / "stages.json").read_text())
    with (path / "windows.csv").open() as f:
        return data, list(csv.DictReader(f))


def stream_acceptance(off_dir: Path, apply_dir: Path, window_ms: int = WINDOW_MS) -> dict[str, Any]:
    """Return the acceptance numbers of one stream (module docstring)."""
    (off, w_off), (on, w_on) = _run(off_dir), _run(apply_dir)
    applied = sorted(
        (e for s in on["stages"] for e in s.get("config_events", []) if e.get("kind") == "applied"),
        key=lambda e: e["at_ms"],
    )
    changes, rollbacks = [], []
    for d in on.get("decisions", []):
        if d.get("kind") not in ("change", "rollback"):
            continue
        end = d.get("window_end_ms")
        first = next((e["at_ms"] for e in applied if e.get("version") == d.get("version")), None)
        changes.append(
            {
                "kind": d["kind"],
                "version": d.get("version"),
                "changes": d.get("changes"),
                "window_end_ms": end,
                "window_state": d.get("window_state"),
                "decided_after_window_end_ms": None if end is None else d["decided_at_ms"] - end,
                "applied_after_window_end_ms": None if end is None or first is None else first - end,
            }
        )
        if d["kind"] == "rollback":
            before, after, target = (
                d.get("measured_gamma_before"),
                d.get("measured_gamma_after"),
                d.get("gamma_target"),
            )
            bad = after is not None and (
                (target is not None and after >= target) or (before is not None and after > before)
            )
            rollbacks.append(
                {"before": before, "after": after, "target": target, "bad": bad, "detail": d["detail"]}
            )
    first = changes[0] if changes else None
    first_ok = (
        first is not None
        and first["decided_after_window_end_ms"] is not None
        and first["decided_after_window_end_ms"] <= window_ms
        and first["applied_after_window_end_ms"] is not None
        and first["applied_after_window_end_ms"] <= window_ms
    )
    loss_off, loss_on = float(off["totals"]["loss_rate"]), float(on["totals"]["loss_rate"])
    ratio = loss_on / loss_off if loss_off else None
    exact = {
        "off": [sum(w["exact"] == "True" for w in w_off), len(w_off)],
        "apply": [sum(w["exact"] == "True" for w in w_on), len(w_on)],
    }
    return {
        "loss_off": loss_off,
        "loss_apply": loss_on,
        "ratio": ratio,
        "ratio_met": loss_off <= LOSSY_DEFAULT or (ratio is not None and ratio <= RATIO_MAX),
        "rollbacks": rollbacks,
        "rollbacks_met": not any(r["bad"] for r in rollbacks),
        "changes": changes,
        "first_change_met": first_ok,
        "exact": exact,
        "exact_met": all(n == total for n, total in exact.values()),
        "decisions_by_kind": _count(on.get("decisions", [])),
    }


def _count(decisions: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in decisions:
        key = f"{d.get('kind')}/{d.get('reason')}"
        out[key] = out.get(key, 0) + 1
    return out


def acceptance(results: Path) -> dict[str, Any]:
    """Return :func:`stream_acceptance` for every stream with both runs under ``results``."""
    out = {}
    for stream in ("social", "weblog", "game"):
        off_dir, apply_dir = results / f"{stream}-off", results / f"{stream}-apply"
        if (off_dir / "stages.json").is_file() and (apply_dir / "stages.json").is_file():
            out[stream] = stream_acceptance(off_dir, apply_dir)
    return out


if __name__ == "__main__":
    print(json.dumps(acceptance(Path(sys.argv[1])), indent=1))
