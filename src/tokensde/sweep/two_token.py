"""The two-token phase grid (spec §5) as the sweep kind `two_token`.

One cell is one `two_token_mc.monte_carlo` estimate of `P_anti` at `(beta, d)` (over the decided
runs, with the bounds the undecided runs allow: `stats.estimate_with_undecided`), with the exact
theory beside it: the tol -> 0 probability and the probability of reaching the antipodal
tolerance first, which is what runs stopped at `tol` measure. A grid is a sweep file (the study's
are `tokensde/study/sweeps/phase-*.toml`) run by `tokensde.sweep.engine.run_sweep` or `tokensde sweep
run`: resumable cell by cell, on a local pool or Ray, and seeded like every sweep (a cell's seed
comes from the hash of its parameters). `beta_offset` places a cell relative to the boundary,
`beta = beta_c(d) + beta_offset`; `dt = 'auto'` is `dt_scale / d`. With `step_runs > 0` a cell
also measures the step error of `P_anti` at its step on `min(step_runs, runs)` runs coupled at
dt, 2 dt and 4 dt (`analysis.step_coupled._pair_step`, on streams of their own; its seed, and so
its other numbers, are those of the cell without it).
"""

from __future__ import annotations

import math
from typing import Any

from ..analysis.pair_monte_carlo import _ENGINES, _pair_stopping, monte_carlo, pair_budget, spec_params
from ..analysis.step_coupled import _pair_step
from ..model.mlp import MLPS
from ..model.params import ModelParams, ParameterError, TimeGrid, _check_real
from ..sim.budget import Budget
from ..sim.options import Execution, StepControl
from ..theory import decision_time as absorption
from ..theory import two_tokens as tt
from ..theory.coefficients import pair_model
from ..theory.first_passage import hitting_probability
from .config import SweepConfig
from .kinds import (
    ExperimentKind,
    Param,
    _check_coupled,
    _check_step_runs,
    _choice,
    _integer,
    _Stats,
    _step_runs_param,
    real,
    register,
)

KIND = "two_token"
# the study tabulates these columns of a two_token sweep table, in this order
_COLUMNS: tuple[str, ...] = (
    "beta", "d", "init", "rho0", "engine", "runs", "T", "dt", "steps", "seed", "tol",
    "antipodal", "merged", "undecided", "p_anti", "ci_lo", "ci_hi", "bound_lo", "bound_hi",
    "p_merged", "p_undecided",
    "theory", "theory_tol", "outside", "until", "t_decided_median", "t_decided_q90",
    "decision_rate", "beta_c", "wall_s", "version")
_DECISION_RATE_MAX_D = 64  # the survival eigenproblem is solved for d up to this
_MLP_DEFAULTS: dict[str, Any] = {"mlp": "none", "mlp_sigma": 1.0}


def _optional_real(minimum: float, doc: str) -> Param:
    def check(k: str, v: Any) -> float | None:
        return None if v is None else _check_real(k, v, minimum)
    return Param(check, None, doc)


def _dt(k: str, v: Any) -> float | str:
    return "auto" if v == "auto" else _check_real(k, v, 0.0, strict=True)


def _finalize(cell: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """Resolve `beta_offset` into `beta` and `dt = 'auto'` into `dt_scale / d` (idempotent: a
    canonical cell carries both `beta_offset` and the `beta` it gives)."""
    beta, off = cell["beta"], cell["beta_offset"]
    if off is not None:
        bc = float(tt.beta_c(cell["d"]))
        cell["beta"] = round(bc + off, 6)
        if cell["beta"] < 0:
            raise ParameterError(f"beta_offset must be >= -beta_c(d) = {-bc:.6g} at d = "
                                 f"{cell['d']} (beta must be >= 0); got {off!r}")
    if cell["beta"] is None or (off is not None and beta not in (None, cell["beta"])):
        raise ParameterError("give exactly one of beta (>= 0) and beta_offset "
                             f"(beta = beta_c(d) + beta_offset); got beta={beta!r}, "
                             f"beta_offset={off!r}")
    if cell["dt"] == "auto":
        cell["dt"] = cell["dt_scale"] / cell["d"]
    if cell["mlp"] == "none" and cell["mlp_sigma"] != _MLP_DEFAULTS["mlp_sigma"]:
        raise ParameterError(f"mlp_sigma is used only with an MLP block (mlp = relu, gelu); got "
                             f"mlp_sigma={cell['mlp_sigma']!r} with mlp='none'")
    for key, default in _MLP_DEFAULTS.items():  # out of the canonical cell at their defaults, so
        if cell[key] == default:               # the ids and seeds of earlier cells are unchanged
            del cell[key]
    if cell["step_runs"] and cell["engine"] != "network":
        raise ParameterError("step_runs: the step error is measured for engine 'network' only "
                             f"(the coupled runs are of the network); got engine={cell['engine']!r}")
    _check_step_runs(cell)
    return cell


def _params(cell: dict[str, Any]) -> ModelParams:
    """The `ModelParams` of a two-token cell (`spec_params`, with its MLP block)."""
    return spec_params(cell["beta"], cell["d"],
                       **{k: cell.get(k, v) for k, v in _MLP_DEFAULTS.items()})


def _step_stats(cell: dict[str, Any], result: dict[str, Any], seed: int) -> _Stats:
    """With `step_runs > 0`: the step error of `P_anti` at the cell's step and its paired error
    (`pair_step` on `min(step_runs, runs)` coupled runs; nan where no coupled run decided at
    every step); nothing otherwise."""
    if not cell.get("step_runs"):
        return {}
    e = _pair_step(_params(cell), cell["rho0"], result, cell["engine"], cell["tol"],
                  cell["until"], seed, coupled=cell["step_runs"])
    return {"step_runs": min(cell["step_runs"], cell["runs"]),
            "step_p_anti": math.nan if e.bias is None else e.bias, "step_p_anti_se": e.se}


def _two_token_cell(cell: dict[str, Any], seed: int) -> _Stats:
    """`P_anti` of two tokens at (beta, d) by Monte Carlo (`two_token_mc.monte_carlo`), each run
    until decided (`1 - |rho| < tol`) or the maximum horizon T, with the exact theory."""
    beta, d, tol = cell["beta"], cell["d"], cell["tol"]
    mlp = {k: cell.get(k, v) for k, v in _MLP_DEFAULTS.items()}
    _check_coupled(cell, _params(cell), TimeGrid.make(T=cell["T"], dt=cell["dt"]).steps)
    stop, outcome_tol = _pair_stopping(cell["until"], tol)
    out = monte_carlo(beta, d, cell["rho0"], runs=cell["runs"], T=cell["T"], dt=cell["dt"],
                      seed=seed, stopping=stop, outcome_tol=outcome_tol, engine=cell["engine"],
                      execution=Execution(sampler=cell["sampler"]), **mlp)
    r = out.to_dict()
    model = pair_model(beta, d, **mlp)
    at_tol = hitting_probability(model, out.rho0, tol)
    est = out.estimate  # the rule for undecided runs (stats.estimate_with_undecided)
    ci = est.ci or (math.nan, math.nan)
    return {
        "init": "uniform" if out.rho0 == "uniform" else "pair", "steps": out.steps,
        "antipodal": out.antipodal, "merged": out.merged, "undecided": out.undecided,
        "p_anti": est.p, "ci_lo": ci[0], "ci_hi": ci[1], "bound_lo": est.bounds[0],
        "bound_hi": est.bounds[1], "p_merged": r["p_merged"], "p_undecided": est.undecided,
        "theory": out.theory, "theory_tol": at_tol, "outside": not est.contains(at_tol),
        "t_decided_median": r.get("t_decided_median", math.nan),
        "t_decided_q90": r.get("t_decided_q90", math.nan),
        "decision_rate": (absorption._principal_rate(model, tol)
                          if d <= _DECISION_RATE_MAX_D and model.bounded_z else math.nan),
        "beta_c": tt.beta_c(d),
        **_step_stats(cell, r, seed),
    }


def _two_token_budget(cell: dict[str, Any]) -> Budget:
    """Memory and work of a two-token cell (`pair_monte_carlo.pair_budget`), with the runs
    coupled at dt, 2 dt (and 4 dt) of `step_runs` beside it."""
    p, grid = _params(cell), TimeGrid.make(T=cell["T"], dt=cell["dt"])
    stop = _pair_stopping(cell["until"], cell["tol"])[0]
    coupled = cell.get("step_runs", 0)
    return pair_budget(p, cell["rho0"], grid, cell["runs"], cell["engine"], stop,
                       Execution(sampler=cell["sampler"]),
                       StepControl(coupled_runs=coupled) if coupled else None)


register(ExperimentKind(
    KIND,
    _two_token_cell,
    {
        "beta": _optional_real(0.0, "attention strength (or give beta_offset)"),
        "beta_offset": _optional_real(-math.inf, "beta = beta_c(d) + beta_offset"),
        "d": _integer(2, doc="dimension"),
        "rho0": Param(lambda k, v: tt.check_rho0(v), "uniform",
                      "initial <x1, x2> in [-1, 1], or 'uniform'"),
        "runs": _integer(1, doc="independent pairs"),
        "T": real(0.0, strict=True, doc="maximum horizon in depth time"),
        "dt": Param(_dt, "auto", "layer step alpha^2 ('auto': dt_scale / d)"),
        "dt_scale": real(0.0, 0.05, strict=True, doc="dt = dt_scale / d when dt = 'auto'"),
        "tol": real(0.0, 1e-8, strict=True, doc="decided when 1 - |rho| < tol"),
        "engine": _choice(_ENGINES, "network", "network: the d-dim network; reduced: rho SDE"),
        "sampler": _choice(("auto", "fast", "full", "gram"), "auto"),
        "until": _choice(("decided", "horizon"), "decided",
                        "decided: each run stops once decided, T is the maximum; horizon: all to T"),
        "mlp": Param(lambda k, v: MLPS.check(v, k), "none",
                     "random MLP block none | relu | gelu (docs/variants.md §5)"),
        "mlp_sigma": real(0.0, 1.0, doc="output scale of the MLP block"),
        "step_runs": _step_runs_param("p_anti"),
    },
    "two tokens: P(antipodal) at (beta, d) against the exact theory (spec §5)",
    finalize=_finalize,
    budget=_two_token_budget,
    seed_free=("step_runs",),
))


def grid_config(betas: list[float], ds: list[int], rho0: float | str = "uniform", *,
                runs: int = 200, T: float = 30.0, seed: int = 0, engine: str = "network",
                name: str = "two-token-grid") -> SweepConfig:
    """A `two_token` sweep over every (beta, d) of `betas` x `ds` (dt = 0.05/d), as
    `tokensde two-token grid` runs it.

    Args:
        betas: Attention strengths.
        ds: Dimensions.
        rho0: Initial inner product, or 'uniform'.
        runs: Runs per cell.
        T: Depth time of the horizon.
        seed: Root seed of the sweep.
        engine: 'network' or 'reduced'.
        name: The sweep's name.

    Returns:
        The `SweepConfig`.
    """
    return SweepConfig.from_dict({
        "name": name, "kind": KIND, "module": __name__, "seed": seed, "runs": runs, "T": T,
        "params": {"rho0": rho0, "engine": engine},
        "grid": {"beta": list(betas), "d": list(ds)}}, where="two-token grid")
