"""Figures of the ViT depth sweep, drawn from its saved tables only (`gaps.json`, the sweep table).

Every gap is `accuracy(arm) - accuracy(default)` in points, paired over training seeds, with its
95 % t-interval as an error bar; an interval that contains 0 is drawn with an open marker
(undecided), one that excludes it with a filled marker.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .style import _COLORS, _TOKEN_COLORS, _new_figure, _save, _styled

_BLOCK_ORDER = ("attention-only", "standard")


def _arm_color(arm: str, arms: list[str]) -> str:
    """A fixed colour per arm within one figure."""
    return _TOKEN_COLORS[arms.index(arm) % len(_TOKEN_COLORS)]


def _legend(ax: Axes) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _errorbars(ax: Axes, x: np.ndarray, rows: pd.DataFrame, color: str, label: str) -> None:
    y = rows["gap"].to_numpy(float)
    lo, hi = rows["gap_lo"].to_numpy(float), rows["gap_hi"].to_numpy(float)
    ax.plot(x, y, color=color, lw=1.0, alpha=0.6)
    decided = (hi < 0) | (lo > 0)
    ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="none", ecolor=color, capsize=2, lw=1.0)
    ax.plot(x[decided], y[decided], "o", color=color, label=label)
    ax.plot(x[~decided], y[~decided], "o", mfc="white", color=color)


def _arms(gaps: pd.DataFrame) -> list[str]:
    return [a for a in dict.fromkeys(gaps["arm"]) if a != "default"]


def _blocks(gaps: pd.DataFrame) -> list[str]:
    return [b for b in _BLOCK_ORDER if b in set(gaps["block"])]


def _panels(frame: pd.DataFrame, width: float = 5.0, height: float = 3.8
            ) -> tuple[Figure, list[tuple[Axes, str, pd.DataFrame]]]:
    """A figure with one panel per block of `frame` (shared y axis): `(fig, [(ax, block, rows of
    that block)])`; call inside `styled()`."""
    blocks = _blocks(frame)
    fig = _new_figure(width * len(blocks), height)
    axes = np.atleast_1d(fig.subplots(1, len(blocks), sharey=True))
    return fig, [(ax, b, frame[frame["block"] == b]) for ax, b in zip(axes, blocks, strict=True)]


def _label_first(panels: list[tuple[Axes, str, pd.DataFrame]], ylabel: str) -> None:
    panels[0][0].set_ylabel(ylabel)
    _legend(panels[0][0])


def _seeds_note(gaps: pd.DataFrame) -> str:
    s = gaps.loc[gaps["arm"] != "default", "pairs"]
    return f"{s.min()}–{s.max()} paired seeds a point" if len(s) else ""


def _plot_depth_gaps(gaps: pd.DataFrame, out: str | os.PathLike) -> Path:
    """One panel per block: the paired gap to default against depth, one line per arm that was
    run at two depths or more."""
    arms = _arms(gaps)
    with _styled():
        fig, panels = _panels(gaps)
        for ax, block, g in panels:
            for k, arm in enumerate(arms):
                rows = g[g["arm"] == arm].sort_values("depth")
                if rows["depth"].nunique() < 2:
                    continue
                x = rows["depth"].to_numpy(float) * 1.04 ** (k - len(arms) / 2)
                _errorbars(ax, x, rows, _arm_color(arm, arms), arm)
            ax.axhline(0.0, color="k", lw=0.8)
            ax.set_xscale("log", base=2)
            depths = sorted(g["depth"].unique())
            ax.set_xticks(depths, [str(d) for d in depths])
            ax.minorticks_off()
            ax.set(xlabel="depth L (blocks)", title=f"{block} block")
        _label_first(panels, "accuracy − default (points)")
        fig.suptitle("paired gap to default, 95 % t-interval (open: contains 0); "
                     + _seeds_note(gaps), fontsize=9)
        return _save(fig, out)


def _plot_lambda(gaps: pd.DataFrame, out: str | os.PathLike, block: str = "attention-only",
                depth: int | None = None) -> Path:
    """At one depth: the gap to default against the noise amplitude LAM, for pure noise
    (`noise:LAM`, default = LAM 1) and for the hybrid arm (`hybrid:LAM`, mean part M = I)."""
    g = gaps[(gaps["block"] == block) & gaps["lam"].notna()]
    if depth is None:
        counts = g.groupby("depth")["arm"].nunique()
        depth = int(counts.idxmax())
    g = g[g["depth"] == depth].copy()
    g["family"] = g["arm"].str.split(":").str[0].replace({"default": "noise"})
    with _styled():
        fig = _new_figure(5.2, 3.8)
        ax = fig.subplots()
        for family, color in (("noise", _COLORS["noise"]), ("hybrid", _COLORS["accent"])):
            rows = g[g["family"] == family].sort_values("lam")
            if rows.empty:
                continue
            rows = rows.assign(gap=rows["gap"].fillna(0.0), gap_lo=rows["gap_lo"].fillna(0.0),
                               gap_hi=rows["gap_hi"].fillna(0.0))
            label = "pure noise (M = 0)" if family == "noise" else "hybrid (M = I at r²)"
            _errorbars(ax, rows["lam"].to_numpy(float), rows, color, label)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.axvline(1.0, color=_COLORS["deterministic"], lw=0.8, ls=":")
        ax.set(xlabel="value-noise amplitude λ (× PyTorch's default draw)",
               ylabel="accuracy − default (points)",
               title=f"{block} block, depth {depth}: accuracy against λ")
        _legend(ax)
        return _save(fig, out)


def _plot_collapse(gaps: pd.DataFrame, out: str | os.PathLike) -> Path:
    """The gap to default against the collapse of the untrained model: the fraction of token
    pairs within tol of +1 after its last block; one marker per (arm, depth)."""
    arms = _arms(gaps)
    with _styled():
        fig, panels = _panels(gaps)
        for ax, block, g in panels:
            for arm in arms:
                rows = g[g["arm"] == arm]
                y = rows["gap"].to_numpy(float)
                ax.errorbar(rows["init_near_pos"], y,
                            yerr=[y - rows["gap_lo"].to_numpy(float),
                                  rows["gap_hi"].to_numpy(float) - y],
                            fmt="o", color=_arm_color(arm, arms), capsize=2, label=arm)
            ax.axhline(0.0, color="k", lw=0.8)
            ax.set(xlabel="merged pairs at initialisation (cos > 1 − tol, last block)",
                   title=f"{block} block")
        _label_first(panels, "accuracy − default (points)")
        fig.suptitle("does collapse at initialisation predict the accuracy cost?", fontsize=9)
        return _save(fig, out)


def _plot_curves(table: pd.DataFrame, out: str | os.PathLike, arm: str = "default") -> Path:
    """Test accuracy after each epoch of `arm`, mean over seeds, one line per (block, depth):
    whether training had stopped improving fast."""
    t = table[(table["arm"] == arm) & (table["status"] == "ok")]
    with _styled():
        fig, panels = _panels(t, 4.6, 3.6)
        for ax, block, g in panels:
            for k, (depth, rows) in enumerate(g.groupby("depth")):
                c = 100 * np.array(rows["acc_curve"].tolist(), dtype=float)
                ax.plot(np.arange(1, c.shape[1] + 1), c.mean(0), marker="o",
                        color=_TOKEN_COLORS[k % len(_TOKEN_COLORS)], label=f"L = {depth}")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set(xlabel="epoch", title=f"{block} block, arm {arm}")
        _label_first(panels, "test accuracy (%)")
        return _save(fig, out)


def _draw_all(gaps: pd.DataFrame, table: pd.DataFrame, out_dir: str | os.PathLike
             ) -> dict[str, Any]:
    """Every figure of the depth sweep into `out_dir`; returns name -> path."""
    d = Path(out_dir)
    figs = {"depth_gaps": _plot_depth_gaps(gaps, d / "depth_gaps.png"),
            "collapse": _plot_collapse(gaps, d / "collapse.png"),
            "curves": _plot_curves(table, d / "curves.png")}
    if (gaps["lam"].notna() & ~gaps["arm"].isin(["default"])).sum() >= 2:
        figs["lambda"] = _plot_lambda(gaps, d / "lambda.png")
    return figs
