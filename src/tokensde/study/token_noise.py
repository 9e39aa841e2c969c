"""Independent token noise in the simulator against the many-token theory (docs/token-noise.md).

The theory (`tokensde.theory.token_noise`) gives the coupling `a / tau^2` at which the uniform
token law loses stability, `a` the scale of `M = a I` and `tau` each token's own noise. In the
simulator `a = ModelParams.mean_trace` (1 for `mean='identity'`) and `tau =
ModelParams.token_noise`, with the common noise off (`sigma = 0`): `critical_token_noise` turns the
critical coupling into the critical `token_noise`, and `stationary_order` / `order_scan` measure the
order parameter `r = |(1/n) sum_i x_i|` at stationarity across it. `threshold_from_scan` and
`threshold_from_fluctuations` read the threshold off such scans from the ordered and the
disordered side. `mean_field_order` is the order parameter of the limit's ordered stationary
law, and `ordered_branch_end` finds where that branch ends: at `tau_c` for a continuous
transition, beyond it (a window with two stable laws, hysteresis) for a discontinuous one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..model.checks import check_choice, check_int, check_real, real_array
from ..model.params import ModelParams, ParameterError
from ..theory import token_noise as theory


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
    a = check_real("mean_scale", mean_scale, 0.0)
    return math.sqrt(a / theory.critical_coupling(beta, d, attention))


def order_parameter(x: np.ndarray) -> np.ndarray:
    """`r = |(1/n) sum_i x_i|` over the token axis (-2) of unit tokens `x` `(..., n, d)`.

    Args:
        x: unit tokens, `(..., n, d)`.

    Returns:
        `r`, shape `(...)`.
    """
    x = real_array("x", x)
    if x.ndim < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"x must be finite unit tokens (..., n, d); got shape {x.shape}")
    return np.linalg.norm(x.mean(-2), axis=-1)


@dataclass(frozen=True)
class OrderEstimate:
    """The stationary order parameter of one `token_noise`: `r` the mean over runs of each run's
    time average of `|(1/n) sum_i x_i|` over depth times `[burn, T]`, `se` its standard error
    over runs (the runs are independent; a run's time average is one sample), `r2` the same
    average of `r^2` and `r2_se` its standard error, `wall_s` the simulation's wall time,
    `run_r` each run's time average of `r` (a run that switched branches shows here), and
    `drift` / `drift_se` the mean over runs of (average over the second half of `[burn, T]`
    minus average over the first half) and its standard error: a run still relaxing drifts."""

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

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (JSON-ready).

        Returns:
            `{field: value}`.
        """
        return asdict(self)


def stationary_order(token_noise: float, n: int, d: int = 2, beta: float = 1.0,
                     attention: str = "usa", runs: int = 4, T: float = 60.0,
                     burn: float = 30.0, dt: float = 0.05, scheme: str = "network",
                     seed: int = 0, samples: int = 61, attention_eval: str = "auto",
                     start: str = "uniform") -> OrderEstimate:
    """Time-averaged `r = |(1/n) sum_i x_i|` over `[burn, T]` with `mean='identity'`, no common
    noise (`sigma = 0`) and independent token noise `token_noise`, from i.i.d. uniform tokens
    (`start='uniform'`) or from every token at `e_1` (`start='ordered'`).

    Args:
        token_noise: `tau`, >= 0.
        n: tokens, >= 1.
        d: dimension, >= 2.
        beta: attention strength, > 0.
        attention: 'usa' or 'softmax'.
        runs: independent runs, >= 2 (the standard error is over runs).
        T: horizon in depth time, > burn.
        burn: depth time discarded before averaging, >= 0.
        dt: the layer step.
        scheme: 'network' or 'sde'.
        seed: the root seed.
        samples: checkpoints, evenly spaced over `[0, T]` (those at times >= burn are averaged).
        attention_eval: as `simulate` ('auto': the O(n) expansion at d = 2, 3 for large n).
        start: 'uniform' or 'ordered'.

    Returns:
        An `OrderEstimate`.
    """
    from ..model.params import TimeGrid
    from ..sim.options import Execution, InitialState, Recording
    from ..sim.simulate import simulate

    runs = check_int("runs", runs, 2)
    burn = check_real("burn", burn, 0.0)
    T = check_real("T", T, burn, strict=True)
    attention = check_choice("attention", attention, theory.ATTENTIONS)
    start = check_choice("start", start, ("uniform", "ordered"))
    p = ModelParams(n=n, d=d, beta=beta, attention=attention, mean="identity", sigma=0.0,
                    token_noise=token_noise)
    t0 = time.perf_counter()
    init: str | np.ndarray = "uniform"
    if start == "ordered":
        init = np.zeros((p.n, p.d))
        init[:, 0] = 1.0
    res = simulate(p, TimeGrid.make(T=T, dt=dt), runs=runs, seed=seed, scheme=scheme,
                   initial=InitialState(init),
                   recording=Recording(check_int("samples", samples, 2), ("tokens",)),
                   execution=Execution(attention_eval=attention_eval))
    wall = time.perf_counter() - t0
    assert res.tokens is not None
    times = np.asarray(res.checkpoints) * res.grid.dt
    late = times >= burn
    r = order_parameter(res.tokens[:, late])  # (runs, checkpoints)
    per_run, per_run2 = r.mean(1), (r**2).mean(1)
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
        drift_se=float(moved.std(ddof=1) / math.sqrt(runs)))


def order_scan(ratios: Sequence[float], ns: Sequence[int], d: int = 2, beta: float = 1.0,
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
    return [stationary_order(check_real("ratio", q, 0.0, strict=True) * tau_c, n, d, beta,
                             attention, **kw) for n in ns for q in ratios]


def threshold_from_scan(rows: Sequence[OrderEstimate], r2_max: float = 0.55
                        ) -> tuple[float, float, float]:
    """A mean-field reading of the threshold from the rows of one `n`: near a continuous
    transition `r^2 ~ c (tau_c^2 - tau^2)`; fit `r^2` (the rows' `r2`, weighted by `1/r2_se^2`)
    linearly in `tau^2` over the ordered rows near the threshold (`4 / n < r2 < r2_max`: well
    above the disordered floor of order `1/n`, and below the curved part far from it) and
    return `(tau_c, low, high)`, the zero of the fit and a 2-standard-error
    interval from the fit's covariance (delta method). NaNs when fewer than 2 rows qualify.

    Args:
        rows: `OrderEstimate`s of one `n` and several `token_noise`.
        r2_max: the largest `r2` of a row used.

    Returns:
        `(estimate, low, high)`.
    """
    ordered = [e for e in rows if 4.0 / e.n < e.r2 < r2_max]
    if len(ordered) < 2:
        return math.nan, math.nan, math.nan
    t2 = np.array([e.token_noise**2 for e in ordered])
    y = np.array([e.r2 for e in ordered])
    w = 1.0 / np.maximum(np.array([e.r2_se for e in ordered]), 1e-12) ** 2
    a = np.stack([np.ones_like(t2), t2], 1)
    cov = np.linalg.inv(a.T @ (a * w[:, None]))
    b0, b1 = cov @ (a.T @ (w * y))
    if len(ordered) > 2:  # scale by the fit's own residual variance when it can be estimated
        chi2 = float(np.sum(w * (y - b0 - b1 * t2) ** 2)) / (len(ordered) - 2)
        cov = cov * max(chi2, 1.0)
    z2 = -b0 / b1  # tau_c^2
    g = np.array([-1.0 / b1, b0 / b1**2])  # gradient of -b0/b1
    sd2 = math.sqrt(float(g @ cov @ g))
    lo2, hi2 = max(z2 - 2 * sd2, 0.0), z2 + 2 * sd2
    return math.sqrt(max(z2, 0.0)), math.sqrt(lo2), math.sqrt(max(hi2, 0.0))


def threshold_from_fluctuations(rows: Sequence[OrderEstimate]) -> tuple[float, float, float]:
    """A reading of the threshold from the disordered side: linear fluctuation theory gives
    `1 / (n E r^2) = 1 - tau_c^2 / tau^2` above a continuous threshold; fit the line
    `1 / (n E r^2) = A + B / tau^2` (weighted by the rows' `r2_se`) over the rows given (all
    above the threshold, each of its own `n`) and return `(tau_c, low, high)`, its zero with a
    2-standard-error interval (delta method; the covariance scaled by the residual variance when
    it exceeds 1). NaNs when fewer than 2 rows are given.

    Args:
        rows: `OrderEstimate`s in the disordered phase.

    Returns:
        `(estimate, low, high)`.
    """
    if len(rows) < 2:
        return math.nan, math.nan, math.nan
    u = np.array([1 / e.token_noise**2 for e in rows])
    y = np.array([1 / (e.n * e.r2) for e in rows])
    se = np.array([e.r2_se / (e.n * e.r2**2) for e in rows])
    w = 1 / np.maximum(se, 1e-12) ** 2
    a = np.stack([np.ones_like(u), u], 1)
    cov = np.linalg.inv(a.T @ (a * w[:, None]))
    b0, b1 = cov @ (a.T @ (w * y))
    if len(rows) > 2:
        cov = cov * max(float(np.sum(w * (y - b0 - b1 * u) ** 2)) / (len(rows) - 2), 1.0)
    t2 = -b1 / b0  # tau_c^2 = 1 / u*, u* = -b0 / b1
    g = np.array([b1 / b0**2, -1 / b0])
    sd = math.sqrt(float(g @ cov @ g))
    return (math.sqrt(max(t2, 0.0)), math.sqrt(max(t2 - 2 * sd, 0.0)),
            math.sqrt(max(t2 + 2 * sd, 0.0)))


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

    tau = check_real("token_noise", token_noise, 0.0, strict=True)
    beta = check_real("beta", beta, 0.0, strict=True)
    d = check_int("d", d, 2)
    attention = check_choice("attention", attention, theory.ATTENTIONS)
    a = check_real("mean_scale", mean_scale, 0.0)
    degrees, nodes = check_int("degrees", degrees, 1), check_int("nodes", nodes, 1)
    tol, max_iter = check_real("tol", tol, 0.0, strict=True), check_int("max_iter", max_iter, 1)
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
    c = np.array([theory.mode_coefficient(beta, d, "usa", int(k)) for k in ls])
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
    hi, tol = check_real("hi", hi, 1.0, strict=True), check_real("tol", tol, 0.0, strict=True)
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


def order_params(token_noise: float, n: int, d: int = 2, beta: float = 1.0,
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
    attention = check_choice("attention", attention, theory.ATTENTIONS)
    return ModelParams(n=n, d=d, beta=beta, attention=attention, mean="identity", sigma=0.0,
                       token_noise=token_noise)


def order_budget(token_noise: float, n: int, d: int = 2, beta: float = 1.0,
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

    count = check_int("count", count, 1)
    p = order_params(token_noise, n, d, beta, attention)
    b = simulation_budget(p, TimeGrid.make(T=T, dt=dt), runs,
                          recording=Recording(samples, ("tokens",)))
    return replace(b, what=f"{count} stationary run{'s' * (count > 1)}", work=b.work * count,
                   steps=b.steps * count, longer=("runs", "T", "n", "taus"))


def theory_summary(beta: float, d: int = 2, attention: str = "usa", mean_scale: float = 1.0,
                   branch: bool = True) -> dict[str, Any]:
    """The theory's numbers at one `(beta, d, attention)`: the critical coupling
    `K_c = a / tau_c^2`, `tau_c = sqrt(a / K_c)`, `beta_*(d)` (USA: continuous transition for
    `beta <= beta_*`) and the end `tau_s / tau_c` of the limit's ordered branch
    (`ordered_branch_end`, 1 for a continuous transition).

    Args:
        beta: attention strength, > 0.
        d: dimension, >= 2.
        attention: 'usa' or 'softmax'.
        mean_scale: `a` in `M = a I`, > 0.
        branch: also compute `ordered_branch_end` (a fixed-point computation, about a second).

    Returns:
        A dict with `beta`, `d`, `attention`, `mean_scale`, `K_c`, `tau_c`, `beta_star`,
        `continuous` (`beta <= beta_*`, USA; None for softmax, where the theory gives no
        `beta_*`) and `branch_end` (None without `branch`).
    """
    a = check_real("mean_scale", mean_scale, 0.0, strict=True)
    k_c = theory.critical_coupling(beta, d, attention)
    attention = check_choice("attention", attention, theory.ATTENTIONS)
    b_star = theory.beta_star(d)
    end = ordered_branch_end(beta, d, attention) if branch else None
    return {"beta": float(beta), "d": int(d), "attention": attention, "mean_scale": a,
            "K_c": k_c, "tau_c": math.sqrt(a / k_c), "beta_star": b_star,
            "continuous": (beta <= b_star) if attention == "usa" else None, "branch_end": end}


def resolve_taus(taus: Sequence[float] | None, ratios: Sequence[float] | None, beta: float,
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
        out = [check_real("taus", t, 0.0) for t in taus]
        if not out:
            raise ParameterError("taus must name at least one value (>= 0); got none")
        return out
    assert ratios is not None
    if not list(ratios):
        raise ParameterError("ratios must name at least one value (> 0); got none")
    tau_c = critical_token_noise(beta, d, attention)
    return [check_real("ratios", q, 0.0, strict=True) * tau_c for q in ratios]
