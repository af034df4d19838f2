"""Tables of promotion decisions and counterfactual scores (``kafka-audit predictor retrain|evaluate``).

:func:`decision_table` shows a champion/challenger decision's numbers beside criteria (a)-(e)
(:mod:`predictor.promotion`); :func:`loco_table` a leave-one-configuration-out score
(:mod:`predictor.counterfactual`) per held-out configuration; :func:`registry_rows` and
:func:`registry_table` every version of a model registry with the scores its decision recorded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.table import Table

from predictor.registry import ModelRegistry


def _f(x: Any, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)


def decision_table(decision: Any, card: Mapping[str, Any]) -> Table:
    """Return a table of the decision's numbers beside its criteria (``decision``: a promotion.Decision)."""
    n = decision.numbers
    champion = card.get("metrics", {}).get("champion", {})
    verdict = "[green]promoted[/]" if decision.promoted else "[yellow]rejected[/]"
    table = Table(
        title=f"challenger {decision.challenger_version} vs champion {decision.champion_version}: {verdict}"
    )
    for col in ("metric", "champion", "challenger", "criterion", "met"):
        table.add_column(col, justify="left" if col in ("metric", "criterion") else "right")
    failed = {r[:3] for r in decision.reasons}
    cover_champion = champion.get("local_test", {}).get("coverage_90_p_loss")
    rows = [
        (
            f"MAE P_l, local test ({n['n_local_test']} newest windows)",
            f"{n['mae_local_champion']:.4f}",
            f"{n['mae_local_challenger']:.4f}",
            f"(a) < champion - {n['margin']:g}"
            + (
                ""
                if "mae_local_baseline" not in n
                else f"; < constant ({n['mae_local_baseline']:.4f}) - {n['margin']:g}"
                + ("" if "calibrated_mae" not in n else f" or <= {n['calibrated_mae']:g}")
            ),
            "(a)",
        ),
        (
            "MAE P_l, paper held-back split",
            f"{n['mae_paper_champion']:.4f}",
            f"{n['mae_paper_challenger']:.4f}",
            f"(b) <= champion + {n['tolerance']:g}",
            "(b)",
        ),
        (
            "90% interval coverage, local test",
            "-" if cover_champion is None else f"{cover_champion:.1%}",
            f"{n['coverage_local_challenger']:.1%}",
            "(c) 80%-97%",
            "(c)",
        ),
    ]
    if "loco_mae_p_loss_challenger" in n:
        rows.append(
            (
                f"MAE P_l, counterfactual ({int(n['loco_folds'])} of {int(n['loco_configurations'])} "
                "configurations held out)",
                f"{n['loco_mae_p_loss_champion']:.4f}",
                f"{n['loco_mae_p_loss_challenger']:.4f}",
                f"(d) <= champion + {n['loco_tolerance']:g}",
                "(d)",
            )
        )
        rows.append(
            (
                "MAE P_d, counterfactual",
                f"{n['loco_mae_p_dup_champion']:.6f}",
                f"{n['loco_mae_p_dup_challenger']:.6f}",
                "(reported)",
                "",
            )
        )
    else:
        rows.append(("MAE P_l, counterfactual", "-", "-", "(d) fewer than two configurations seen", ""))
    if "property_violations" in n:
        rows.append(
            (
                "properties: violations rejecting (P_d acks 0, intervals, P_l vs timeout)",
                "",
                str(int(n["property_violations"])),
                "(e) none",
                "(e)",
            )
        )
    if "timeout_rise_challenger" in n:
        tol = n["timeout_rise_tolerance"]
        rows.append(
            (
                "largest rise of P_l with message.timeout.ms",
                f"{n['timeout_rise_champion']:.4f}",
                f"{n['timeout_rise_challenger']:.4f}",
                "(e) reported, not gated" if tol >= 1 else f"(e) <= champion + {tol:g}",
                "",
            )
        )
    for metric, old, new, criterion, tag in rows:
        met = "" if not tag else "[red]no[/]" if tag in failed else "[green]yes[/]"
        table.add_row(metric, old, new, criterion, met)
    return table


def loco_table(loco: Mapping[str, Any], title: str) -> Table:
    """Return a table of a :meth:`predictor.counterfactual.LocoScore.to_json` score, one row per fold."""
    table = Table(title=title)
    for col in ("held-out configuration", "windows", "trained on", "MAE P_l model", "MAE P_l fold"):
        table.add_column(col, justify="left" if col.startswith("held") else "right")
    table.add_column("MAE P_d model", justify="right")
    table.add_column("MAE P_d fold", justify="right")
    for f in loco.get("folds", []):
        table.add_row(
            f["configuration"],
            str(f["n_windows"]),
            str(f["n_train_windows"]),
            f"{f['mae_p_loss_champion']:.4f}",
            f"{f['mae_p_loss_challenger']:.4f}",
            f"{f['mae_p_dup_champion']:.6f}",
            f"{f['mae_p_dup_challenger']:.6f}",
        )
    if loco.get("folds"):
        table.add_row(
            "[bold]mean over configurations[/]",
            "",
            "",
            _f(loco.get("loco_mae_p_loss_champion")),
            _f(loco.get("loco_mae_p_loss_challenger")),
            _f(loco.get("loco_mae_p_dup_champion"), ".6f"),
            _f(loco.get("loco_mae_p_dup_challenger"), ".6f"),
        )
    return table


def registry_rows(registry: ModelRegistry) -> list[dict[str, Any]]:
    """Return one dict per stored version: its decision's verdict and numbers (from its card).

    Keys: ``version``, ``champion`` (bool, serving now), ``promoted``, ``champion_version`` (what it
    was judged against), ``reasons``, ``mae_local``, ``mae_paper``, ``loco_mae_p_loss`` /
    ``loco_mae_p_loss_champion`` / ``loco_mae_p_dup`` (None for a decision from before issue 39 or with
    fewer than two configurations), ``property_violations``.
    """
    serving = registry.champion_version() if registry.champion_dir() is not None else None
    out = []
    for version in registry.versions():
        directory = registry.version_dir(version)
        card = json.loads((directory / "card.json").read_text()) if directory is not None else {}
        decision = card.get("decision", {})
        n = decision.get("numbers", {})
        out.append(
            {
                "version": version,
                "champion": version == serving,
                "promoted": decision.get("promoted"),
                "champion_version": decision.get("champion_version"),
                "reasons": decision.get("reasons", []),
                "mae_local": n.get("mae_local_challenger"),
                "mae_paper": n.get("mae_paper_challenger"),
                "loco_mae_p_loss": n.get("loco_mae_p_loss_challenger"),
                "loco_mae_p_loss_champion": n.get("loco_mae_p_loss_champion"),
                "loco_mae_p_dup": n.get("loco_mae_p_dup_challenger"),
                "property_violations": n.get("property_violations"),
            }
        )
    return out


def registry_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Return a table of :func:`registry_rows`."""
    table = Table(title=title)
    for col in (
        "version",
        "verdict",
        "vs",
        "MAE P_l local",
        "MAE P_l paper",
        "counterfactual MAE P_l (champion's)",
        "counterfactual MAE P_d",
        "properties",
    ):
        table.add_column(col, justify="left" if col in ("version", "verdict", "vs") else "right")
    for r in rows:
        verdict = "promoted" if r["promoted"] else "rejected" if r["promoted"] is False else "-"
        table.add_row(
            r["version"] + (" [bold](champion)[/]" if r["champion"] else ""),
            verdict,
            r["champion_version"] or "-",
            _f(r["mae_local"]),
            _f(r["mae_paper"]),
            "-"
            if r["loco_mae_p_loss"] is None
            else f"{r['loco_mae_p_loss']:.4f} ({r['loco_mae_p_loss_champion']:.4f})",
            _f(r["loco_mae_p_dup"], ".6f"),
            "-" if r["property_violations"] is None else f"{int(r['property_violations'])} rejecting",
        )
    return table
