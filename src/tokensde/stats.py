"""Small statistics shared by all Monte Carlo figures: binomial and mean intervals."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as _st


def wilson(successes: np.ndarray | int, trials: np.ndarray | int, level: float = 0.95
           ) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval `(lo, hi)` for a binomial proportion `successes / trials`."""
    k = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("wilson needs 0 <= successes <= trials and trials > 0")
    z = _st.norm.ppf(0.5 + level / 2)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo = np.where(k == 0, 0.0, np.clip(centre - half, 0, 1))
    hi = np.where(k == n, 1.0, np.clip(centre + half, 0, 1))
    return lo, hi


def t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """`(mean, lo, hi)` with `lo, hi = mean -+ t_{(1+level)/2, n-1} sd / sqrt(n)` (nan if n < 2)."""
    x = np.asarray(x, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return m, math.nan, math.nan
    half = float(_st.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, m - half, m + half
