"""The paper's Figs. 4-8 from experiment CSVs (``experiments.csv`` columns), ours next to the paper's.

Each figure has one panel per data source (e.g. the paper's measurements in
``predictor/base_data/wu2020/experiments.csv`` and a testbed grid's CSV), with the same axes, so the shapes
can be compared side by side. Points are means over repeated settings. Figures (Wu, Shang, Wolter 2020):

- Fig. 4: message size M vs P_l at L = 19 % (``msgsize-pktloss``)
- Fig. 5: ``message.timeout.ms`` T_o vs P_l (``msgTmout``)
- Fig. 6: polling interval vs P_l (``pollTime``)
- Fig. 7: packet loss L vs P_l for B = 1..10, acks 0 and 1 (``batch-pktloss``)
- Fig. 8: batch size B vs P_d (``batch-pktloss``)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kafka_plumbing.errors import ConfigError
from predictor.features import current_columns
from testbed.grid import CSV_COLUMNS


@dataclass(frozen=True)
class Figure:
    """How to draw one figure from a CSV: filter rows, x, y, one line per ``group`` value."""

    number: int
    title: str
    x: str
    y: str
    group: str
    select: Callable[[pd.DataFrame], pd.DataFrame]
    xlabel: str
    ylabel: str
    split: str | None = None


def _near(col: str, value: float, tol: float) -> Callable[[pd.DataFrame], pd.DataFrame]:
    return lambda df: df[(df[col] - value).abs() <= tol]


FIGURES = (
    Figure(4, "Fig. 4: message size vs P_l (L around 19%)", "message_size_bytes", "p_loss", "acks",
           _near("packet_loss_pct", 19.0, 1.5), "message size M (bytes)", "P_l"),
    Figure(5, "Fig. 5: message.timeout.ms vs P_l", "message_timeout_ms", "p_loss", "packet_loss_pct",
           lambda df: df[df["experiment"].str.contains("msgTmout|timeout", case=False)],
           "message.timeout.ms T_o (ms)", "P_l"),
    Figure(6, "Fig. 6: polling interval vs P_l", "poll_interval_ms", "p_loss", "packet_loss_pct",
           lambda df: df[df["experiment"].str.contains("pollTime|poll", case=False)],
           "polling interval (ms)", "P_l"),
    Figure(7, "Fig. 7: packet loss L vs P_l by batch size B", "packet_loss_pct", "p_loss",
           "batch_num_messages",
           lambda df: df[df["experiment"].str.contains("batch-pktloss", case=False)],
           "packet loss L (%)", "P_l", split="acks"),
    Figure(8, "Fig. 8: batch size B vs P_d", "batch_num_messages", "p_dup", "packet_loss_pct",
           lambda df: df[df["experiment"].str.contains("batch-pktloss", case=False) & (df["acks"] == 1)],
           "batch size B (batch.num.messages)", "P_d"),
)  # fmt: skip


def read_csv(path: Path) -> pd.DataFrame:
    """Read an experiments CSV; a former column name (``batch_size``) gets its current one.

    Raises:
        ConfigError: if it lacks columns of ``experiments.csv``.
    """
    df = current_columns(pd.read_csv(path))
    missing = [c for c in CSV_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: not an experiments CSV, missing columns {missing}")
    return df


def draw(sources: dict[str, pd.DataFrame], out_dir: Path) -> list[Path]:
    """Draw Figs. 4-8 as PNG into ``out_dir``; return the files written.

    Args:
        sources: Label -> experiments frame (e.g. ``{"paper (Wu 2020)": ..., "testbed": ...}``).
        out_dir: Output directory (created).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fig_spec in FIGURES:
        panels = []
        for label, df in sources.items():
            sel = fig_spec.select(df)
            splits = sorted(sel[fig_spec.split].unique()) if fig_spec.split else [None]
            for s in splits:
                part = sel if s is None else sel[sel[fig_spec.split] == s]
                title = label if s is None else f"{label}, {fig_spec.split}={s}"
                panels.append((title, part))
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False, sharey=True)
        for ax, (title, part) in zip(axes[0], panels, strict=True):
            if part.empty:
                ax.text(
                    0.5, 0.5, "no experiments of this kind", ha="center", va="center", transform=ax.transAxes
                )
            else:
                mean = part.groupby([fig_spec.group, fig_spec.x])[fig_spec.y].mean().reset_index()
                for g, rows in mean.groupby(fig_spec.group):
                    ax.plot(
                        rows[fig_spec.x], rows[fig_spec.y], marker="o", ms=3, label=f"{fig_spec.group}={g:g}"
                    )
                ax.legend(fontsize=7, ncol=2)
            ax.set_title(f"{title} (n={len(part)})", fontsize=9)
            ax.set_xlabel(fig_spec.xlabel)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(fig_spec.ylabel)
        fig.suptitle(fig_spec.title)
        fig.tight_layout()
        path = out_dir / f"fig{fig_spec.number}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
