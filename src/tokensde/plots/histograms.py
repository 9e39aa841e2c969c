"""The law of pairwise inner products `<x_i, x_j>` across depth, from recorded Gram matrices.

One row per result (a model), one column per depth time; each cell is the fraction of token pairs
(over all runs) per bin on a log scale, so both the mass piling up at +1 (merged) and -1
(antipodal) and the spread in between stay visible.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.clusters import pair_fractions, upper_pairs
from .style import _COLORS, _new_figure, _save, _styled

_Panel = tuple[str, Any]  # (row title, SimResult with gram recorded)


def _pick_checkpoints(times: np.ndarray, count: int = 5) -> list[int]:
    """Indices of `count` checkpoints spread over depth: t = 0, the end, and geometric between."""
    K = len(times)
    if K <= count:
        return list(range(K))
    t_end = times[-1]
    first = times[1] if times[1] > 0 else t_end / K
    targets = [0.0, *np.geomspace(first, t_end, count - 1)]
    idx = sorted({int(np.argmin(np.abs(times - t))) for t in targets})
    return idx


def _plot_histograms(panels: Sequence[_Panel], path: str | Path, columns: int = 5,
                    bins: int = 40, tol: float = 1e-3) -> Path:
    """Histograms of pairwise inner products at `columns` depth times for each result."""
    edges = np.linspace(-1, 1, bins + 1)
    with _styled():
        fig = _new_figure(2.1 * columns, 1.9 * len(panels) + 0.4)
        axes = fig.subplots(len(panels), columns, squeeze=False, sharex=True, sharey=True)
        for r, (title, res) in enumerate(panels):
            if res.gram is None:
                raise ValueError(f"histogram panel {title!r} needs a result with 'gram' recorded")
            rho = upper_pairs(np.asarray(res.gram))  # (runs, K, pairs)
            idx = _pick_checkpoints(res.times, columns)
            for c in range(columns):
                ax = axes[r][c]
                if c >= len(idx):
                    ax.set_visible(False)
                    continue
                vals = rho[:, idx[c]].ravel()
                frac = np.histogram(vals, bins=edges)[0] / max(vals.size, 1)
                ax.stairs(frac, edges, fill=True, color=_COLORS["noise"], alpha=0.8)
                merged, anti = pair_fractions(vals, tol)
                ax.text(0.03, 0.95, f"merged {merged:.0%}\nantipodal {anti:.0%}",
                        transform=ax.transAxes, va="top", fontsize=7)
                ax.set_yscale("log")
                ax.set_ylim(1e-4, 1.0)
                if r == 0:
                    ax.set_title(f"t = {res.times[idx[c]]:.2g}", fontsize=9)
                if r == len(panels) - 1:
                    ax.set_xlabel(r"$\langle x_i, x_j\rangle$")
                if c == 0:
                    ax.set_ylabel(f"{title}\nfraction of pairs", fontsize=8)
        fig.suptitle(f"Pairwise inner products across depth (all runs pooled; merged/antipodal: "
                     f"within tol = {tol:g} of +1/-1)", fontsize=9)
    return _save(fig, path)
