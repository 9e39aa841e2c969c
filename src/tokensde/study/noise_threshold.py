"""Independent token noise in the simulator against the many-token theory (docs/token-noise.md).

The theory (`tokensde.theory.token_noise`) gives the coupling `a / tau^2` at which the uniform
token law loses stability, `a` the scale of `M = a I` and `tau` each token's own noise. In the
simulator `a = ModelParams.mean_trace` (1 for `mean='identity'`) and `tau =
ModelParams.token_noise`, with the common noise off (`sigma = 0`): `critical_token_noise` turns the
critical coupling into the critical `token_noise`, and `stationary_order` / `_order_scan` measure the
order parameter `r = |(1/n) sum_i x_i|` at stationarity across it. `threshold_from_scan` and
`threshold_from_fluctuations` read the threshold off such scans from the ordered and the
disordered side. `mean_field_order` is the order parameter of the limit's ordered stationary
law, and `ordered_branch_end` finds where that branch ends: at `tau_c` for a continuous
transition, beyond it (a window with two stable laws, hysteresis) for a discontinuous one.

The layer step moves the threshold of a scheme (`theory.token_noise.step_threshold`): `step_error`
gives that relative shift at a step, `default_step` the largest step that keeps it under a
tolerance (1 % by default), and `step_plan` the scheme and step a run uses, with a warning
(`StepBiasWarning`) when a step given by hand breaks the rule. `stationary_order` reports the
shift beside its Monte Carlo error and can extrapolate over two steps (`extrapolate=True`).
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ..model.checks import _check_choice, _check_int, _check_real, _real_array
from ..model.params import ModelParams, ParameterError
from ..sim.options import Execution
from ..theory import token_noise as theory

__all__ = [
    "OrderEstimate", "StepBiasWarning", "critical_token_noise", "default_step", "mean_field_order",
    "nematic_order", "ordered_branch_end", "stationary_order", "step_error",
    "threshold_from_fluctuations", "threshold_from_scan",
]


def critical_token_noise(beta: float, d: int, attention: str = "usa",
                         mean_scale: float = 1.0) -> float:
    """The `token_noise` at which the uniform state of `M = a I` loses stability,
    `tau_c = sqrt(a / K_c)`, `K_c = theory.token_noise.critical_coupling(beta, d, attention)`:
    ordered (a degree-1 mode grows) for `token_noise < tau_c`, disordered above.

    Args:
        beta: attention strength, > 0.
        d: dimension of the ambient space, >= 2.
        attention: 'usa' or 'softmax'.
        mean_scale: `a` in `M = a I` (`mean='identity'`: 1), >= 0.

    Returns:
        `tau_c` (0 for `a = 0`: without drift no noise level orders the tokens).
    """
    a = _check_real("mean_scale", mean_scale, 0.0)
    return math.sqrt(a / _coupling(beta, d, attention))


def _coupling(beta: float, d: int, attention: str) -> float:
    """`K_c` (`theory.token_noise.critical_coupling`), refused by name where it underflows to 0
    (the USA coupling decays like `e^{-beta}`: beta above about 700)."""
    k = theory.critical_coupling(beta, d, attention)
    if k <= 0.0:
        raise ParameterError(f"beta = {beta:g} is too large for the {attention} threshold in "
                             f"float64 (its critical coupling underflows to 0); allowed: a beta "
                             f"whose coupling is positive (USA: beta below about 700)")
    return k

_STEP_TOL = 0.01  # the default bound on the step's relative shift of the threshold
_DT_MAX = 0.05  # the largest step a default takes
_SCHEMES = ("auto", "network", "sde")


class StepBiasWarning(UserWarning):
    """A layer step whose estimated bias on the threshold exceeds the tolerance."""


@functools.lru_cache(maxsize=256)
def _step_error(beta: float, d: int, dt: float, attention: str, scheme: str,
                mean_scale: float) -> float:
    tau_c = math.sqrt(mean_scale / _coupling(beta, d, attention))
    return theory.step_threshold(beta, d, dt, attention, scheme, mean_scale) / tau_c - 1.0


def step_error(beta: float, d: int, dt: float, attention: str = "usa",
               scheme: str = "network", mean_scale: float = 1.0) -> float:
    """The step's relative shift of the many-token threshold, `tau_c(dt) / tau_c - 1`, exact in
    `dt` (`theory.token_noise.step_threshold`); `theory.token_noise.step_threshold_shift` is its
    first-order part.

    Args:
        beta: attention strength, > 0.
        d: dimension, >= 2.
        dt: the layer step, > 0.
        attention: 'usa' or 'softmax'.
        scheme: 'network' or 'sde'.
        mean_scale: `a` in `M = a I`, > 0.

    Returns:
        The relative shift (positive: the scheme orders up to a larger noise than the limit).
    """
    beta = _check_real("beta", beta, 0.0, strict=True)
    dt = _check_real("dt", dt, 0.0, strict=True)
    a = _check_real("mean_scale", mean_scale, 0.0, strict=True)
    scheme = _check_choice("scheme", scheme, theory._SCHEMES)
    attention = _check_choice("attention", attention, theory.ATTENTIONS)
    return _step_error(beta, _check_int("d", d, 2), dt, attention, scheme, a)


def _step_bound(beta: float, d: int, dt: float, attention: str, scheme: str,
                mean_scale: float) -> float:
    """The step rule's measure of the bias: the larger of the exact shift and its first-order
    part, so that a cancellation between orders at a large step is not trusted."""
    first = theory.step_threshold_shift(beta, d, dt, attention, scheme, mean_scale)
    return max(abs(step_error(beta, d, dt, attention, scheme, mean_scale)), abs(first))


_LADDER_FLOOR = 1e-6  # the smallest step a rule takes


def _ladder(top: float) -> list[float]:
    """The steps `{5, 2, 1} x 10^k` at or below `top`, largest first, down to 1e-6 (none
    where `top` is below it)."""
    out: list[float] = []
    if not math.isfinite(top) or top < _LADDER_FLOOR:
        return out
    k = math.floor(math.log10(top)) + 1
    while k > -7:
        out += [m * 10.0**k for m in (5, 2, 1) if m * 10.0**k <= top * (1 + 1e-12)]
        k -= 1
    return out


def default_step(beta: float, d: int, attention: str = "usa", scheme: str = "network",
                 tol: float = _STEP_TOL, dt_max: float = _DT_MAX, mean_scale: float = 1.0) -> float:
    """The largest step of the form `{1, 2, 5} x 10^k`, at most `dt_max`, at which the scheme's
    threshold lies within `tol` of the limit's: `|step_error| <= tol` and its first-order part
    `|kappa dt| <= tol` (`theory.token_noise._step_shift_coefficient`).

    Args:
        beta: attention strength, > 0.
        d: dimension, >= 2.
        attention: 'usa' or 'softmax'.
        scheme: 'network' or 'sde'.
        tol: the bound on the relative shift, in (0, 1).
        dt_max: the largest step returned, > 0.
        mean_scale: `a` in `M = a I`, > 0.

    Returns:
        The step (1e-6 at the least).
    """
    tol = _check_real("tol", tol, 0.0, strict=True)
    if tol >= 1.0:
        raise ParameterError(f"tol must be a number in (0, 1) (a relative shift); got {tol!r}")
    dt_max = _check_real("dt_max", dt_max, 0.0, strict=True)
    kappa = abs(theory._step_shift_coefficient(beta, d, attention, scheme, mean_scale))
    top = dt_max if kappa * dt_max <= tol else tol / kappa
    steps = _ladder(top)
    if not steps:
        raise ParameterError(f"no step of at least {_LADDER_FLOOR:g} keeps the {scheme} scheme's "
                             f"threshold within {tol:g} of the limit at beta = {beta:g}, d = {d} "
                             f"(the step rule needs dt <= {top:.3g}); allowed: a smaller beta, "
                             f"a smaller mean_scale (here {mean_scale:g}) or a larger tol")
    for dt in steps:
        if _step_bound(beta, d, dt, attention, scheme, mean_scale) <= tol:
            return dt
    return steps[-1]


@dataclass(frozen=True)
class _StepPlan:
    """The scheme and step of a run and the step's estimated bias: `shift` is `step_error` at
    `dt` (the relative shift of the threshold), `chosen` whether `dt` came from the rule,
    `advice` the step that meets the rule for each scheme, and `warning` a sentence when `dt`
    breaks the rule ('' otherwise)."""

    scheme: str
    dt: float
    shift: float
    tol: float
    chosen: bool
    advice: dict[str, float]
    warning: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (JSON-ready).

        Returns:
            `{field: value}`.
        """
        return asdict(self)


def _step_plan(beta: float, d: int, attention: str = "usa", scheme: str = "auto",
              dt: float | None = None, tol: float = _STEP_TOL, dt_max: float = _DT_MAX,
              mean_scale: float = 1.0, token_noise: float | None = None) -> _StepPlan:
    """The scheme and step of a token-noise run. `dt=None` takes the `default_step` of the
    scheme; for the SDE scheme it is also held to the simulator's bound on the Euler step,
    `tau^2 (d - 1) dt <= sim.sde._STEP_WARN`, at the run's largest `token_noise`.
    `scheme='auto'` takes the scheme with the larger default step (the smaller step bias; the
    network on a tie), or, at a given `dt`, the one with the smaller bias there. A given `dt`
    whose bias exceeds `tol` gets a warning that names the shift and the steps that meet the
    rule (the rule also bounds the first-order part `|kappa dt|`, see `default_step`).

    Args:
        beta: attention strength, > 0.
        d: dimension, >= 2.
        attention: 'usa' or 'softmax'.
        scheme: 'auto', 'network' or 'sde'.
        dt: the layer step (> 0), or None for the rule's.
        tol: the bound on the relative shift, in (0, 1).
        dt_max: the largest step the rule takes.
        mean_scale: `a` in `M = a I`, > 0.
        token_noise: the largest `tau` of the run (>= 0), or None (no Euler-step bound).

    Returns:
        A `StepPlan`.
    """
    from ..sim.sde import _STEP_WARN

    scheme = _check_choice("scheme", scheme, _SCHEMES)
    d = _check_int("d", d, 2)
    sde_max = dt_max
    if token_noise is not None and _check_real("token_noise", token_noise, 0.0) > 0:
        sde_max = min(dt_max, _STEP_WARN / token_noise / token_noise / (d - 1))
        if sde_max < _LADDER_FLOOR:
            raise ParameterError(f"token_noise (--taus / --ratios) = {token_noise:g} needs an SDE "
                                 f"step below {_LADDER_FLOOR:g} (tau^2 (d - 1) dt <= {_STEP_WARN:g});"
                                 f" allowed: tau <= "
                                 f"{math.sqrt(_STEP_WARN / (d - 1) / _LADDER_FLOOR):.4g}")
    advice = {"network": default_step(beta, d, attention, "network", tol, dt_max, mean_scale),
              "sde": default_step(beta, d, attention, "sde", tol, sde_max, mean_scale)}
    if dt is not None:
        dt = _check_real("dt", dt, 0.0, strict=True)
    if scheme == "auto":
        if dt is None:
            scheme = "sde" if advice["sde"] > advice["network"] else "network"
        else:
            bias = {s: _step_bound(beta, d, dt, attention, s, mean_scale) for s in advice}
            if dt > sde_max:
                bias["sde"] = math.inf
            scheme = "sde" if bias["sde"] < bias["network"] else "network"
    chosen = dt is None
    step = advice[scheme] if dt is None else dt
    shift = step_error(beta, d, step, attention, scheme, mean_scale)
    first = theory.step_threshold_shift(beta, d, step, attention, scheme, mean_scale)
    warning = ""
    if max(abs(shift), abs(first)) > tol:
        warning = (f"at dt = {step:g} the {scheme} scheme's many-token threshold sits "
                   f"{100 * shift:+.3g} % off tau_c (the step's bias; first order "
                   f"{100 * first:+.3g} %), beyond the {100 * tol:g} % rule; dt <= "
                   f"{advice[scheme]:g} ({scheme}) or "
                   + " or ".join(f"dt <= {v:g} ({k})" for k, v in advice.items() if k != scheme)
                   + " meets it")
    return _StepPlan(scheme, step, shift, tol, chosen, advice, warning)


def _order_parameter(x: np.ndarray) -> np.ndarray:
    """`r = |(1/n) sum_i x_i|` over the token axis (-2) of unit tokens `x` `(..., n, d)`.

    Args:
        x: unit tokens, `(..., n, d)`.

    Returns:
        `r`, shape `(...)`.
    """
    return np.linalg.norm(_unit_tokens(x).mean(-2), axis=-1)


def _unit_tokens(x: np.ndarray) -> np.ndarray:
    """`x` as a finite float array of at least two axes `(..., n, d)`, else ValueError."""
    x = _real_array("x", x)
    if x.ndim < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"x must be finite unit tokens (..., n, d); got shape {x.shape}")
    return x


def nematic_order(x: np.ndarray) -> np.ndarray:
    """The degree-2 order parameter `q = sqrt(d / (d - 1)) |(1/n) sum_i x_i x_i^T - I/d|`
    (Frobenius norm) over the token axis (-2) of unit tokens `(..., n, d)`: 1 for one cluster
    or two antipodal ones, `n E q^2 = 1` for i.i.d. uniform tokens.

    Args:
        x: unit tokens, `(..., n, d)`.

    Returns:
        `q`, shape `(...)`.
    """
    x = _unit_tokens(x)
    d = x.shape[-1]
    if d < 2:
        raise ValueError(f"x must have d >= 2 coordinates; got shape {x.shape}")
    m = np.einsum("...ni,...nj->...ij", x, x) / x.shape[-2] - np.eye(d) / d
    return np.sqrt(d / (d - 1)) * np.linalg.norm(m, axis=(-2, -1))


@dataclass(frozen=True)
class OrderEstimate:
    """The stationary order parameter of one `token_noise`: `r` the mean over runs of each run's
    time average of `|(1/n) sum_i x_i|` over depth times `[burn, T]`, `se` its standard error
    over runs (the runs are independent; a run's time average is one sample), `r2` the same
    average of `r^2` and `r2_se` its standard error, `wall_s` the simulation's wall time,
    `run_r` each run's time average of `r` (a run that switched branches shows here), and
    `drift` / `drift_se` the mean over runs of (average over the second half of `[burn, T]`
    minus average over the first half) and its standard error: a run still relaxing drifts.
    `q`, `q_se` and `q2` are the same for the degree-2 order parameter (`nematic_order`), which
    sees two antipodal clusters that `r` reads as disorder. `step_shift` is the step's relative
    shift of the many-token threshold (`step_error`; after extrapolation, the residual
    `2 shift(dt/2) - shift(dt)`), the step-error estimate beside the Monte Carlo `se`;
    `extrapolated` marks a Richardson estimate `2 X(dt/2) - X(dt)` over steps `dt` and `dt/2`."""

    token_noise: float
    n: int
    d: int
    beta: float
    attention: str
    runs: int
    T: float
    burn: float
    dt: float
    scheme: str
    start: str
    r: float
    se: float
    r2: float
    r2_se: float
    wall_s: float
    attention_eval: str
    run_r: tuple[float, ...] = ()
    drift: float = math.nan
    drift_se: float = math.nan
    q: float = math.nan
    q_se: float = math.nan
    q2: float = math.nan
    step_shift: float = math.nan
    extrapolated: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (JSON-ready).

        Returns:
            `{field: value}`.
        """
        return asdict(self)


def stationary_order(token_noise: float, n: int, d: int = 2, beta: float = 1.0,
                     attention: str = "usa", runs: int = 4, T: float = 60.0,
                     burn: float = 30.0, dt: float | None = None, scheme: str = "auto",
                     seed: int = 0, samples: int = 61, start: str = "uniform",
                     extrapolate: bool = False, step_tol: float | None = _STEP_TOL,
                     execution: Execution = Execution()) -> OrderEstimate:
    """Time-averaged `r = |(1/n) sum_i x_i|` (and the degree-2 `q`) over `[burn, T]` with
    `mean='identity'`, no common noise (`sigma = 0`) and independent token noise `token_noise`,
    from i.i.d. uniform tokens (`start='uniform'`) or from every token at `e_1`
    (`start='ordered'`), with the step's bias on the threshold beside the Monte Carlo error.

    Args:
        token_noise: `tau`, >= 0.
        n: tokens, >= 1.
        d: dimension, >= 2.
        beta: attention strength, > 0.
        attention: 'usa' or 'softmax'.
        runs: independent runs, >= 2 (the standard error is over runs).
        T: horizon in depth time, > burn.
        burn: depth time discarded before averaging, >= 0.
        dt: the layer step, or None for `step_plan`'s (threshold within `step_tol`).
        scheme: 'auto' (`step_plan`: the scheme with the smaller step bias), 'network' or 'sde'.
        seed: the root seed.
        samples: checkpoints, evenly spaced over `[0, T]` (those at times >= burn are averaged).
        start: 'uniform' or 'ordered'.
        extrapolate: also run at `dt / 2` (same seed) and return `2 X(dt/2) - X(dt)`.
        step_tol: the rule on the step's relative shift of the threshold (a given `dt` that
            breaks it warns, `StepBiasWarning`); None: no rule (`dt` must be given, `scheme`
            not 'auto').
        execution: how the runs are computed, as `simulate` (`attention_eval='auto'`: the O(n)
            expansion at d = 2, 3 for large n).

    Returns:
        An `OrderEstimate`.
    """
    if step_tol is None:
        if dt is None or scheme == "auto":
            raise ParameterError("step_tol=None needs dt and a scheme ('network' or 'sde')")
        scheme = _check_choice("scheme", scheme, theory._SCHEMES)
    else:
        plan = _step_plan(beta, d, attention, scheme, dt, step_tol, token_noise=token_noise)
        if plan.warning:
            warnings.warn(plan.warning, StepBiasWarning, stacklevel=2)
        dt, scheme = plan.dt, plan.scheme
    kw: dict[str, Any] = dict(n=n, d=d, beta=beta, attention=attention, runs=runs, T=T,
                              burn=burn, scheme=scheme, seed=seed, samples=samples,
                              start=start, execution=execution)
    one = _stationary_order(token_noise, dt=dt, **kw)
    if not extrapolate:
        return one
    half = _stationary_order(token_noise, dt=dt / 2, **kw)
    return _richardson(one, half, beta, d, attention, scheme)


def _richardson(one: OrderEstimate, half: OrderEstimate, beta: float, d: int, attention: str,
                scheme: str) -> OrderEstimate:
    """`2 X(dt/2) - X(dt)` of two estimates, standard errors combined as independent (the two
    steps draw different noise; a positive correlation would only make them smaller)."""

    def ext(a: float, b: float) -> float:
        return 2 * b - a

    def se(a: float, b: float) -> float:
        return math.sqrt(4 * b * b + a * a)

    shift = ext(step_error(beta, d, one.dt, attention, scheme),
                step_error(beta, d, half.dt, attention, scheme))
    return replace(
        half, dt=one.dt, r=ext(one.r, half.r), se=se(one.se, half.se), r2=ext(one.r2, half.r2),
        r2_se=se(one.r2_se, half.r2_se), q=ext(one.q, half.q), q_se=se(one.q_se, half.q_se),
        q2=ext(one.q2, half.q2), wall_s=one.wall_s + half.wall_s,
        run_r=tuple(ext(a, b) for a, b in zip(one.run_r, half.run_r, strict=True)),
        drift=ext(one.drift, half.drift), drift_se=se(one.drift_se, half.drift_se),
        step_shift=shift, extrapolated=True)


def _stationary_order(token_noise: float, n: int, d: int, beta: float, attention: str,
                      runs: int, T: float, burn: float, dt: float, scheme: str, seed: int,
                      samples: int, start: str, execution: Execution) -> OrderEstimate:
    """`stationary_order` at one step, without the step rule."""
    from ..model.params import TimeGrid
    from ..sim.options import InitialState, Recording
    from ..sim.simulate import simulate

    runs = _check_int("runs", runs, 2)
    burn = _check_real("burn", burn, 0.0)
    T = _check_real("T", T, burn, strict=True)
    attention = _check_choice("attention", attention, theory.ATTENTIONS)
    start = _check_choice("start", start, ("uniform", "ordered"))
    p = ModelParams(n=n, d=d, beta=beta, attention=attention, mean="identity", sigma=0.0,
                    token_noise=token_noise)
    t0 = time.perf_counter()
    init: str | np.ndarray = "uniform"
    if start == "ordered":
        init = np.zeros((p.n, p.d))
        init[:, 0] = 1.0
    res = simulate(p, TimeGrid.make(T=T, dt=dt), runs=runs, seed=seed, scheme=scheme,
                   initial=InitialState(init),
                   recording=Recording(_check_int("samples", samples, 2), ("tokens",)),
                   execution=execution)
    wall = time.perf_counter() - t0
    assert res.tokens is not None
    times = np.asarray(res.checkpoints) * res.grid.dt
    late = times >= burn
    r = _order_parameter(res.tokens[:, late])  # (runs, checkpoints)
    q = nematic_order(res.tokens[:, late])
    per_run, per_run2 = r.mean(1), (r**2).mean(1)
    q_run = q.mean(1)
    half = r.shape[1] // 2
    moved = r[:, r.shape[1] - half:].mean(1) - r[:, :half].mean(1) if half else np.zeros(runs)
    return OrderEstimate(
        token_noise=p.token_noise, n=p.n, d=p.d, beta=p.beta, attention=attention, runs=runs,
        T=res.grid.T, burn=burn, dt=res.grid.dt, scheme=scheme, start=start,
        r=float(per_run.mean()),
        se=float(per_run.std(ddof=1) / math.sqrt(runs)), r2=float(per_run2.mean()),
        r2_se=float(per_run2.std(ddof=1) / math.sqrt(runs)), wall_s=wall,
        attention_eval=str(res.extra.get("attention_eval", "")),
        run_r=tuple(float(v) for v in per_run), drift=float(moved.mean()),
        drift_se=float(moved.std(ddof=1) / math.sqrt(runs)), q=float(q_run.mean()),
        q_se=float(q_run.std(ddof=1) / math.sqrt(runs)), q2=float((q**2).mean(1).mean()),
        step_shift=step_error(p.beta, p.d, res.grid.dt, attention, scheme))


def _order_scan(ratios: Sequence[float], ns: Sequence[int], d: int = 2, beta: float = 1.0,
               attention: str = "usa", **kw: Any) -> list[OrderEstimate]:
    """`stationary_order` at `token_noise = ratio * critical_token_noise(beta, d, attention)`
    for every ratio and n (other keywords go to `stationary_order`).

    Args:
        ratios: `token_noise / tau_c`, each > 0.
        ns: numbers of tokens.
        d: dimension, >= 2.
        beta: attention strength, > 0.
        attention: 'usa' or 'softmax'.
        **kw: passed on to `stationary_order`.

    Returns:
        One `OrderEstimate` per (n, ratio), n outer.
    """
    tau_c = critical_token_noise(beta, d, attention)
    return [stationary_order(_check_real("ratio", q, 0.0, strict=True) * tau_c, n, d, beta,
                             attention, **kw) for n in ns for q in ratios]


def _fit_quantile(rows: Sequence[OrderEstimate], level: float) -> float:
    """The two-sided `level` quantile of Student's t for a line fitted through `rows`: the
    weights come from standard errors over `runs` (runs - 1 degrees of freedom) and the scale
    from `len(rows) - 2` residual degrees of freedom when there are any; the smaller count is
    taken."""
    from scipy import stats

    level = _check_real("level", level, 0.0, strict=True)
    if level >= 1.0:
        raise ValueError(f"level must be a number in (0, 1); got {level!r}")
    dof = min(e.runs for e in rows) - 1
    if len(rows) > 2:
        dof = min(dof, len(rows) - 2)
    return float(stats.t.ppf((1 + level) / 2, max(dof, 1)))


def _line_fit(x: np.ndarray, y: np.ndarray, se: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Weighted line `y = b0 + b1 x` (weights `1/se^2`), with its covariance scaled by the
    residual variance when that exceeds 1 (only with more than 2 points)."""
    w = 1 / np.maximum(se, 1e-12) ** 2
    a = np.stack([np.ones_like(x), x], 1)
    cov = np.linalg.inv(a.T @ (a * w[:, None]))
    b0, b1 = cov @ (a.T @ (w * y))
    if len(x) > 2:
        cov = cov * max(float(np.sum(w * (y - b0 - b1 * x) ** 2)) / (len(x) - 2), 1.0)
    return float(b0), float(b1), cov


def threshold_from_scan(rows: Sequence[OrderEstimate], r2_max: float = 0.55,
                        level: float = 0.95) -> tuple[float, float, float]:
    """A mean-field reading of the threshold from the rows of one `n`: near a continuous
    transition `r^2 ~ c (tau_c^2 - tau^2)`; fit `r^2` (the rows' `r2`, weighted by `1/r2_se^2`)
    linearly in `tau^2` over the ordered rows near the threshold (`4 / n < r2 < r2_max`: well
    above the disordered floor of order `1/n`, and below the curved part far from it) and
    return `(tau_c, low, high)`, the zero of the fit and a `level` interval (delta method, a t
    quantile with the fit's degrees of freedom, `_fit_quantile`). NaNs when fewer than 2 rows
    qualify.

    Args:
        rows: `OrderEstimate`s of one `n` and several `token_noise`.
        r2_max: the largest `r2` of a row used.
        level: the interval's coverage, in (0, 1).

    Returns:
        `(estimate, low, high)`.
    """
    ordered = [e for e in rows if 4.0 / e.n < e.r2 < r2_max]
    if len(ordered) < 2:
        return math.nan, math.nan, math.nan
    t2 = np.array([e.token_noise**2 for e in ordered])
    b0, b1, cov = _line_fit(t2, np.array([e.r2 for e in ordered]),
                            np.array([e.r2_se for e in ordered]))
    z2 = -b0 / b1  # tau_c^2
    g = np.array([-1.0 / b1, b0 / b1**2])  # gradient of -b0/b1
    half = _fit_quantile(ordered, level) * math.sqrt(float(g @ cov @ g))
    return (math.sqrt(max(z2, 0.0)), math.sqrt(max(z2 - half, 0.0)),
            math.sqrt(max(z2 + half, 0.0)))


def threshold_from_fluctuations(rows: Sequence[OrderEstimate], level: float = 0.95
                                ) -> tuple[float, float, float]:
    """A reading of the threshold from the disordered side: linear fluctuation theory gives
    `1 / (n E r^2) = 1 - tau_c^2 / tau^2` above a continuous threshold; fit the line
    `1 / (n E r^2) = A + B / tau^2` (weighted by the rows' `r2_se`) over the rows given (all
    above the threshold, each of its own `n`) and return `(tau_c, low, high)`, its zero with a
    `level` interval (delta method, a t quantile with the fit's degrees of freedom,
    `_fit_quantile`; the covariance scaled by the residual variance when it exceeds 1). NaNs
    when fewer than 2 rows are given.

    Args:
        rows: `OrderEstimate`s in the disordered phase.
        level: the interval's coverage, in (0, 1).

    Returns:
        `(estimate, low, high)`.
    """
    if len(rows) < 2:
        return math.nan, math.nan, math.nan
    b0, b1, cov = _line_fit(np.array([1 / e.token_noise**2 for e in rows]),
                            np.array([1 / (e.n * e.r2) for e in rows]),
                            np.array([e.r2_se / (e.n * e.r2**2) for e in rows]))
    t2 = -b1 / b0  # tau_c^2 = 1 / u*, u* = -b0 / b1
    g = np.array([b1 / b0**2, -1 / b0])
    half = _fit_quantile(rows, level) * math.sqrt(float(g @ cov @ g))
    return (math.sqrt(max(t2, 0.0)), math.sqrt(max(t2 - half, 0.0)),
            math.sqrt(max(t2 + half, 0.0)))


def mean_field_order(token_noise: float, beta: float, d: int = 2, attention: str = "usa",
                     mean_scale: float = 1.0, degrees: int = 48, nodes: int = 400,
                     tol: float = 1e-12, max_iter: int = 20000) -> float:
    """The order parameter `r = |int x rho(dx)|` of the ordered stationary law of the many-token
    limit, `rho ∝ exp(kappa (K rho)(x))` (USA) or `(K rho)(x)^kappa` (softmax), `kappa = 2 a /
    (tau^2 beta)`, `K` the kernel `e^{beta <x, z>}` (0 when only the uniform law is stationary).

    The attention drift is a gradient on the sphere, `P_x y = grad (K rho) / beta` (USA) or
    `grad log (K rho) / beta` (softmax), so the stationary laws are these Gibbs laws. An axially
    symmetric density `f(t)`, `t = <x, e>`, is expanded in the Gegenbauer polynomials `G_l`
    (`G_l(1) = 1`; Chebyshev at d = 2), on which `K` acts by `c_l = mode_coefficient(beta, d,
    'usa', l)`; the fixed point is iterated (damped) from a concentrated start.

    Args:
        token_noise: `tau`, > 0.
        beta: attention strength, > 0.
        d: dimension, >= 2.
        attention: 'usa' or 'softmax'.
        mean_scale: `a` in `M = a I`, >= 0.
        degrees: highest degree kept.
        nodes: Gauss-Jacobi nodes in `t`.
        tol: stop when `r` moves by less than this in an iteration.
        max_iter: most iterations.

    Returns:
        `r` of the fixed point reached (below about 1e-6 reported as 0).
    """
    from scipy import special

    tau = _check_real("token_noise", token_noise, 0.0, strict=True)
    beta = _check_real("beta", beta, 0.0, strict=True)
    d = _check_int("d", d, 2)
    attention = _check_choice("attention", attention, theory.ATTENTIONS)
    a = _check_real("mean_scale", mean_scale, 0.0)
    degrees, nodes = _check_int("degrees", degrees, 1), _check_int("nodes", nodes, 1)
    tol, max_iter = _check_real("tol", tol, 0.0, strict=True), _check_int("max_iter", max_iter, 1)
    alpha = (d - 3) / 2  # weight (1 - t^2)^alpha
    t, w = special.roots_jacobi(nodes, alpha, alpha)
    w = w / w.sum()
    ls = np.arange(degrees + 1)
    if d == 2:
        g = np.stack([special.eval_chebyt(k, t) for k in ls])
    else:
        lam = (d - 2) / 2
        g = np.stack([special.eval_gegenbauer(k, lam, t) / special.eval_gegenbauer(k, lam, 1.0)
                      for k in ls])
    norms = (g**2 * w).sum(1)
    c = np.array([theory._mode_coefficient(beta, d, "usa", int(k)) for k in ls])
    kappa = 2 * a / (tau**2 * beta)
    f = np.exp(4.0 * t)
    f /= (f * w).sum()
    r_old = math.inf
    for _ in range(max_iter):
        coef = (g * (f * w)).sum(1) / norms  # f = sum_l coef_l G_l
        k_rho = (coef * c) @ g  # (K rho)(t) with rho = f dsigma
        if attention == "usa":
            e = kappa * k_rho
            new = np.exp(e - e.max())
        else:
            new = np.exp(kappa * (np.log(k_rho) - np.log(k_rho.max())))
        new /= (new * w).sum()
        f = 0.5 * f + 0.5 * new
        r = float((t * f * w).sum())
        if abs(r - r_old) < tol:
            break
        r_old = r
    return r if r > 1e-6 else 0.0


def ordered_branch_end(beta: float, d: int = 2, attention: str = "usa", hi: float = 1.6,
                       tol: float = 1e-3) -> float:
    """`tau_s / tau_c`: the largest `token_noise`, over the linear threshold `tau_c`, at which the
    many-token limit still has an ordered stationary law (`mean_field_order > 0`), by bisection
    on `[1, hi]`. 1 when the ordered branch ends at the threshold (a continuous transition);
    above 1 the limit has both branches on `(tau_c, tau_s)` (a discontinuous one).

    Args:
        beta: attention strength, > 0.
        d: dimension, >= 2.
        attention: 'usa' or 'softmax'.
        hi: the top of the bracket (returned if the branch reaches it).
        tol: the bracket's width at the end, relative.

    Returns:
        `tau_s / tau_c`, to within `tol`.
    """
    hi, tol = _check_real("hi", hi, 1.0, strict=True), _check_real("tol", tol, 0.0, strict=True)
    if tol >= 1.0:
        raise ValueError(f"tol must be a number in (0, 1) (a relative width); got {tol!r}")
    tau_c = critical_token_noise(beta, d, attention)
    if mean_field_order(tau_c * (1 + tol), beta, d, attention) == 0.0:
        return 1.0
    lo = 1 + tol
    while hi - lo > tol:
        m = (lo + hi) / 2
        lo, hi = (m, hi) if mean_field_order(m * tau_c, beta, d, attention) > 0 else (lo, m)
    return (lo + hi) / 2


def _order_params(token_noise: float, n: int, d: int = 2, beta: float = 1.0,
                 attention: str = "usa") -> ModelParams:
    """The model of `stationary_order`: `M = I`, `sigma = 0`, token noise `tau`.

    Args:
        token_noise: `tau`, >= 0.
        n: tokens, >= 1.
        d: dimension, >= 2.
        beta: attention strength, > 0.
        attention: 'usa' or 'softmax'.

    Returns:
        The `ModelParams`.
    """
    attention = _check_choice("attention", attention, theory.ATTENTIONS)
    return ModelParams(n=n, d=d, beta=beta, attention=attention, mean="identity", sigma=0.0,
                       token_noise=token_noise)


def _order_budget(token_noise: float, n: int, d: int = 2, beta: float = 1.0,
                 attention: str = "usa", runs: int = 4, T: float = 60.0, dt: float = 0.05,
                 samples: int = 61, count: int = 1) -> Any:
    """Memory and work of `count` calls of `stationary_order` with these sizes: one call's
    `sim.simulate.simulation_budget`, its work and layer steps times `count` (the calls run one
    after another, so the memory is one call's).

    Args:
        token_noise: `tau` of the calls (the cost does not depend on it), >= 0.
        n: tokens, >= 1.
        d: dimension, >= 2.
        beta: attention strength, > 0.
        attention: 'usa' or 'softmax'.
        runs: independent runs per call.
        T: horizon in depth time.
        dt: the layer step.
        samples: checkpoints per call.
        count: number of calls (token-noise values).

    Returns:
        A `sim.budget.Budget`.
    """
    from dataclasses import replace

    from ..model.params import TimeGrid
    from ..sim.options import Recording
    from ..sim.simulate import simulation_budget

    count = _check_int("count", count, 1)
    p = _order_params(token_noise, n, d, beta, attention)
    b = simulation_budget(p, TimeGrid.make(T=T, dt=dt), runs,
                          recording=Recording(samples, ("tokens",)))
    return replace(b, what=f"{count} stationary run{'s' * (count > 1)}", work=b.work * count,
                   steps=b.steps * count, longer=("runs", "T", "n", "taus"))


def _theory_summary(beta: float, d: int = 2, attention: str = "usa", mean_scale: float = 1.0,
                   branch: bool = True, dt: float | None = None,
                   tol: float = _STEP_TOL) -> dict[str, Any]:
    """The theory's numbers at one `(beta, d, attention)`: the critical coupling
    `K_c = a / tau_c^2`, `tau_c = sqrt(a / K_c)`, `beta_*(d)` (USA only: continuous transition
    for `beta <= beta_*`; softmax has none), the end `tau_s / tau_c` of the limit's ordered
    branch (`ordered_branch_end`, 1 for a continuous transition) and the layer steps that keep
    each scheme's threshold within `tol` (`default_step`), with the shift at `dt` if given.

    Args:
        beta: attention strength, > 0.
        d: dimension, >= 2.
        attention: 'usa' or 'softmax'.
        mean_scale: `a` in `M = a I`, > 0.
        branch: also compute `ordered_branch_end` (a fixed-point computation, about a second).
        dt: a layer step (> 0) whose shift of the threshold to report, or None.
        tol: the step rule's bound on the relative shift.

    Returns:
        A dict with `beta`, `d`, `attention`, `mean_scale`, `K_c`, `tau_c`, `beta_star` (None
        for softmax), `continuous` (USA: `beta <= beta_*`; softmax: the branch ends at
        `tau_c`, None without `branch`), `branch_end` (None without `branch`), `steps`
        (`{scheme: dt}`), `tol` and `shifts` (`{scheme: {"exact", "first_order"}}` at `dt`,
        None without it).
    """
    a = _check_real("mean_scale", mean_scale, 0.0, strict=True)
    k_c = theory.critical_coupling(beta, d, attention)
    attention = _check_choice("attention", attention, theory.ATTENTIONS)
    end = ordered_branch_end(beta, d, attention) if branch else None
    b_star = theory.beta_star(d) if attention == "usa" else None
    if attention == "usa":
        continuous: bool | None = beta <= theory.beta_star(d)
    else:
        continuous = None if end is None else end == 1.0
    steps = {s: default_step(beta, d, attention, s, tol, mean_scale=a) for s in theory._SCHEMES}
    shifts = None
    if dt is not None:
        dt = _check_real("dt", dt, 0.0, strict=True)
        shifts = {s: {"exact": step_error(beta, d, dt, attention, s, a),
                      "first_order": theory.step_threshold_shift(beta, d, dt, attention, s, a)}
                  for s in theory._SCHEMES}
    return {"beta": float(beta), "d": int(d), "attention": attention, "mean_scale": a,
            "K_c": k_c, "tau_c": math.sqrt(a / k_c), "beta_star": b_star,
            "continuous": continuous, "branch_end": end, "steps": steps, "tol": tol,
            "dt": dt, "shifts": shifts}


def _resolve_taus(taus: Sequence[float] | None, ratios: Sequence[float] | None, beta: float,
                 d: int = 2, attention: str = "usa") -> list[float]:
    """The token-noise values of a scan given either directly (`taus`, each >= 0) or as ratios
    to the threshold (`tau = ratio * tau_c(beta, d, attention)`, each > 0); exactly one of the
    two.

    Args:
        taus: token-noise values, or None.
        ratios: `tau / tau_c` values, or None.
        beta: attention strength, > 0.
        d: dimension, >= 2.
        attention: 'usa' or 'softmax'.

    Returns:
        The token-noise values, in the order given.
    """
    if (taus is None) == (ratios is None):
        raise ParameterError("give exactly one of taus (token noise, >= 0) and ratios "
                             "(tau / tau_c, > 0)")
    if taus is not None:
        out = [_check_real("taus", t, 0.0) for t in taus]
        if not out:
            raise ParameterError("taus must name at least one value (>= 0); got none")
        return out
    assert ratios is not None
    if not list(ratios):
        raise ParameterError("ratios must name at least one value (> 0); got none")
    tau_c = critical_token_noise(beta, d, attention)
    return [_check_real("ratios", q, 0.0, strict=True) * tau_c for q in ratios]
