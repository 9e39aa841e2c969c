"""How fast the L-layer network approaches its depth limit: weak and strong errors, fitted orders.

Every level `L` (network with `L` layers over depth time `T`, `dt = T/L`) and the SDE reference run
on **one Brownian path** per run: the fine grid has `ref_steps` steps of `h = T/ref_steps`, the
network at level `L` uses `V_k = (sum of the fine dW in layer k) / sqrt(dt)` (Gaussian law) or its
entry-wise quantile transform `sigma sqrt(3) erf(V_k / (sigma sqrt 2))` (uniform law, same
variance). The reference is the projected Euler SDE on the fine grid, Richardson-extrapolated with
the same path on the grid twice as coarse: `E f_ref = 2 E f(h) - E f(2h)` (bias O(h^2)).

- weak error of a statistic f: `e_L = E[f(X_L) - f_ref]`, estimated on the coupled samples, so its
  Monte Carlo error is that of a difference (common random numbers);
- strong error: `(E mean_i |x_i^L - x_i^ref|^2)^(1/2)` against the fine SDE on the same path;
- order: `-slope` of the least-squares line of `log |e_L|` on `log L`, with its standard error and a
  Poisson-bootstrap interval over runs (so Monte Carlo error enters the interval). Weak errors are
  fitted only where they exceed `RESOLVE_Z` standard errors.

The coupled schemes themselves are simulated by `tokensde.sim.coupled` (`coupled_states`), and
reduced to per-run statistics by `analysis.level_samples` (`coupled_samples`; both re-exported
here); this module fits the orders and runs the study.

Pure: tensors in, arrays and dicts out, explicit seed. Shapes: tokens `(runs, n, d)`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

from ..io.store import _check_meta, header
from ..model.checks import _real_array, _require
from ..model.params import _check_int
from ..sim.coupled import _LAWS
from ..sim.coupled import _uniform_from_gaussian as _uniform_from_gaussian  # re-exported
from ..sim.loop import _Progress
from ..sim.rng import _RUN_BLOCK, derive_seed
from .level_samples import (
    _LEVELS,
    _PROBLEMS,
    CoupledSamples,
    Problem,
    _concat_samples,
    coupled_samples,
)
from .stats import _check_level

__all__ = [
    "RESOLVE_Z",
    "ConvergenceResult",
    "OrderFit",
    "fit_order",
    "poisson_weights",
    "run_convergence",
    "summarise",
    "weak_levels_used",
    "weighted_means",
]

_KIND_CONV = "tokensde.convergence"
RESOLVE_Z = 3.0
_LEVEL_Z = 1.96



@dataclass(frozen=True)
class OrderFit:
    """`error ~ constant * L^(-order)`: least-squares order, its standard error and intervals."""

    order: float
    se: float
    constant: float
    ci_lo: float
    ci_hi: float
    boot_lo: float
    boot_hi: float
    levels: tuple[int, ...]


def _ols(logL: np.ndarray, logE: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slopes and intercepts of the least-squares lines of each row of `logE` on `logL`."""
    xm = logL - logL.mean()
    slope = (logE - logE.mean(-1, keepdims=True)) @ xm / (xm @ xm)
    return slope, logE.mean(-1) - slope * logL.mean()


def fit_order(levels: Sequence[int] | np.ndarray, errors: Sequence[float] | np.ndarray,
              replicates: np.ndarray | None = None, level: float = 0.95) -> OrderFit:
    """Order `-slope` of `log|e|` on `log L`; t-interval from the residuals; bootstrap percentile
    interval from `replicates` `(B, len(levels))` of the errors when given.

    Args:
        levels: The numbers of layers `L`, one per error.
        errors: The errors at each level.
        replicates: Bootstrap replicates of the errors `(B, len(levels))`, or None.
        level: Confidence level of the intervals.

    Returns:
        An `OrderFit`: the order, its standard error, the constant and the intervals.
    """
    L, e = _real_array("levels", levels), np.abs(_real_array("errors", errors))
    level = _check_level(level)
    _require(L.ndim == 1 and bool(np.all(np.isfinite(L) & (L > 0))), "levels",
            "finite numbers of layers > 0, one per error", levels)
    _require(bool(np.all(np.isfinite(e))), "errors", "finite", errors)
    if L.size < 2 or L.size != e.size or np.any(e <= 0):
        raise ValueError(f"fit_order needs >= 2 levels with non-zero errors; got {L.size} levels")
    logL = np.log(L)
    slopes, icpts = _ols(logL, np.log(e)[None])
    slope, icpt = float(slopes[0]), float(icpts[0])
    dof = L.size - 2
    if dof > 0:
        resid = np.log(e) - (icpt + slope * logL)
        se = float(np.sqrt(resid @ resid / dof / np.sum((logL - logL.mean()) ** 2)))
        half = float(_st.t.ppf(0.5 + level / 2, dof)) * se
    else:
        se, half = math.nan, math.nan
    blo = bhi = math.nan
    if replicates is not None:
        r = np.abs(np.asarray(replicates, dtype=float))
        r = r[np.all(r > 0, axis=1)]
        if len(r):
            orders = -_ols(logL, np.log(r))[0]
            blo, bhi = (float(q) for q in np.quantile(orders, [0.5 - level / 2, 0.5 + level / 2]))
    return OrderFit(-slope, se, math.exp(icpt), -slope - half, -slope + half, blo, bhi,
                    tuple(int(v) for v in L))


def poisson_weights(runs: int, replicates: int, seed: int) -> np.ndarray:
    """Poisson bootstrap weights `w_{b,r} ~ Poisson(1)`, independent, `(replicates, runs)`.

    Args:
        runs: The runs resampled.
        replicates: The bootstrap replicates `B`.
        seed: The seed of the NumPy generator.

    Returns:
        The weights `(replicates, runs)`, float.
    """
    runs, replicates = _check_int("runs", runs, 1), _check_int("replicates", replicates, 1)
    return np.random.default_rng(_check_int("seed", seed, 0)).poisson(1.0, (replicates, runs)).astype(float)


def weighted_means(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Bootstrap means `sum_r w_{b,r} v_r / sum_r w_{b,r}` of `values` over its last axis.

    Args:
        values: The per-run values `(..., runs)`.
        w: The weights `(B, runs)` (`poisson_weights`).

    Returns:
        The weighted means `(B, ...)`.
    """
    flat = values.reshape(-1, values.shape[-1])
    return (w @ flat.T / w.sum(1, keepdims=True)).reshape(w.shape[0], *values.shape[:-1])


def _interval(mean: float, se: float) -> tuple[float, float]:
    return mean - _LEVEL_Z * se, mean + _LEVEL_Z * se


def summarise(weak: CoupledSamples, strong: CoupledSamples, problem: Problem,
              bootstrap: int = 400, seed: int = 0, strong_from: int = 1
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Weak errors `E f(X^L) - (2 E f(X^h) - E f(X^{2h}))`, strong errors and their fitted orders.

    The error points and fitted orders as two lists of JSON-ready rows.

    Weak errors come from `weak` (Richardson reference), strong errors from `strong` (finest SDE
    path; the strong fit uses levels >= `strong_from`). Point rows: problem, law, kind
    ('weak' | 'strong' | 'reference_correction'), statistic, L, error, se, ci_lo, ci_hi,
    resolved, used. Fit rows: order, order_se, t-interval (ci_lo, ci_hi), bootstrap interval
    (boot_lo, boot_hi), constant and the levels used; order is None when fewer than 3 levels are
    resolved.

    Args:
        weak: The samples of the weak errors.
        strong: The samples of the strong errors.
        problem: The reference problem they were drawn for.
        bootstrap: The bootstrap replicates of the order intervals.
        seed: The seed of the bootstrap weights.
        strong_from: The coarsest level of the strong fit.

    Returns:
        `(points, fits)`: the error points and the fitted orders, JSON-ready rows.
    """
    base = {"problem": problem.name}
    points: list[dict[str, Any]] = []
    fits: list[dict[str, Any]] = []
    runs = weak.ref_fine.shape[-1]
    ref = 2.0 * weak.ref_fine - weak.ref_half
    diff = weak.net - ref[None, None]
    boot = weighted_means(diff, poisson_weights(runs, bootstrap, seed))  # (B, laws, levels, stats)
    lv = np.array(weak.levels)
    for a, law in enumerate(weak.laws):
        for s, stat in enumerate(weak.stats):
            err = diff[a, :, s].mean(-1)
            se = diff[a, :, s].std(-1, ddof=1) / math.sqrt(runs)
            used = weak_levels_used(err, se)
            row = {**base, "law": law, "kind": "weak", "statistic": stat,
                   "label": problem.statistics[stat], "runs": runs}
            points += _point_rows(row, lv, err, se, used)
            fits.append({**row, **_fit_row(lv[used], err[used], boot[:, a, used, s])})
    for s, stat in enumerate(weak.stats):
        corr = weak.ref_fine[s] - weak.ref_half[s]
        points.append({**base, "law": "sde", "kind": "reference_correction", "statistic": stat,
                       "label": problem.statistics[stat], "runs": runs, "L": None,
                       "error": float(corr.mean()), "se": _se(corr),
                       "value": float(ref[s].mean()), "value_se": _se(ref[s])})
    sruns = strong.sq_err.shape[-1]
    boot_sq = weighted_means(strong.sq_err, poisson_weights(sruns, bootstrap, seed + 1))
    slv = np.array(strong.levels)
    used = slv >= strong_from
    for ti, frac in enumerate(strong.strong_at):
        t = frac * problem.T
        for a, law in enumerate(strong.laws):
            sq = strong.sq_err[ti, a]
            rms = np.sqrt(sq.mean(-1))
            # delta method: se(sqrt(m)) = se(m) / (2 sqrt(m))
            se = sq.std(-1, ddof=1) / math.sqrt(sruns) / (2 * np.maximum(rms, 1e-300))
            row = {**base, "law": law, "kind": "strong", "statistic": _strong_name(frac),
                   "label": f"rms token error at t = {t:g}", "t": t, "runs": sruns}
            points += _point_rows(row, slv, rms, se, used)
            fits.append({**row, **_fit_row(slv[used], rms[used],
                                           np.sqrt(boot_sq[:, ti, a, used]))})
    return points, fits


def _strong_name(frac: float) -> str:
    """Statistic key of the strong error at time `frac * T`: 'rms_token_error' at T."""
    return "rms_token_error" if frac == 1.0 else f"rms_token_error_{frac:g}T"


def _se(v: np.ndarray) -> float:
    return float(v.std(ddof=1) / math.sqrt(v.shape[-1]))


def weak_levels_used(err: np.ndarray, se: np.ndarray) -> np.ndarray:
    """Levels fitted: `|e_L| >= RESOLVE_Z se_L`, and finer than any resolved level of the other sign.

    Resolved above Monte Carlo noise, finer than any resolved level whose error has the other sign
    (pre-asymptotic coarse levels where the error changes sign are dropped).

    Args:
        err: The weak errors, one per level (coarse to fine).
        se: Their standard errors.

    Returns:
        A boolean mask of the levels to fit.
    """
    resolved = np.abs(err) >= RESOLVE_Z * se
    if not resolved.any():
        return resolved
    sign = np.sign(err[np.flatnonzero(resolved)[-1]])
    flips = np.flatnonzero(resolved & (np.sign(err) != sign))
    tail = np.arange(len(err)) > (flips[-1] if len(flips) else -1)
    return resolved & tail


def _point_rows(row: dict[str, Any], lv: np.ndarray, err: np.ndarray, se: np.ndarray,
                used: np.ndarray) -> list[dict[str, Any]]:
    out = []
    for k, L in enumerate(lv):
        lo, hi = _interval(float(err[k]), float(se[k]))
        out.append({**row, "L": int(L), "error": float(err[k]), "se": float(se[k]),
                    "ci_lo": lo, "ci_hi": hi,
                    "resolved": bool(abs(err[k]) >= RESOLVE_Z * se[k]), "used": bool(used[k])})
    return out


def _fit_row(lv: np.ndarray, err: np.ndarray, boot: np.ndarray) -> dict[str, Any]:
    if len(lv) < 3:
        return {"order": None, "order_se": None, "ci_lo": None, "ci_hi": None, "boot_lo": None,
                "boot_hi": None, "constant": None, "levels": [int(v) for v in lv]}
    f = fit_order(lv, err, boot)
    return {"order": f.order, "order_se": f.se, "ci_lo": f.ci_lo, "ci_hi": f.ci_hi,
            "boot_lo": f.boot_lo, "boot_hi": f.boot_hi, "constant": f.constant,
            "levels": list(f.levels)}


@dataclass
class ConvergenceResult:
    """Points and fits of every problem, with the settings that produced them."""

    settings: dict[str, Any]
    problems: list[dict[str, Any]]
    points: list[dict[str, Any]]
    fits: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the package header (kind, schema, version)."""
        return {**header(_KIND_CONV, **self.settings), "problems": self.problems,
                "points": self.points, "fits": self.fits}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "convergence data") -> ConvergenceResult:
        """Inverse of `to_dict`; a foreign or newer-schema document raises StoreError."""
        _check_meta(data, _KIND_CONV, where)
        skip = {"problems", "points", "fits"}
        return cls({k: v for k, v in data.items() if k not in skip}, data["problems"],
                   data["points"], data["fits"])

    def fit(self, problem: str, law: str, kind: str, statistic: str) -> dict[str, Any]:
        """The fit row for one curve (KeyError if absent)."""
        for f in self.fits:
            if (f["problem"], f["law"], f["kind"], f["statistic"]) == (problem, law, kind,
                                                                       statistic):
                return f
        raise KeyError((problem, law, kind, statistic))


@dataclass(frozen=True)
class _Size:
    """How much Monte Carlo: runs of the weak and strong passes per problem, reference grids.

    The weak pass uses `weak_ref * max(levels)` fine steps (Richardson makes its bias O(h^2));
    the strong pass `strong_ref * max(levels)` so that the reference path is much finer.
    """

    weak_runs: dict[str, int]
    strong_runs: dict[str, int]
    levels: tuple[int, ...] = _LEVELS
    weak_ref: int = 2
    strong_ref: int = 16
    strong_at: tuple[float, ...] = (0.25, 1.0)
    strong_from: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description."""
        return {"weak_runs": dict(self.weak_runs), "strong_runs": dict(self.strong_runs),
                "levels": list(self.levels), "weak_ref": self.weak_ref,
                "strong_ref": self.strong_ref, "strong_at": list(self.strong_at),
                "strong_from": self.strong_from}


_CONVERGENCE_SIZES: dict[str, _Size] = {
    "full": _Size({"two_tokens": 65536, "eight_tokens": 8192},
                 {"two_tokens": 1024, "eight_tokens": 512}, strong_from=32),
    "quick": _Size({"two_tokens": 32768, "eight_tokens": 4096},
                  {"two_tokens": 512, "eight_tokens": 512}, levels=(4, 8, 16, 32, 64, 128, 256),
                  strong_from=32),
    "tiny": _Size({"two_tokens": 512, "eight_tokens": 256}, {"two_tokens": 256, "eight_tokens": 256},
                 levels=(4, 8, 16, 32), strong_ref=8),
}

_Task = tuple[Problem, tuple[int, ...], int, int, int, tuple[str, ...], int, int,
             tuple[float, ...]]


def _task_key(args: _Task) -> str:
    """A stable digest of one chunk of work: its numbers depend on nothing else."""
    prob, *rest = args
    text = json.dumps([prob.to_dict(), *rest], sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _task(args: _Task) -> CoupledSamples:
    prob, lv, ref, runs, seed, laws, lo, hi, at = args
    return coupled_samples(prob, lv, ref, runs, seed, laws, lo, hi, at)


def _tasks(prob: Problem, lv: tuple[int, ...], ref: int, runs: int, seed: int,
           laws: tuple[str, ...], chunk: int, at: tuple[float, ...]) -> list[_Task]:
    return [(prob, lv, ref, runs, seed, laws, lo, min(lo + chunk, runs), at)
            for lo in range(0, runs, chunk)]


def run_convergence(
    size: _Size | str = "quick",
    problems: Sequence[str | Problem] = tuple(_PROBLEMS),
    seed: int = 0,
    laws: Sequence[str] = _LAWS,
    bootstrap: int = 400,
    map_fn: Callable[..., Any] = map,
    chunk: int = 8 * _RUN_BLOCK,
    progress: _Progress | None = None,
) -> ConvergenceResult:
    """The whole diagnostic: weak and strong passes for each problem, summarised and fitted.

    Work is cut into run chunks (`_Task`s, identified by `task_key`) and handed to `map_fn` (the
    builtin `map`, a process pool's `map`, or a caching map that keeps finished chunks); numbers
    depend only on `seed`: problem `k` uses seeds `derive_seed(seed, k, pass)`.
    `progress(runs)` is called as each chunk finishes.

    Args:
        size: 'tiny', 'quick', 'full' or a `Size` (levels, runs, reference depth).
        problems: Problem names (or `Problem` objects) to run.
        seed: Root seed.
        laws: The value-noise laws to compare.
        bootstrap: Bootstrap replicates for the order intervals (0: none).
        map_fn: A `map`-like function that runs the chunks.
        chunk: Runs per chunk.
        progress: Called with the number of runs of each finished chunk, or None.

    Returns:
        A `ConvergenceResult`: settings, problems, weak and strong error points and the fitted
        orders.
    """
    sz = _CONVERGENCE_SIZES[size] if isinstance(size, str) else size
    probs = [_PROBLEMS[p] if isinstance(p, str) else p for p in problems]
    lv, laws = tuple(sz.levels), tuple(laws)
    top = max(lv)
    chunk = max(_RUN_BLOCK, chunk // _RUN_BLOCK * _RUN_BLOCK)
    jobs: list[_Task] = []
    counts = []
    for k, prob in enumerate(probs):
        wr, sr = sz.weak_runs[prob.name], sz.strong_runs[prob.name]
        w = _tasks(prob, lv, sz.weak_ref * top, wr, derive_seed(seed, k, 0), laws, chunk, (1.0,))
        s = _tasks(prob, lv, sz.strong_ref * top, sr, derive_seed(seed, k, 1), laws, chunk,
                   tuple(sz.strong_at))
        jobs += w + s
        counts.append((len(w), len(s)))
    done = []
    for part in map_fn(_task, jobs):
        done.append(part)
        if progress is not None:
            progress(part.ref_fine.shape[-1])
    points, fits, meta = [], [], []
    i = 0
    for k, (prob, (nw, ns)) in enumerate(zip(probs, counts, strict=True)):
        weak, strong = _concat_samples(done[i:i + nw]), _concat_samples(done[i + nw:i + nw + ns])
        i += nw + ns
        pts, fts = summarise(weak, strong, prob, bootstrap, derive_seed(seed, k, 2),
                             sz.strong_from)
        points += pts
        fits += fts
        meta.append({**prob.to_dict(), "weak_runs": sz.weak_runs[prob.name],
                     "strong_runs": sz.strong_runs[prob.name],
                     "weak_seed": derive_seed(seed, k, 0), "strong_seed": derive_seed(seed, k, 1),
                     "weak_ref_steps": sz.weak_ref * top, "strong_ref_steps": sz.strong_ref * top})
    settings = {"size": sz.to_dict(), "seed": seed, "laws": list(laws), "bootstrap": bootstrap,
                "resolve_z": RESOLVE_Z, "interval_z": _LEVEL_Z,
                "weak_reference": "projected Euler SDE on the shared path, Richardson 2f(h)-f(2h)",
                "strong_reference": "projected Euler SDE on the shared path, finest grid"}
    return ConvergenceResult(settings, meta, points, fits)
