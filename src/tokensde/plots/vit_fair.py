"""Figures of the fair ViT protocol, drawn from its saved report (`fair.json`) only.

- `fair_lr.png`: validation accuracy against the peak learning rate, one panel per budget, one line
  per arm, the chosen rate ringed;
- `fair_gaps.png`: the paired gap to `default` against the budget, each arm at its own chosen
  rate (filled: the 95 % interval excludes 0; † a rate chosen from a partial grid), and dashed
  the gap with both at 2e-3.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .style import _COLORS, _TOKEN_COLORS, _new_figure, _save, _styled


def _arms(arms: Any) -> list[str]:
    """The distinct arms in the order of the report's rows (which `fair_report` sets)."""
    return list(dict.fromkeys(arms))


def _plot_lr(chosen: pd.DataFrame, out: str | os.PathLike) -> Path:
    """Validation accuracy (mean over seeds) against the learning rate; chosen rates ringed."""
    budgets = sorted(chosen["epochs"].unique())
    arms = _arms(chosen["arm"])
    with _styled():
        fig = _new_figure(3.0 * len(budgets), 3.4)
        axes = np.atleast_1d(fig.subplots(1, len(budgets)))
        for ax, e in zip(axes, budgets, strict=True):
            for k, arm in enumerate(arms):
                rows = chosen[(chosen["arm"] == arm) & (chosen["epochs"] == e)]
                if rows.empty:
                    continue
                r = rows.iloc[0]
                color = _TOKEN_COLORS[k % len(_TOKEN_COLORS)]
                ax.plot(r["grid"], r["val_by_lr"], "o-", color=color, label=arm, ms=3)
                ax.plot([r["lr"]], [r["val"]], "o", mfc="none", color=color, ms=9)
            grid = sorted({float(g) for gr in chosen["grid"] for g in gr})
            ax.set_xscale("log")
            ax.set_xticks(grid, [f"{g:.2g}" for g in grid])
            ax.minorticks_off()
            part = "" if chosen.loc[chosen["epochs"] == e, "complete"].all() else \
                " (partial grid)"
            ax.set(xlabel="peak learning rate", title=f"{e} epoch{'s' if e > 1 else ''}{part}")
        axes[0].set_ylabel("validation accuracy (%)")
        axes[0].legend(fontsize=7)
        fig.suptitle("learning-rate grid per arm (ringed: chosen, highest validation accuracy)",
                     fontsize=9)
        return _save(fig, out)


def _plot_gaps(gaps: pd.DataFrame, out: str | os.PathLike) -> Path:
    """Paired gap to default against the budget, per arm at its chosen rate (solid) and with
    both at 2e-3 (dashed)."""
    arms = [a for a in _arms(gaps["arm"]) if a != "default"]
    with _styled():
        fig = _new_figure(5.4, 3.8)
        ax = fig.subplots()
        for k, arm in enumerate(arms):
            rows = gaps[gaps["arm"] == arm].sort_values("epochs")
            color = _TOKEN_COLORS[(k + 1) % len(_TOKEN_COLORS)]
            x = rows["epochs"].to_numpy(float) * 1.04 ** (k - len(arms) / 2)
            y = rows["gap"].to_numpy(float)
            lo, hi = rows["gap_lo"].to_numpy(float), rows["gap_hi"].to_numpy(float)
            ax.plot(x, y, color=color, lw=1.0)
            ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="none", ecolor=color, capsize=2, lw=1)
            decided = (hi < 0) | (lo > 0)
            ax.plot(x[decided], y[decided], "o", color=color, label=f"{arm} (own rate)")
            ax.plot(x[~decided], y[~decided], "o", mfc="white", color=color)
            partial = ~rows.get("complete", pd.Series(True, index=rows.index)).to_numpy(bool)
            for xi, yi in zip(x[partial], hi[partial], strict=True):
                ax.annotate("†", (xi, yi), textcoords="offset points", xytext=(0, 3),
                            ha="center", fontsize=8, color=color)
            if rows["gap_fixed"].notna().any():
                ax.plot(x, rows["gap_fixed"].to_numpy(float), "--", color=color, lw=0.9,
                        alpha=0.7, label=f"{arm} (both at 2e-3)")
        ax.axhline(0.0, color=_COLORS["theory"], lw=0.8)
        budgets = sorted(gaps["epochs"].unique())
        ax.set_xscale("log")
        ax.set_xticks(budgets, [str(e) for e in budgets])
        ax.minorticks_off()
        ax.set(xlabel="training budget (epochs)", ylabel="accuracy − default (points)",
               title="paired gap to default, 95 % t-interval\n"
                     "(open: contains 0; †: rate from a partial grid)")
        ax.legend(fontsize=7)
        return _save(fig, out)


def _draw_fair(doc: dict[str, Any], out: str | os.PathLike) -> dict[str, Path]:
    """Both figures, from the saved report `doc` (the content of `fair.json`), into `out`."""
    chosen, gaps = pd.DataFrame(doc["chosen"]), pd.DataFrame(doc["gaps"])
    out = Path(out)
    return {"lr_figure": _plot_lr(chosen, out / "fair_lr.png"),
            "gap_figure": _plot_gaps(gaps, out / "fair_gaps.png")}
