"""The many-token limit (docs/meanfield.md): the minority mass at absorption against n on a log
axis, with the K-node limit drawn at n = infinity, one panel per (d, start). Reads a saved table
(`tokensde.meanfield.absorption.run_table`); never simulates."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from .style import new_figure, save, styled


def plot_meanfield(table: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Mean minority mass (95 % t interval) and P(bipolar) against n; the limit (n = 0 in the
    table) at the right edge, past the largest n, marked 'inf'."""
    panels = sorted({(int(d), str(s)) for d, s in zip(table["d"], table["start"], strict=True)})
    with styled():
        fig = new_figure(4.2 * len(panels), 3.8)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (d, start) in zip(axes, panels, strict=True):
            sub = table[(table["d"] == d) & (table["start"] == start)]
            finite = sorted(int(n) for n in sub["n"].unique() if n > 0)
            x_inf = finite[-1] * 4.0 if finite else 1.0
            for beta, g in sub.groupby("beta"):
                g = g.assign(x=np.where(g["n"] > 0, g["n"], x_inf)).sort_values("x")
                fin = g[g["n"] > 0]
                line = ax.errorbar(fin["x"], fin["minority_mean"],
                                   yerr=[fin["minority_mean"] - fin["minority_lo"],
                                         fin["minority_hi"] - fin["minority_mean"]],
                                   marker="o", ms=4, capsize=2, label=f"beta = {beta:g}")
                lim = g[g["n"] == 0]
                ax.plot(lim["x"], lim["minority_mean"], marker="*", ms=11, ls="none",
                        color=line[0].get_color())
            ax.set_xscale("log")
            ticks = [*finite, x_inf]
            ax.set_xticks(ticks, [*map(str, finite), "inf"])
            ax.minorticks_off()
            ax.axhline(0.5, color="0.6", lw=0.8, ls=":")
            ax.set_ylim(0.0, 0.52)
            ax.set_xlabel("tokens n (star: the limit)")
            ax.set_ylabel("minority mass at absorption")
            ax.set_title(f"d = {d}, {start} start")
            ax.legend(fontsize=8, loc="lower right")
        return save(fig, path)
