"""Summary figure of one `simulate` result: inner-product law and pair outcomes across depth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..analysis.clusters import is_antipodal, is_merged, upper_pairs
from .style import _save


def _plot_simulation(result: Any, path: str | Path, tol: float = 1e-3) -> Path:
    """Left: histogram of final pairwise <x_i, x_j>; right: merged / antipodal pair fractions vs t."""
    gram = np.asarray(result.gram, dtype=np.float64)  # merged / antipodal in float64, as clusters
    rho = upper_pairs(gram)  # (runs, K, pairs)
    t = result.times
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax0, ax1 = fig.subplots(1, 2)
    ax0.hist(rho[:, -1].ravel(), bins=np.linspace(-1, 1, 61), color="#3b6ea5")
    ax0.set(xlabel=r"$\langle x_i, x_j\rangle$ at $T$", ylabel="pairs",
            title=f"final inner products (T = {result.grid.T:g})")
    ax1.plot(t, is_merged(rho, tol).mean(axis=(0, 2)), "o-", label="merged pairs",
             color="#c0392b")
    ax1.plot(t, is_antipodal(rho, tol).mean(axis=(0, 2)), "s-", label="antipodal pairs",
             color="#2c7a4b")
    ax1.set(xlabel="depth time t", ylabel="fraction of pairs", ylim=(-0.02, 1.02),
            title=f"tol = {tol:g}")
    ax1.legend()
    p = result.params
    fig.suptitle(f"n={p.n}, d={p.d}, beta={p.beta:g}, noise={p.noise}/{p.law}, sigma="
                 f"{p.noise_scale:g}, mean={p.mean_kind}, runs={result.runs}, seed={result.seed}",
                 fontsize=9)
    return _save(fig, path, dpi=110, style=False)
