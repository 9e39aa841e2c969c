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


def chance_excess(outside: int, cells: int, level: float = 0.95) -> float:
    """P-value of seeing at least `outside` of `cells` independent `level` intervals miss their
    true values: `P(X >= outside)`, `X ~ Binomial(cells, 1 - level)`."""
    if not 0 <= outside <= cells:
        raise ValueError("chance_excess needs 0 <= outside <= cells")
    return float(_st.binom.sf(outside - 1, cells, 1.0 - level)) if outside else 1.0


AGREE_ALPHA = 0.01


def chance_explains(outside: int, cells: int, level: float = 0.95, alpha: float = AGREE_ALPHA
                    ) -> bool:
    """True when `outside` misses in `cells` intervals are what chance gives: `chance_excess`
    is at least `alpha` (so a correct theory is flagged wrongly in at most 1 % of sections)."""
    return chance_excess(outside, cells, level) >= alpha


def censored_quantiles(times: np.ndarray, qs: list[float]) -> list[float]:
    """Quantiles of times with `nan` for runs censored at the horizon (counted as later than
    every observed time); a quantile that falls among the censored runs is nan."""
    t = np.where(np.isnan(np.asarray(times, dtype=float)), np.inf, times)
    out = np.quantile(t, qs, method="inverted_cdf")
    return [float(v) if np.isfinite(v) else math.nan for v in out]
