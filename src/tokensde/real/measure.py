"""Token geometry per layer: pairwise cosines and effective rank, per unit and over units.

The independent unit of a real network is its init (its inputs share weights); of the tokensde
prediction, its run. `gram_stats` gives per-input numbers from Gram matrices of directions;
`summarise` averages them within units and gives the mean over units with a t interval.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from scipy import stats as st

from ..analysis.clusters import is_antipodal, is_merged, upper_pairs

__all__ = ["directions_gram", "gram_stats", "summarise"]

_QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)
_TOL = 1e-2  # default distance to +1 / -1 for "merged" / "antipodal"
_STATS: tuple[str, ...] = ("cos_mean", *(f"cos_q{int(q * 100):02d}" for q in _QUANTILES),
                          "frac_merged", "frac_anti", "erank")


def directions_gram(x: torch.Tensor) -> torch.Tensor:
    """Gram matrix of token directions `(..., n, n)` from tokens `(..., n, w)`."""
    u = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return u @ u.transpose(-1, -2)


def gram_stats(g: torch.Tensor, tol: float = _TOL) -> dict[str, np.ndarray]:
    """Per-matrix statistics of Gram matrices of directions `g` `(..., n, n)`: mean, quantiles,
    fraction within `tol` of +1 (merged) and of -1 (antipodal) of the off-diagonal cosines
    `<u_i, u_j>` (i < j), and the effective rank `exp(H(s / sum s))` (s the singular values of
    the token matrix, the square roots of the Gram eigenvalues)."""
    g = g.to(torch.float64)
    c = upper_pairs(g)
    out = {"cos_mean": c.mean(-1)}
    qs = torch.quantile(c, torch.tensor(_QUANTILES, dtype=c.dtype), dim=-1)
    for q, v in zip(_QUANTILES, qs, strict=True):
        out[f"cos_q{int(q * 100):02d}"] = v
    out["frac_merged"] = is_merged(c, tol).to(c.dtype).mean(-1)
    out["frac_anti"] = is_antipodal(c, tol).to(c.dtype).mean(-1)
    s = torch.linalg.eigvalsh(g).clamp_min(0.0).sqrt()
    p = s / s.sum(-1, keepdim=True)
    out["erank"] = torch.exp(-(p * torch.log(p.clamp_min(1e-300))).sum(-1))
    return {k: v.cpu().numpy() for k, v in out.items()}


def summarise(per_unit: dict[str, np.ndarray], level: float = 0.95) -> pd.DataFrame:
    """Over units: `per_unit[stat]` `(units, layers)` -> rows (layer, stat, mean, se, lo, hi,
    units) with the t interval at `level` (se = sd / sqrt(units))."""
    rows = []
    for stat, a in per_unit.items():
        a = np.asarray(a, dtype=float)
        k = a.shape[0]
        mean = a.mean(0)
        se = a.std(0, ddof=1) / math.sqrt(k) if k > 1 else np.full(a.shape[1], np.nan)
        half = st.t.ppf(0.5 + level / 2, max(k - 1, 1)) * se
        for layer in range(a.shape[1]):
            rows.append((layer, stat, mean[layer], se[layer], mean[layer] - half[layer],
                         mean[layer] + half[layer], k))
    return pd.DataFrame(rows, columns=["layer", "stat", "mean", "se", "lo", "hi", "units"])
