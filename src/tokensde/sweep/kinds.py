"""Experiment kinds for sweeps: pure functions `(cell, seed) -> statistics`, kept in a registry.

A *kind* declares its parameters (type, default, allowed range); `ExperimentKind.normalize` turns a
raw cell (from a TOML grid) into its canonical form — every parameter present, coerced and
validated — so that equal cells hash equally. `run(cell, seed)` must depend on nothing else.
Other modules add kinds with `register` or the `experiment` decorator; a sweep file names its kind
and nothing else. Kinds of other modules register through the entry-point group `tokensde.kinds`,
tokensde's own (pyproject.toml) as an installed package's.

Kinds defined here (the others: `OWN_KINDS`):
- `multi_token`: n tokens from uniform initial positions; outcome probabilities at the horizon
  (spec §7, `tokensde.analysis.clusters`) with Wilson intervals and the law of the minority side of
  bipolar states, for `model` = 'noise' (the pure-noise model, M = 0), 'flow' (the deterministic
  attention flow, sigma = 0, M = I) or 'hybrid' (M = I with matrix noise sigma; turn sigma down
  towards 0 to approach the flow);
- `null`: a seeded uniform and an optional sleep, for engine tests and overhead benchmarks.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..analysis import clusters
from ..analysis.stats import _censored_quantiles, wilson
from ..model.attention import ATTENTION_KINDS
from ..model.checks import check_tol
from ..model.mlp import MLPS
from ..model.params import NORMS, ParameterError, _check_choice, _check_int, _check_real
from ..model.qk import QK_LAWS, QK_REDRAWS

__all__ = ["ExperimentKind", "Param", "experiment", "get_kind", "kind_names", "real", "register"]

_Stats = dict[str, Any]
_RunFn = Callable[[dict[str, Any], int], _Stats]
_REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """One parameter of a kind: `check(name, value)` validates and coerces a value."""

    check: Callable[[str, Any], Any]
    default: Any = _REQUIRED
    doc: str = ""

    @property
    def required(self) -> bool:
        """True when the parameter has no default."""
        return self.default is _REQUIRED


def _integer(minimum: int, default: Any = _REQUIRED, doc: str = "") -> Param:
    """An integer parameter >= minimum."""
    return Param(lambda k, v: _check_int(k, v, minimum), default, doc)


def real(minimum: float = 0.0, default: Any = _REQUIRED, strict: bool = False,
         doc: str = "") -> Param:
    """A finite real parameter >= minimum (> if strict)."""
    return Param(lambda k, v: _check_real(k, v, minimum, strict), default, doc)


def _choice(choices: tuple[str, ...], default: Any = _REQUIRED, doc: str = "") -> Param:
    """A string parameter from `choices`."""
    return Param(lambda k, v: _check_choice(k, v, choices), default, doc)


def _fraction(default: float, doc: str = "") -> Param:
    """A real parameter in (0, 1]."""
    def check(k: str, v: Any) -> float:
        x = _check_real(k, v, 0.0, strict=True)
        if x > 1.0:
            raise ParameterError(f"{k} must be a number in (0, 1]; got {v!r}")
        return x
    return Param(check, default, doc)


def _real_or_auto(default: Any = "auto", doc: str = "") -> Param:
    """'auto' or a finite real > 0."""
    def check(k: str, v: Any) -> float | str:
        return "auto" if v == "auto" else _check_real(k, v, 0.0, strict=True)
    return Param(check, default, doc)


@dataclass(frozen=True)
class ExperimentKind:
    """A named experiment: its parameters and the pure function that runs one cell; `budget`,
    when given, estimates a canonical cell's memory and work (`sim.budget.Budget`) before it
    runs, for the sweep's worker cap and checks. `seed_free` names the measurement-only
    parameters: they add columns to a cell's row (and so change its id) but leave its seed, and
    so its other numbers, as they are (`seed_params`)."""

    name: str
    run: _RunFn
    params: Mapping[str, Param]
    doc: str = ""
    finalize: Callable[[dict[str, Any], set[str]], dict[str, Any]] | None = None
    budget: Callable[[dict[str, Any]], Any] | None = None  # canonical cell -> sim.budget.Budget
    seed_free: tuple[str, ...] = ()

    def seed_params(self, canonical: Mapping[str, Any]) -> dict[str, Any]:
        """The canonical cell without its `seed_free` parameters: what a cell's seed is
        derived from (`sweep.config.SweepConfig.cells`)."""
        return {k: v for k, v in canonical.items() if k not in self.seed_free}

    def normalize(self, cell: Mapping[str, Any]) -> dict[str, Any]:
        """The canonical cell: keys sorted, defaults filled in, values validated and coerced."""
        unknown = sorted(set(cell) - set(self.params))
        if unknown:
            raise ParameterError(f"{', '.join(unknown)}: not a parameter of experiment kind "
                                 f"{self.name!r} (known: {', '.join(sorted(self.params))})")
        out: dict[str, Any] = {}
        for key in sorted(self.params):
            spec = self.params[key]
            if key in cell:
                out[key] = spec.check(key, cell[key])
            elif spec.required:
                raise ParameterError(f"{key} is required by experiment kind {self.name!r}")
            else:
                out[key] = spec.default
        return out if self.finalize is None else self.finalize(out, set(cell))

    def __call__(self, cell: Mapping[str, Any], seed: int) -> _Stats:
        """Run one (raw or canonical) cell with `seed`."""
        return self.run(self.normalize(cell), _check_int("seed", seed, 0))


_KINDS: dict[str, ExperimentKind] = {}


def register(kind: ExperimentKind) -> ExperimentKind:
    """Add `kind` to the registry; a name can be registered once (re-registering the same
    function, as on a module reload, is allowed).

    Args:
        kind: The kind to add.

    Returns:
        `kind`.

    Raises:
        ValueError: Another function is registered under its name.
    """
    old = _KINDS.get(kind.name)
    if old is not None and old.run.__qualname__ != kind.run.__qualname__:
        raise ValueError(f"experiment kind {kind.name!r} is already registered by "
                         f"{old.run.__module__}.{old.run.__qualname__}")
    _KINDS[kind.name] = kind
    return kind


def experiment(name: str, doc: str = "", **params: Param) -> Callable[[_RunFn], _RunFn]:
    """Decorator: register `fn(cell, seed) -> stats` as kind `name` with these parameters.

    Args:
        name: The kind's name, as sweep files give it.
        doc: One line on what a cell computes.
        **params: The cell's parameters, each a `Param` (type, default, allowed values).

    Returns:
        A decorator that registers the function and returns it unchanged.
    """
    def deco(fn: _RunFn) -> _RunFn:
        register(ExperimentKind(name, fn, dict(params), doc or (fn.__doc__ or "").strip()))
        return fn
    return deco


# `module` values written by earlier versions into sweep files and manifests: read and ignored.
_LEGACY_MODULES = frozenset({"tokensde.experiments", "tokensde.phase_grid", "tokensde.two_tokens",
                            "tokensde.vit.depth", "tokensde.sweep.kinds", "tokensde.sweep.two_token"})
# Kinds outside this module, tokensde's own included (pyproject.toml), register through this
# entry-point group: name = "package.module" (the module registers the kind when imported).
_ENTRY_POINTS = "tokensde.kinds"
# The kinds tokensde itself provides; a missing one means the package metadata is stale.
_OWN_KINDS = ("meanfield", "multi_token", "null", "token_noise", "two_token", "vit_depth",
             "vit_fair")


def _plugin_kinds() -> dict[str, str]:
    from importlib.metadata import entry_points
    return {ep.name: ep.value for ep in entry_points(group=_ENTRY_POINTS)}


def kind_names() -> list[str]:
    """Every kind a sweep can name: built in, registered, or from an installed entry point.

    Returns:
        The names, sorted.
    """
    return sorted({*_KINDS, *_plugin_kinds()})


def get_kind(name: str, module: str | None = None) -> ExperimentKind:
    """The kind called `name`: registered, built in, or from the entry-point group `tokensde.kinds`.

    `module` is what sweep files of earlier versions named; those names are accepted and ignored,
    any other is refused (a sweep file never chooses code to import).

    Args:
        name: The kind's name.
        module: The module named by a sweep file of an earlier version, or None.

    Returns:
        The `ExperimentKind`.

    Raises:
        ParameterError: No kind has that name, or `module` is not one of the old names.
    """
    if module and module not in _LEGACY_MODULES:
        raise ParameterError(f"module {module!r} (for experiment kind {name!r}) is not read: kinds are "
                             f"found by name ({', '.join(kind_names())}); a package adds one through "
                             f"the entry-point group {_ENTRY_POINTS!r}")
    if name not in _KINDS:
        target = _plugin_kinds().get(name)
        if target is not None:
            importlib.import_module(target.split(":")[0])
    if name not in _KINDS:
        stale = (f" (tokensde's own kind {name!r} is declared in its package metadata: reinstall "
                 "it, e.g. pip install -e .)" if name in _OWN_KINDS else "")
        raise ParameterError(f"kind must be a registered experiment kind "
                             f"({', '.join(kind_names())}); got {name!r}{stale}")
    return _KINDS[name]


# ----------------------------------------------------------------------------- multi-token

_DT_MAX = 0.02
# Auto step: dt = min(DT_MAX, DT_KICK / d) keeps the per-layer noise kick sqrt(dt d) sigma
# and the Ito term (d - 1) dt sigma^2 / 2 of the discrete network small for every d.
_DT_KICK = 0.2


def _auto_dt(d: int, dt: float | str) -> float:
    """Layer step of a cell: `dt` itself, or `min(DT_MAX, DT_KICK / d)` for 'auto'."""
    return min(_DT_MAX, _DT_KICK / d) if dt == "auto" else float(dt)


def _outcome_stats(report: clusters.ClusterReport, n: int) -> _Stats:
    """Counts, probabilities and 95% Wilson intervals of each outcome; minority-side law."""
    runs = report.outcome.shape[0]
    out: _Stats = {}
    for name, k in report.counts().items():
        lo, hi = wilson(k, runs)
        out.update({f"k_{name}": k, f"p_{name}": k / runs, f"p_{name}_lo": float(lo),
                    f"p_{name}_hi": float(hi)})
    law = clusters.minority_law(report, n)
    m = np.arange(1, n // 2 + 1)
    out["minority"] = [int(c) for c in law]
    out["minority_mean"] = float((law * m).sum() / law.sum()) if law.sum() else math.nan
    return out


def _summary_stats(report: clusters.ClusterReport) -> _Stats:
    """Run averages of the cluster descriptors."""
    return {
        "mean_clusters": float(report.n_clusters.mean()),
        "mean_poles": float(report.n_poles.mean()),
        "mean_antipodal_fraction": float(report.antipodal_fraction.mean()),
        "mean_effective_rank": float(report.effective_rank.mean()),
    }


def _model_params(cell: dict[str, Any]) -> Any:
    """`ModelParams` of a multi-token cell: M = 0 for model 'noise', M = I otherwise."""
    from ..model.params import ModelParams

    mean = "none" if cell["model"] == "noise" else "identity"
    variants = {k: cell[k] for k in _VARIANTS if k in cell}
    return ModelParams(n=cell["n"], d=cell["d"], beta=cell["beta"], attention=cell["attention"],
                       mean=mean, sigma=cell["sigma"], **variants)


def _decision_stats(decided_at: np.ndarray | None, steps: int, dt: float, runs: int) -> _Stats:
    """Run-layers stepped, and the time to decision: fraction decided, median and 90 % quantile
    over all runs (undecided runs count as later than the horizon: nan past it)."""
    if decided_at is None:
        return {"run_layers": runs * steps}
    done = decided_at >= 0
    t = np.where(done, decided_at * dt, np.nan)
    q = _censored_quantiles(t, [0.5, 0.9])
    return {"run_layers": int(np.where(done, decided_at, steps).sum()),
            "p_decided": float(done.mean()), "t_decided_median": q[0], "t_decided_q90": q[1],
            "t_decided_max": float(np.nanmax(t)) if done.any() else math.nan}


def _hovering_stats(report: clusters.ClusterReport, g_end: np.ndarray, g_before: np.ndarray,
                   loose_tol: float) -> _Stats:
    """Runs not decided at `tol` that are bipolar at `loose_tol` at both checkpoints (the start
    and the end of the motion window): formations whose antipodal gaps hover between the two
    tolerances instead of closing. Count, fraction and 95 % Wilson interval."""
    und = report.outcome == clusters.Outcome.UNDECIDED
    k = 0
    if und.any():
        end = clusters.analyze(g_end[und], loose_tol).bipolar
        start = clusters.analyze(g_before[und], loose_tol).bipolar
        k = int((end & start).sum())
    runs = len(report.outcome)
    lo, hi = wilson(k, runs)
    return {"k_hovering": k, "p_hovering": k / runs, "p_hovering_lo": float(lo),
            "p_hovering_hi": float(hi)}


def _multi_token_grid(cell: dict[str, Any]) -> tuple[Any, list[int]]:
    """The time grid of a multi-token cell and its two checkpoints (the motion window, the end)."""
    from ..model.params import TimeGrid

    grid = TimeGrid.make(T=cell["T"], dt=_auto_dt(cell["d"], cell["dt"]))
    return grid, [min(grid.steps - 1, round(grid.steps * (1.0 - cell["window"]))), grid.steps]


def _multi_token_options(cell: dict[str, Any]) -> dict[str, Any]:
    """The options of the `simulate` call of a multi-token cell (besides the seed): the
    estimate (`_multi_token_budget`) plans the run the cell makes (`_multi_token_cell`)."""
    from ..sim.options import Execution, Recording, StoppingRule

    grid, (before, _) = _multi_token_grid(cell)
    stop = StoppingRule.decided(cell["tol"]) if cell["until"] == "decided" else StoppingRule()
    return {"params": _model_params(cell), "grid": grid, "runs": cell["runs"],
            "scheme": cell["scheme"], "stopping": stop,
            "recording": Recording(checkpoints=[before, grid.steps]),
            "execution": Execution(sampler=cell["sampler"])}


def _multi_token_budget(cell: dict[str, Any]) -> Any:
    """Memory and work of a multi-token cell: the budget of the plan its run makes
    (`sim.simulate.plan_run`), with the runs coupled for `step_runs` beside it."""
    from ..sim.options import StepControl
    from ..sim.simulate import plan_run

    coupled = cell.get("step_runs", 0)
    b = plan_run(**_multi_token_options(cell),
                 step=StepControl(coupled_runs=coupled) if coupled else None).budget()
    return replace(b, lower=("runs", "n", "d"), longer=("runs", "T", "n", "d"))


def _multi_token_cell(cell: dict[str, Any], seed: int) -> _Stats:
    """Simulate `runs` systems of n uniform tokens, each until decided (every pair within `tol`
    of +-1) or to the horizon T (`until='horizon'`: every run to T), and classify the outcomes
    at `tol`; a run still undecided at T gets the motion test over the last `window * T`."""
    from ..sim.simulate import simulate

    options = _multi_token_options(cell)
    p, grid, tol = options["params"], options["grid"], cell["tol"]
    _check_coupled(cell, p, grid.steps)
    res = simulate(**options, seed=seed)
    if res.gram is None:  # simulate keeps the Gram matrices at the checkpoints asked for
        raise RuntimeError("simulate returned no Gram matrices at the checkpoints")
    g_end, g_before = res.gram[:, -1], res.gram[:, 0]
    report = clusters.analyze(g_end, tol, before=g_before)
    robust = clusters.tolerance_report(g_end, tol, before=g_before)
    return {
        "horizon": grid.T, "steps": grid.steps, "layer_dt": grid.dt, "sampler_used": res.sampler,
        **_outcome_stats(report, p.n), **_summary_stats(report),
        **_hovering_stats(report, g_end, g_before, cell["loose_tol"]),
        **_decision_stats(res.decided_at, grid.steps, grid.dt, cell["runs"]),
        # a run stopped at tol is by construction not yet within tol / 10: not measurable
        "tol_changed_down": robust["changed_down"] if cell["until"] == "horizon" else math.nan,
        "tol_changed_up": robust["changed_up"],
        **_step_stats(cell, p, grid, seed),
    }


_STEP_KEYS = ("p_bipolar", "p_one_cluster")


def _check_coupled(cell: dict[str, Any], p: Any, steps: int) -> None:
    """ParameterError, before any run, where a cell with `step_runs` cannot be coupled at dt,
    2 dt and 4 dt over `steps` layers of model `p` (`sim.coupled._why_not_coupled`; the cell's
    scheme, 'network' where it has none)."""
    if cell.get("step_runs"):
        from ..sim.coupled import _why_not_coupled

        why = _why_not_coupled(p, steps, cell.get("scheme", "network"))
        if why is not None:
            raise ParameterError(f"step_runs: the step error cannot be measured here: {why}")


def _step_stats(cell: dict[str, Any], p: Any, grid: Any, seed: int) -> _Stats:
    """With `step_runs > 0`: the step error of P(bipolar) and P(one cluster) at the cell's step,
    measured on `min(step_runs, runs)` runs coupled at dt, 2 dt and 4 dt (`analysis.measure_step_error`, on
    streams of their own), with its error and the order check; nothing otherwise."""
    runs = min(cell.get("step_runs", 0), cell["runs"])
    if not runs:
        return {}
    from ..analysis.step_coupled import _coupled_seed, measure_step_error

    est = measure_step_error(p, grid.T, grid.dt, runs, _coupled_seed(seed), tol=cell["tol"],
                             until=cell["until"], scheme=cell["scheme"])
    out: _Stats = {"step_runs": runs}
    for key in _STEP_KEYS:
        b, se = est[key].estimate()
        out[f"step_{key}"], out[f"step_{key}_se"] = b, se
        out[f"step_{key}_first_order"] = est[key].first_order()
    return out


_MODELS = ("noise", "flow", "hybrid")


def _step_runs_param(what: str) -> Param:
    """The opt-in `step_runs` of a kind: runs coupled at dt, 2 dt and 4 dt that measure the
    step error of `what` (0: none); measurement-only (`ExperimentKind.seed_free`)."""
    return _integer(0, 0, f"runs coupled at dt, 2 dt and 4 dt that measure the step error of "
                         f"{what} (0: none; the cell's seed is the same either way)")


def _check_step_runs(cell: dict[str, Any]) -> None:
    """Refuse `step_runs = 1` (no paired error); drop `step_runs = 0` from the canonical cell, so
    that the cells (ids, seeds) of earlier sweeps are unchanged."""
    if cell["step_runs"] == 1:
        raise ParameterError("step_runs must be 0 (none) or at least 2 (a paired error); got 1")
    if cell["step_runs"] == 0:
        del cell["step_runs"]


# the model variants of docs/variants.md: in a canonical cell only when not at their defaults,
# so the ids and seeds of the cells of earlier sweeps are unchanged
_VARIANTS: dict[str, Param] = {
    "heads": _integer(1, 1, "attention heads (docs/variants.md §2)"),
    "qk": Param(lambda k, v: QK_LAWS.check(v, k), "identity",
                "query/key law: identity | gaussian | wigner | goe (docs/variants.md §3)"),
    "qk_scale": real(0.0, 1.0, strict=True, doc="scale s of a random qk law"),
    "qk_redraw": _choice(QK_REDRAWS, "run", "run: forms fixed per run; layer: redrawn every layer"),
    "norm": _choice(NORMS, "post", "normalisation placement post | pre | peri (docs/variants.md §4)"),
    "mlp": Param(lambda k, v: MLPS.check(v, k), "none",
                 "random MLP block: none | relu | gelu (docs/variants.md §5)"),
    "mlp_sigma": real(0.0, 1.0, doc="output scale of the MLP block (per coordinate, unit token)"),
}


def _check_model(cell: dict[str, Any], given: set[str]) -> dict[str, Any]:
    if cell["model"] == "flow":
        if "sigma" in given and cell["sigma"] != 0.0:
            raise ParameterError(f"sigma must be 0 (or left out) for model='flow'; got "
                                 f"{cell['sigma']!r}")
        cell["sigma"] = 0.0
    for key, spec in _VARIANTS.items():
        if cell[key] == spec.default:
            del cell[key]
    _check_step_runs(cell)
    return cell  # an invalid combination (qk_scale without a random qk) fails as its cell runs


register(ExperimentKind(
    "multi_token",
    _multi_token_cell,
    {
        "model": _choice(_MODELS, "noise", "noise: M = 0; flow: sigma = 0, M = I; hybrid: M = I"),
        "n": _integer(2, doc="number of tokens"),
        "d": _integer(2, doc="dimension"),
        "beta": real(0.0, doc="attention strength"),
        "sigma": real(0.0, 1.0, doc="matrix-noise scale (0 for the flow)"),
        "runs": _integer(1, doc="independent systems"),
        "T": real(0.0, strict=True, doc="horizon in depth time"),
        "dt": _real_or_auto(doc="layer step alpha^2 ('auto': min(0.02, 0.2/d))"),
        "tol": Param(lambda k, v: check_tol(v, k), 1e-3, "merge/antipodal tolerance"),
        "window": _fraction(0.1, "motion test over the last window*T"),
        "loose_tol": Param(lambda k, v: check_tol(v, k), 1e-3,
                           "undecided runs bipolar at this looser tolerance over the whole "
                           "window are counted as hovering"),
        "attention": Param(lambda k, v: ATTENTION_KINDS.check(v, k), "softmax",
                           "an attention kind of tokensde.model.attention"),
        "sampler": _choice(("auto", "fast", "full", "gram"), "auto"),
        "scheme": _choice(("network", "sde"), "network"),
        "until": _choice(("decided", "horizon"), "decided",
                        "decided: each run stops once decided, T is the maximum; horizon: all to T"),
        **_VARIANTS,
        "step_runs": _step_runs_param("p_bipolar and p_one_cluster"),
    },
    "n tokens from uniform positions: outcome law at absorption (spec §7)",
    finalize=_check_model,
    budget=_multi_token_budget,
    seed_free=("step_runs",),
))


@experiment("null", sleep_s=real(0.0, 0.0), x=real(-math.inf, 0.0), runs=_integer(1, 1),
            T=real(0.0, 1.0))
def _null_cell(cell: dict[str, Any], seed: int) -> _Stats:
    """Engine check: `u` is a uniform drawn from `seed`, after sleeping `sleep_s` seconds."""
    if cell["sleep_s"]:
        time.sleep(cell["sleep_s"])
    return {"u": float(np.random.default_rng(seed).random()), "x2": cell["x"] ** 2}


def _describe(name: str) -> dict[str, Any]:
    """Parameters of kind `name` with their defaults (required ones as None) and docs."""
    k = get_kind(name)
    return {"kind": k.name, "doc": k.doc,
            "params": {p: {"default": None if s.required else s.default, "doc": s.doc}
                       for p, s in sorted(k.params.items())}}
