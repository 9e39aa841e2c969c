"""The many-token limit (docs/meanfield.md): the minority mass at absorption against n on a log
axis, with the K-node limit drawn at n = infinity, one panel per (d, start); undecided runs are
shown (a ring, the band they allow, and their fraction below), never dropped. Reads a saved table
(`tokensde.meanfield.absorption.run_table`); never simulates."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from .style import _new_figure, _save, _styled

__all__ = ["plot_meanfield"]


def plot_meanfield(table: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Mean minority mass at absorption (95 % t interval, over the decided runs) against n, ringed
    where runs are undecided, with the band the undecided runs allow for the mean over all runs
    (counted as one cluster, m = 0, up to an even split, m = 1/2) shaded; below it the fraction
    of runs still undecided at the horizon; the limit (n = 0 in the table) at the right edge,
    past the largest n, marked 'inf'."""
    panels = sorted({(int(d), str(s)) for d, s in zip(table["d"], table["start"], strict=True)})
    with _styled():
        fig = _new_figure(4.2 * len(panels), 5.6)
        axes = fig.subplots(2, len(panels), squeeze=False, sharex="col",
                            gridspec_kw={"height_ratios": [2.2, 1]})
        for col, (d, start) in enumerate(panels):
            ax, low = axes[0, col], axes[1, col]
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
                colour = line[0].get_color()
                # the mean over all runs can lie anywhere between the undecided runs counted as
                # one cluster (m = 0) and as an even split (m = 1/2): shaded, not left out
                done = g["p_decided"].to_numpy(float)
                part = np.nan_to_num(g["minority_mean"].to_numpy(float)) * done
                open_ = done < 1
                if open_.any():
                    ax.fill_between(g["x"], part, part + 0.5 * (1 - done), color=colour,
                                    alpha=0.15, lw=0)
                    ax.plot(g["x"][open_], g["minority_mean"][open_], marker="o", ms=8,
                            mfc="none", ls="none", color=colour)
                lim = g[g["n"] == 0]
                ax.plot(lim["x"], lim["minority_mean"], marker="*", ms=11, ls="none",
                        color=colour)
                low.plot(g["x"], 1.0 - g["p_decided"], marker="o", ms=4, color=colour)
            ticks = [*finite, x_inf]
            for a in (ax, low):
                a.set_xscale("log")
                a.set_xticks(ticks, [*map(str, finite), "inf"])
                a.minorticks_off()
            ax.axhline(0.5, color="0.6", lw=0.8, ls=":")
            ax.set_ylim(0.0, 0.52)
            ax.set_ylabel("minority mass at absorption")
            ax.set_title(f"d = {d}, {start} start")
            ax.legend(fontsize=8, loc="lower right")
            low.set_ylim(-0.02, 1.02)
            low.set_ylabel("undecided at horizon")
            low.set_xlabel("tokens n (star: the limit; ring and band: undecided runs)")
        return _save(fig, path)
