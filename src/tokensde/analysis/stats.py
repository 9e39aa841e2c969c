"""Small statistics shared by all Monte Carlo figures: binomial and mean intervals, and the one
rule for a probability from runs with an undecided part (`estimate_with_undecided`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

from ..model.checks import _check_int, _check_real, _real_array, _require

__all__ = ["Estimate", "chance_excess", "chance_explains", "estimate_with_undecided", "t_interval", "wilson"]


def _count(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """A count: an integer (or a float of integer value, e.g. from a table) in [minimum, maximum]."""
    if isinstance(value, float | np.floating) and math.isfinite(value) and float(value).is_integer():
        value = int(value)
    return _check_int(name, value, minimum, maximum)


def _check_level(level: float, name: str = "level") -> float:
    """`level` as a float strictly between 0 and 1 (a confidence level or a test size), or
    ParameterError naming `name`."""
    v = _check_real(name, level, 0.0, strict=True)
    _require(v < 1.0, name, "a number in (0, 1)", level)
    return v


def wilson(successes: np.ndarray | int, trials: np.ndarray | int, level: float = 0.95
           ) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval `(lo, hi)` for a binomial proportion `successes / trials`.

    Args:
        successes: Number of successes (array or int).
        trials: Number of trials (array or int, broadcast with `successes`).
        level: Confidence level.

    Returns:
        `(lo, hi)`, arrays of the broadcast shape.
    """
    k = _real_array("successes", successes)
    n = _real_array("trials", trials)
    level = _check_level(level)
    _require(bool(np.all(np.isfinite(n)) and np.all(n > 0)), "trials", "finite and > 0", trials)
    _require(bool(np.all(np.isfinite(k)) and np.all(k >= 0) and np.all(k <= n)), "successes",
            "finite, from 0 to trials (wilson needs 0 <= successes <= trials)", successes)
    z = _st.norm.ppf(0.5 + level / 2)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo = np.where(k == 0, 0.0, np.clip(centre - half, 0, 1))
    hi = np.where(k == n, 1.0, np.clip(centre + half, 0, 1))
    return lo, hi


def t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """`(mean, lo, hi)` with `lo, hi = mean -+ t_{(1+level)/2, n-1} sd / sqrt(n)` (nan if n < 2:
    no interval; the mean too is nan for an empty sample).

    Args:
        x: The sample, `(n,)`, finite.
        level: Confidence level, in (0, 1).

    Returns:
        `(mean, lo, hi)`.
    """
    x = _real_array("x", x)
    level = _check_level(level)
    _require(x.ndim == 1, "x", "a 1-d sample", f"shape {x.shape}")
    _require(bool(np.all(np.isfinite(x))), "x", "finite (a sample without nan or inf)",
            "non-finite entries")
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    m = float(x.mean())
    if len(x) < 2:
        return m, math.nan, math.nan
    half = float(_st.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, m - half, m + half


def chance_excess(outside: int, cells: int, level: float = 0.95) -> float:
    """P-value of seeing at least `outside` of `cells` independent `level` intervals miss their
    true values: `P(X >= outside)`, `X ~ Binomial(cells, 1 - level)`."""
    cells = _count("cells", cells, 0)
    outside = _count("outside", outside, 0, cells)
    level = _check_level(level)
    return float(_st.binom.sf(outside - 1, cells, 1.0 - level)) if outside else 1.0


_AGREE_ALPHA = 0.01


def chance_explains(outside: int, cells: int, level: float = 0.95, alpha: float = _AGREE_ALPHA
                    ) -> bool:
    """True when `outside` misses in `cells` intervals are what chance gives: `chance_excess`
    is at least `alpha` (so a correct theory is flagged wrongly in at most 1 % of sections)."""
    alpha = _check_level(alpha, "alpha")
    return chance_excess(outside, cells, level) >= alpha


def _censored_quantiles(times: np.ndarray, qs: list[float]) -> list[float]:
    """Quantiles of times with `nan` for runs censored at the horizon (counted as later than
    every observed time); a quantile that falls among the censored runs is nan."""
    t = np.where(np.isnan(np.asarray(times, dtype=float)), np.inf, times)
    out = np.quantile(t, qs, method="inverted_cdf")
    return [float(v) if np.isfinite(v) else math.nan for v in out]


# ----------------------------------------------------------------------------- undecided runs

@dataclass(frozen=True)
class Estimate:
    """A probability from `runs` runs of which `hits` ended in the event, `other` in its
    complement and the rest are undecided (see `estimate_with_undecided`)."""

    hits: int
    other: int
    runs: int
    level: float
    exact: bool
    p: float                            # hits / decided (nan when no run decided)
    ci: tuple[float, float] | None      # Wilson over the decided runs (None: exact or none)
    bounds: tuple[float, float]         # all undecided -> other .. all undecided -> hits
    digits: int                         # decimals that the interval supports

    @property
    def decided(self) -> int:
        """Runs that ended either way."""
        return self.hits + self.other

    @property
    def undecided(self) -> float:
        """Fraction of runs still undecided."""
        return (self.runs - self.decided) / self.runs

    def contains(self, value: float) -> bool:
        """Whether `value` lies within the bounds the undecided runs allow (so a theory there
        is not contradicted by these runs)."""
        return bool(self.bounds[0] <= value <= self.bounds[1])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: estimate, interval, undecided fraction, bounds, counts."""
        return {"p": self.p, "ci": None if self.ci is None else list(self.ci),
                "level": self.level, "undecided": self.undecided, "bounds": list(self.bounds),
                "decided": self.decided, "hits": self.hits, "runs": self.runs,
                "exact": self.exact, "text": self.text()}

    def parts(self) -> tuple[str, str, str]:
        """The estimate, its interval and the bounds as text, each to the decimals the runs
        support ('—' where there is none: no decided run, an exact result, nothing undecided)."""
        f = f"{{:.{self.digits}f}}"
        fb = f"{{:.{max(self.digits, 2)}f}}"
        p = "—" if self.decided == 0 else f"{self.p:.6g}" if self.exact else f.format(self.p)
        ci = "—" if self.ci is None else f"[{f.format(self.ci[0])}, {f.format(self.ci[1])}]"
        bounds = ("—" if self.decided == self.runs else
                  f"[{fb.format(self.bounds[0])}, {fb.format(self.bounds[1])}]")
        return p, ci, bounds

    def text(self) -> str:
        """One line: `0.6 [0.4, 0.8] (95% Wilson over 33 decided runs); 89% undecided: between
        0.04 (all undecided runs against) and 0.97 (all for)`."""
        p, ci, bounds = self.parts()
        if self.decided == 0:
            head = f"no run decided of {self.runs}"
        elif self.ci is None:
            head = f"{p} (every run the same: no interval)"
        else:
            head = f"{p} {ci} ({round(100 * self.level)}% Wilson over {self.decided} decided runs)"
        if self.decided == self.runs:
            return head
        lo, hi = bounds.strip("[]").split(", ")
        return (f"{head}; {100 * self.undecided:.3g}% undecided: between {lo} (all undecided "
                f"runs against) and {hi} (all for)")


def estimate_with_undecided(hits: int, other: int, runs: int, level: float = 0.95,
                            exact: bool = False) -> Estimate:
    """The project's rule for a probability from runs with an undecided part (docs/reporting.md).

    Estimate `p = hits / (hits + other)` over the decided runs with its Wilson interval at
    `level`; the undecided fraction `1 - (hits + other) / runs`; and the bounds the undecided
    runs allow, `[wilson_lo(hits, runs), wilson_hi(runs - other, runs)]` (all undecided runs
    counted against, all counted for), which a theory must leave to be called contradicted.
    `exact` (every run the same, e.g. no noise from a fixed start): no interval, bounds without
    sampling error. `digits`: decimals down to the first significant digit of the interval's
    half-width (of the bounds' when nothing is decided), at most 6.
    """
    k, m, n = _count("hits", hits, 0), _count("other", other, 0), _count("runs", runs, 1)
    level = _check_level(level)
    if n < 1 or k < 0 or m < 0 or k + m > n:
        raise ValueError(f"estimate_with_undecided needs hits, other >= 0 and hits + other <= "
                         f"runs >= 1; got hits={hits}, other={other}, runs={runs}")
    dec = k + m
    p = k / dec if dec else math.nan
    if exact:
        ci = None
        bounds = (k / n, (n - m) / n)
    else:
        ci = tuple(float(v) for v in wilson(k, dec, level)) if dec else None
        bounds = (float(wilson(k, n, level)[0]), float(wilson(n - m, n, level)[1]))
    width = (ci[1] - ci[0]) / 2 if ci is not None else (bounds[1] - bounds[0]) / 2
    digits = 6 if width <= 0 else int(min(6, max(1, -math.floor(math.log10(width)))))
    return Estimate(k, m, n, level, exact, p, ci, bounds, digits)  # type: ignore[arg-type]
