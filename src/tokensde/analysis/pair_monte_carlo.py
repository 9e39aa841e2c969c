"""Two-token Monte Carlo (spec §5-§6): outcome fractions of the full d-dimensional network.

`monte_carlo` (softmax, matrix noise) and `hybrid_monte_carlo` (§6: USA, `M = I`, scalar noise)
run `tokensde.sim.simulate.simulate` with two tokens (`engine='network'`) or the reduced 1-D diffusion of
`tokensde.theory.two_tokens` (`engine='reduced'`), and return a `PairOutcome`: antipodal / merged counts
with Wilson intervals, beside the theory value of `tokensde.theory.two_tokens`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from .._version import __version__
from ..model.params import ModelParams, ParameterError, TimeGrid, _check_int, _check_real, _Law
from ..sim.budget import Budget
from ..sim.options import _DECIDE_TOL, Execution, InitialState, StepControl, StoppingRule
from ..sim.reduced import reduced_diffusion
from ..sim.simulate import plan_run, simulate
from ..theory.coefficients import pair_model
from ..theory.first_passage import hitting_probability
from ..theory.two_tokens import (
    beta_c,
    check_rho0,
    classify_pair,
    default_dt,
    hybrid_eps2_c,
    hybrid_lyapunov,
    hybrid_p_anti,
)
from .stats import Estimate, _censored_quantiles, estimate_with_undecided, wilson

__all__ = ["PairOutcome", "hybrid_monte_carlo", "monte_carlo", "pair_budget", "spec_params"]


def _pair_log_gaps(x: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(log(1 + rho), log(1 - rho))` of token pairs `x` `(runs, 2, d)`, from `|x_1 +- x_2|^2/2`
    (exact where `rho = <x_1, x_2>` itself rounds to +-1)."""
    x = torch.as_tensor(x)
    s = (x[:, 0] + x[:, 1]).pow(2).sum(-1) / 2
    m = (x[:, 0] - x[:, 1]).pow(2).sum(-1) / 2
    with np.errstate(divide="ignore"):
        return np.log(s.double().numpy()), np.log(m.double().numpy())


@dataclass(frozen=True)
class PairOutcome:
    """Outcome counts of `runs` two-token runs at the horizon, with the theory value beside.

    `undecided` runs are neither within `tol` of -1 nor of +1; P_anti is reported by the rule
    of `stats.estimate_with_undecided` (over the decided runs, Wilson at `level`, with the
    bounds the undecided runs allow).
    """

    model: str
    params: dict[str, Any]
    rho0: float | str
    runs: int
    antipodal: int
    merged: int
    T: float
    dt: float
    steps: int
    seed: int
    tol: float
    theory: float
    level: float = 0.95
    engine: str = "network"
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    times: np.ndarray | None = field(default=None, compare=False, repr=False)
    exact: bool = False  # every run the same (no noise from a fixed start): no interval

    @property
    def undecided(self) -> int:
        """Runs neither antipodal nor merged at the horizon."""
        return self.runs - self.antipodal - self.merged

    @property
    def estimate(self) -> Estimate:
        """P_anti by the project's rule for undecided runs (`stats.estimate_with_undecided`):
        over the decided runs, with the bounds the undecided runs allow."""
        return estimate_with_undecided(self.antipodal, self.merged, self.runs, self.level,
                                       self.exact)

    @property
    def p_anti(self) -> float:
        """Fraction of the decided runs that ended antipodal (nan when none decided)."""
        return self.estimate.p

    @property
    def ci(self) -> list[float] | None:
        """Wilson interval of `p_anti` over the decided runs (None: every run the same, or no
        run decided)."""
        ci = self.estimate.ci
        return None if ci is None else list(ci)

    def agrees(self, theory: float) -> bool:
        """Whether `theory` lies within the bounds that the undecided runs allow."""
        return self.estimate.contains(theory)

    def decision_summary(self) -> dict[str, Any]:
        """Time to decision: median and 10/90 % quantiles over all runs (undecided runs count as
        later than the horizon, so a quantile past it is nan), and the mean over decided runs."""
        if self.times is None:
            return {"until": "horizon"}
        q = _censored_quantiles(self.times, [0.1, 0.5, 0.9])
        done = ~np.isnan(self.times)
        return {"until": "decided", "t_decided_q10": q[0], "t_decided_median": q[1],
                "t_decided_q90": q[2],
                "t_decided_mean": float(self.times[done].mean()) if done.any() else math.nan}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary, with horizon, seed and package version: `p_anti` and `ci` over
        the decided runs, `undecided` (fraction) and `bounds` (docs/reporting.md)."""
        est = self.estimate
        u_lo, u_hi = wilson(self.undecided, self.runs, self.level)
        return {
            "p_anti": est.p, "ci": self.ci, "bounds": list(est.bounds),
            "p_merged": self.merged / est.decided if est.decided else math.nan,
            "undecided": est.undecided,
            "ci_undecided": None if self.exact else [float(u_lo), float(u_hi)],
            "estimate": est.to_dict(), "theory": self.theory,
            "counts": {"antipodal": self.antipodal, "merged": self.merged,
                       "undecided": self.undecided, "runs": self.runs},
            "level": self.level, "model": self.model, "engine": self.engine,
            "params": self.params, "rho0": self.rho0, "T": self.T, "dt": self.dt,
            "steps": self.steps, "seed": self.seed, "tol": self.tol, "wall_s": self.wall_s,
            "package": "tokensde", "version": __version__, **self.decision_summary(),
            **self.extra,
        }


def _check_common(runs: int, T: float, dt: float, seed: int, tol: float, level: float
                  ) -> TimeGrid:
    _check_int("runs", runs, 1)
    _check_int("seed", seed, 0)
    t = _check_real("tol", tol, 0.0, strict=True)
    if t >= 1:
        raise ParameterError(f"tol must be a number in (0, 1); got {tol!r}")
    lv = _check_real("level", level, 0.0, strict=True)
    if lv >= 1:
        raise ParameterError(f"level must be a number in (0, 1); got {level!r}")
    return TimeGrid.make(T=T, dt=dt)


def _network_outcome(p: ModelParams, rho0: float | str, grid: TimeGrid, runs: int, seed: int,
                     tol: float, stopping: StoppingRule = StoppingRule(),
                     execution: Execution = Execution(), progress: Any = None
                     ) -> tuple[int, int, float, np.ndarray | None]:
    """Antipodal and merged counts (at `tol`) of the full network after `grid` (or at decision
    by `stopping`), the wall time and the decision times."""
    res = simulate(p, grid, runs=runs, seed=seed, initial=_pair_start(rho0), stopping=stopping,
                   execution=execution, progress=progress)
    anti, merged = classify_pair(*_pair_log_gaps(res.state), tol)
    times = None if stopping.until == "horizon" else res.decision_times()
    return int(anti.sum()), int(merged.sum()), res.wall_s, times


def _pair_start(rho0: float | str) -> InitialState:
    """Uniform tokens, or the pair at `<x_1, x_2> = rho0`."""
    return InitialState() if rho0 == "uniform" else InitialState.pair(float(rho0))


def _reduced_outcome(beta: float, d: float, rho0: float | str, grid: TimeGrid, runs: int,
                     seed: int, tol: float, sigma: float, eps: float | None) -> tuple[int, int]:
    paths = reduced_diffusion(beta, d, rho0, T=grid.T, dt=grid.dt, runs=runs, seed=seed,
                              sigma=sigma, eps=eps)
    lp, lm = paths.log_gaps()
    anti, merged = classify_pair(lp[:, -1], lm[:, -1], tol)
    return int(anti.sum()), int(merged.sum())


def _pair_theory(p: ModelParams, rho0: float | str) -> float:
    """The `tol -> 0` limit of the probability of deciding antipodal (spec §5's absorbing
    `P_anti`; with an MLP block a first passage), from the first-passage engine."""
    model = pair_model(p.beta, p.d, sigma=p.sigma, mlp=p.mlp, mlp_sigma=p.mlp_sigma)
    return hitting_probability(model, rho0, 0.0)


def spec_params(beta: float, d: int, sigma: float = 1.0, law: _Law = "gaussian",
                mlp: str = "none", mlp_sigma: float = 1.0) -> ModelParams:
    """The two-token model of `monte_carlo` (§5: softmax, matrix noise, M = 0, n = 2)."""
    return ModelParams(n=2, d=d, beta=beta, sigma=sigma, law=law, mlp=mlp, mlp_sigma=mlp_sigma)


def _hybrid_params(beta: float, eps: float, d: int = 3, law: _Law = "gaussian") -> ModelParams:
    """The two-token model of `hybrid_monte_carlo` (§6: USA, M = I, scalar noise eps, n = 2)."""
    return ModelParams(n=2, d=d, beta=beta, attention="usa", mean="identity", noise="scalar",
                       eps=eps, law=law)


_REDUCED_BYTES = 64  # per run: the few float64 numbers of the reduced diffusion's state
_REDUCED_WORK = 75.0  # work units (`sim.budget.estimate_work`) per run and layer of the reduced
# diffusion, measured


def pair_budget(p: ModelParams, rho0: float | str, grid: TimeGrid, runs: int,
                engine: str = "network", stopping: StoppingRule = StoppingRule.decided(),
                execution: Execution = Execution(), step: StepControl | None = None) -> Budget:
    """Memory and work of a two-token Monte Carlo of model `p` (`spec_params`, `hybrid_params`)
    before it runs: the network's (the budget of the plan `simulate` runs, init 'pair' or
    'uniform', with the coupled runs of `step` measuring the step error beside it:
    `sim.simulate.plan_run`), or for the reduced engine REDUCED_BYTES and REDUCED_WORK per run
    (and layer), one layer step a layer for all runs (no step error measured)."""
    runs = _check_int("runs", runs, 1)
    if engine == "reduced":
        return Budget("this Monte Carlo", _REDUCED_BYTES * runs, _REDUCED_BYTES, runs,
                      _REDUCED_WORK * runs * grid.steps, f"{runs} runs, {grid.steps} layers, "
                      "reduced engine", ("runs",), longer=("runs", "time"),
                      steps=float(grid.steps))
    b = plan_run(p, grid, runs, initial=_pair_start(rho0), stopping=stopping,
                 execution=execution, step=step).budget()
    return replace(b, what="this Monte Carlo", lower=("runs", "d"), longer=("runs", "time", "d"))


_ENGINES: tuple[str, ...] = ("network", "reduced")


def monte_carlo(beta: float, d: int, rho0: float | str = 0.0, *, runs: int = 1000,
                T: float = 200.0, dt: float | None = None, seed: int = 0, sigma: float = 1.0,
                stopping: StoppingRule = StoppingRule.decided(), outcome_tol: float | None = None,
                level: float = 0.95, engine: str = "network", law: _Law = "gaussian",
                mlp: str = "none", mlp_sigma: float = 1.0, execution: Execution = Execution(),
                progress: Callable[[int], None] | None = None) -> PairOutcome:
    """Fractions of two-token runs (§5: softmax, matrix noise) that end antipodal / merged.

    `engine='network'` runs the full d-dimensional discrete network (`simulate`, `init='pair'`
    at `rho0`, or `'uniform'`) with layer step `dt` (default `default_dt(d)`), each run until
    it is decided (`1 - |rho| < tol`) or depth time `T` (`StoppingRule.decided(tol)`, the
    default), or every run to `T` (`StoppingRule()`); `'reduced'` runs the 1-D diffusion to `T`
    instead. Theory: `p_anti` (or `p_anti_uniform`). With an MLP block (`mlp`, `mlp_sigma`;
    network only, docs/variants.md §5) antipodal pairs are no longer absorbing, so each run is
    tested at every layer unless `stopping.decide_every` says otherwise (a first passage, not
    an absorption) and the theory is the tol -> 0 limit of `pair_diffusion.p_first`.

    Args:
        beta: Attention strength.
        d: Dimension of the tokens.
        rho0: Initial inner product, or 'uniform' for a uniform random pair.
        runs: Number of independent runs.
        T: Depth time of the horizon.
        dt: Layer step (default `default_dt(d)`).
        seed: Root seed.
        sigma: Scale of the value noise.
        stopping: `StoppingRule.decided(tol)` (stop each run once within `tol` of -1 or +1;
            tol None: `DECIDE_TOL`) or `StoppingRule()` (every run to `T`).
        outcome_tol: A run to the horizon (`StoppingRule()`) ends decided within this of -1 or
            +1 (None: `DECIDE_TOL`); a decided rule classifies at its own `tol`.
        level: Confidence level of the Wilson interval.
        engine: 'network' or 'reduced'.
        law: Entry law of the noise.
        mlp: Activation of the MLP block ('none', 'relu', 'gelu').
        mlp_sigma: Scale of the MLP block.
        execution: How the network is computed (`simulate`'s: the sampler, the batch size, ...;
            the default only with `engine='reduced'`).
        progress: Called with the number of runs done, or None.

    Returns:
        A `PairOutcome`: counts, P_anti with its interval, and the theory value beside.
    """
    if dt is None:
        dt = default_dt(_check_int("d", d, 2))
    tol = _outcome_tol(stopping, outcome_tol)
    grid = _check_common(runs, T, dt, seed, tol, level)
    if engine not in _ENGINES:
        raise ParameterError(f"engine must be one of {', '.join(_ENGINES)}; got {engine!r}")
    p = spec_params(beta, d, sigma, law, mlp, mlp_sigma)
    if p.mlp_block.active and engine != "network":
        raise ParameterError(f"engine must be 'network' with an MLP block; got engine={engine!r}")
    if engine != "network" and execution != Execution():
        raise ParameterError(f"execution applies only with engine='network'; got "
                             f"engine={engine!r}, execution={execution!r}")
    rho0 = check_rho0(rho0)
    theory = _pair_theory(p, rho0)
    wall, times = 0.0, None
    if engine == "network":
        if stopping.until == "decided":  # at the tol it classifies at; with an MLP block a
            every = 1 if p.mlp_block.active else None  # first passage: tested every layer
            stopping = replace(stopping, tol=tol, decide_every=stopping.decide_every or every)
        anti, merged, wall, times = _network_outcome(p, rho0, grid, runs, seed, tol, stopping,
                                                     execution, progress)
    else:
        anti, merged = _reduced_outcome(p.beta, p.d, rho0, grid, runs, seed, tol, p.sigma, None)
    return PairOutcome("softmax", p.to_dict(), rho0, runs, anti, merged, grid.T, grid.dt,
                       grid.steps, seed, tol, float(theory), level, engine, wall,
                       {"beta_c": beta_c(p.d)}, times,
                       exact=p.sigma == 0 and not p.mlp_block.active and rho0 != "uniform")


def _pair_stopping(until: str, tol: float) -> tuple[StoppingRule, float | None]:
    """`monte_carlo`'s `stopping` and `outcome_tol` of runs classified at `tol`, each stopped
    once decided (`until='decided'`) or all run to the horizon (`'horizon'`)."""
    if until == "decided":
        return StoppingRule.decided(tol), None
    return StoppingRule(until), tol


def _outcome_tol(stopping: StoppingRule, outcome_tol: float | None) -> float:
    """The tolerance that classifies a run: the decided rule's own (`DECIDE_TOL` when None), or
    `outcome_tol` (`DECIDE_TOL` when None) for runs to the horizon."""
    if not isinstance(stopping, StoppingRule):
        raise ParameterError(f"stopping must be a StoppingRule; got {stopping!r}")
    if stopping.until == "decided":
        if outcome_tol is not None:
            raise ParameterError("outcome_tol is for runs to the horizon; a decided run is "
                                 "classified at its rule's tol (StoppingRule.decided(tol))")
        return _DECIDE_TOL if stopping.tol is None else stopping.tol
    return _DECIDE_TOL if outcome_tol is None else outcome_tol


def hybrid_monte_carlo(beta: float, eps: float, *, d: int = 3, rho0: float | str = 0.0,
                       runs: int = 1000, T: float = 40.0, dt: float = 0.01, seed: int = 0,
                       tol: float = 1e-6, level: float = 0.95, engine: str = "network",
                       law: _Law = "gaussian",
                       progress: Callable[[int], None] | None = None) -> PairOutcome:
    """Two-token outcome fractions for the §6 hybrid model (USA, `M = I`, scalar noise `eps`).

    Theory: antipodal a.s. above `eps^2 = 2 e^{-beta}`, merged a.s. below (`hybrid_p_anti`).

    Args:
        beta: Attention strength.
        eps: Scale of the scalar noise.
        d: Dimension of the tokens.
        rho0: Initial inner product, or 'uniform' for a uniform random pair.
        runs: Number of independent runs.
        T: Depth time of the horizon.
        dt: Layer step.
        seed: Root seed.
        tol: A run is decided within `tol` of -1 or +1.
        level: Confidence level of the Wilson interval.
        engine: 'network' (the full network) or 'reduced' (the 1-D diffusion).
        law: Entry law of the noise ('gaussian', 'uniform', 'rademacher').
        progress: Called with the number of runs done, or None.

    Returns:
        A `PairOutcome`: counts, P_anti with its interval, and the theory value beside.
    """
    grid = _check_common(runs, T, dt, seed, tol, level)
    if engine not in _ENGINES:
        raise ParameterError(f"engine must be one of {', '.join(_ENGINES)}; got {engine!r}")
    p = _hybrid_params(beta, eps, d, law)
    rho0 = check_rho0(rho0)
    theory = hybrid_p_anti(p.beta, p.noise_scale, 0.0 if isinstance(rho0, str) else rho0)
    wall = 0.0
    if engine == "network":
        anti, merged, wall, _ = _network_outcome(p, rho0, grid, runs, seed, tol,
                                                 progress=progress)
    else:
        anti, merged = _reduced_outcome(p.beta, p.d, rho0, grid, runs, seed, tol, 0.0, p.eps)
    lam_minus, lam_plus = hybrid_lyapunov(p.beta, p.noise_scale)
    return PairOutcome("hybrid", p.to_dict(), rho0, runs, anti, merged, grid.T, grid.dt,
                       grid.steps, seed, tol, theory, level, engine, wall,
                       {"eps2_c": hybrid_eps2_c(p.beta), "lyapunov_antipodal": lam_minus,
                        "lyapunov_merged": lam_plus},
                       exact=p.noise_scale == 0 and rho0 != "uniform")
