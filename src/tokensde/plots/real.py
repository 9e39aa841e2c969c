"""Figures of real networks at init against tokensde (docs/real.md), from saved tables only.

A table (`tokensde.real.experiment`) has rows `side` (real | network | sde), `layer`, `frac` (depth
fraction), `stat`, `mean`, `lo`, `hi`. The figure draws, against depth fraction, the measured band
over inits, the discrete prediction and the limit curve.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes

from .style import _COLORS, _TOKEN_COLORS, _new_figure, _save, _styled

__all__ = ["plot_depths"]

_SIDE_STYLE = {"real": ("real network (95 % over inits)", _COLORS["merged"]),
              "network": ("tokensde network, same depth", _COLORS["gaussian"]),
              "sde": ("depth limit (SDE)", _COLORS["theory"])}
_PANELS: tuple[tuple[str, str], ...] = (("cos_mean", "mean token cosine"),
                                       ("erank", "effective rank"))


def _draw_sides(ax: Axes, table: pd.DataFrame, stat: str, label: str = "") -> None:
    """Measured band and marks, the discrete prediction's band and line, the limit's line."""
    t = table[table.stat == stat]
    for side, (name, color) in _SIDE_STYLE.items():
        s = t[t.side == side].sort_values("frac")
        if s.empty:
            continue
        x, y = s["frac"].to_numpy(float), s["mean"].to_numpy(float)
        tag = f"{label}{name}"
        if side == "real":
            ax.fill_between(x, s["lo"], s["hi"], color=color, alpha=0.25, lw=0)
            ax.plot(x, y, "o", ms=3, color=color, label=tag)
        elif side == "network":
            ax.fill_between(x, s["lo"], s["hi"], color=color, alpha=0.15, lw=0)
            ax.plot(x, y, "-", lw=1.2, color=color, label=tag)
        else:
            ax.plot(x, y, "--", lw=1.2, color=color, label=tag)


def _plot_real(table: pd.DataFrame, path: str | os.PathLike, title: str = "") -> Path:
    """Mean token cosine and effective rank against depth fraction: real vs predictions."""
    with _styled():
        fig = _new_figure(9.0, 3.6)
        axes = fig.subplots(1, len(_PANELS))
        for ax, (stat, name) in zip(axes, _PANELS, strict=True):
            _draw_sides(ax, table, stat)
            ax.set_xlabel("depth fraction k / L")
            ax.set_ylabel(name)
        axes[0].legend(fontsize=7)
        if title:
            fig.suptitle(title, fontsize=9)
        return _save(fig, path, tight=True)


def plot_depths(tables: Sequence[tuple[str, pd.DataFrame]], path: str | os.PathLike,
                title: str = "") -> Path:
    """Mean token cosine of several depths (label, table) against depth fraction and against
    layer index: an init with a depth limit lines up in the first, one without in the second."""
    with _styled():
        fig = _new_figure(9.0, 3.6)
        left, right = fig.subplots(1, 2)
        for i, (label, t) in enumerate(tables):
            color = _TOKEN_COLORS[i % len(_TOKEN_COLORS)]
            c = t[t.stat == "cos_mean"]
            for side, mark in (("real", "o"), ("network", "-")):
                s = c[c.side == side].sort_values("layer")
                if s.empty:
                    continue
                kw = {"ms": 3} if mark == "o" else {"lw": 1.0}
                name = f"{label} {'real' if side == 'real' else 'tokensde'}"
                left.plot(s["frac"], s["mean"], mark, color=color, label=name, **kw)
                right.plot(s["layer"], s["mean"], mark, color=color, **kw)
            lim = c[c.side == "sde"].sort_values("frac")
            if not lim.empty and i == len(tables) - 1:
                left.plot(lim["frac"], lim["mean"], "--", color=_COLORS["theory"],
                          label="depth limit (SDE)")
        left.set_xlabel("depth fraction k / L")
        right.set_xlabel("layer k")
        for ax in (left, right):
            ax.set_ylabel("mean token cosine")
        left.legend(fontsize=6)
        if title:
            fig.suptitle(title, fontsize=9)
        return _save(fig, path, tight=True)
