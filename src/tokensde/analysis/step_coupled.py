"""The step error of outcome probabilities, measured by coupled step doubling.

A probability read at layer step `dt` is `P(dt) = P(0) + c1 dt + c2 dt^2 + O(dt^3)`. The model
runs at `dt`, `2 dt` and `4 dt` on one path of value matrices (`sim.coupled._coupled_steps`: a
layer at `k dt` takes the sum of the `V` of its `k` fine layers over `sqrt k`, the law of a
network drawn at `k dt`), and each run's outcome at every step is read with the one outcome rule
(`clusters._outcome_codes`, through `token_clusters._tokens_outcome`), at its first passage when
runs stop once decided. With `b1 = P(2 dt) - P(dt)` and `b2 = P(4 dt) - P(2 dt)`:

- `b2 - 2 b1 = 6 c2 dt^2`, the order check, reported: 'first order' where it is within
  `_ORDER_Z` paired errors of 0, else 'second order visible, b2/b1 = r';
- the step error of `P(dt)`: `(5 b1 - b2) / 3 = c1 dt + c2 dt^2` (exact to second order; its
  paired error is about 1.8 times that of the first-order `b1`);
- `P(0)`: Richardson `(8 P(dt) - 6 P(2 dt) + P(4 dt)) / 3` (off by `O(dt^3)`; about 1.4 times the
  paired error of the first-order `2 P(dt) - P(2 dt)`, which is off by `-2 c2 dt^2`).

Both second-order forms are used whatever the order check says, and `|b2 - 2 b1| / 3` (what the
second-order term changed) is added to their errors in quadrature for the terms beyond it. The
numbers decided it (docs/simulate.md, "Step error"): for two tokens at five keys, 20000 runs each
at `dt = 0.2/d`, the check missed the curvature at two keys (1.9 and 2.0 paired errors, just
inside its bound), where the first-order Richardson was off the exact value by 1.7 and 2.1 of its
errors while the second-order one was within 1.1 at all five; beside a run (200 coupled runs) the
check sees only a large curvature, so a switch on it would nearly always pick the first-order
forms. At `(1, 3, 0)` and `dt = 1/30` the second-order step error missed the true one by 2.5
joint errors without the added term, by 1.4 with it.

Where the layers are even but not a multiple of 4, only `dt` and `2 dt` run: `b1` and the
first-order Richardson, with the order not checked (the report says so). Every combination has a
paired standard error: a probability over the decided runs is a ratio `H / D`, whose per-run
influence is `u_i = (h_i - P d_i) / mean(d)`, and a combination `sum w_k P_k` has the standard
deviation of `sum w_k u_{i,k}` over `sqrt(runs)`. The pairing removes the runs that end alike at
every step; for two tokens, where an outcome flips between `dt` and `2 dt` in about one run in
seven, the paired error of `b1` is still 0.6 to 0.7 of that of two independent samples.

`choose_step` picks the step of a run from a short coupled pilot (`_STEP_RULE`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from ..model.params import ModelParams, ParameterError, TimeGrid, _check_int
from ..sim.coupled import _levels_of, _why_not_coupled
from ..sim.driver import Block, run_blocks
from ..sim.loop import _Progress
from ..sim.options import (
    _DECIDE_TOL,
    Execution,
    InitialState,
    Recording,
    StepControl,
    StoppingRule,
    _check_token_weights,
)
from ..sim.planning import COUPLED_BATCH
from ..sim.result import SimResult
from .clusters import Outcome
from .step_error import StepError, mc_error

__all__ = [
    "Paired", "StepChoice", "choose_step", "estimates_of", "measure_step_error",
    "simulate_with_step_error",
]

#: the probabilities of `clusters._outcome_summary`, by the outcome they count
_OUTCOMES: dict[str, Outcome] = {"p_one_cluster": Outcome.SINGLE, "p_bipolar": Outcome.BIPOLAR}
#: runs of the coupled subsample that measures the step error beside a run (at most `runs`)
_COUPLED_RUNS = StepControl().coupled_runs  # what `pair_step` measures on, as the budget counts
#: runs of the pilot that chooses the step (at most `runs`)
_PILOT_RUNS = 400
#: the most layers a chosen step may take
_MAX_CHOSEN_LAYERS = 20000
#: a chosen number of layers is a multiple of this: three steps (dt, 2 dt, 4 dt) are coupled
_LAYER_MULTIPLE = 4
_STEP_RULE = (
    "the step is chosen so that the step error is below the Monte Carlo error of each "
    "probability: a pilot of runs coupled at dt0, 2 dt0 and 4 dt0 (dt0 = T / L0, L0 a multiple "
    "of 4, dt0 about 0.4 / max(d, 1 + beta)) measures the second-order step error b0 +- s0 of "
    "P(dt0); the step is dt0 times (Monte Carlo "
    "error) / (|b0| + 2 s0), the linear scaling of its upper bound, made a whole number of "
    "layers, a multiple of 4")


#: the order check rejects first order when `|b2 - 2 b1|` exceeds this many paired errors
_ORDER_Z = 2.0


@dataclass(frozen=True)
class Paired:
    """One probability from runs coupled at `dt`, `2 dt` and (three levels) `4 dt`: `fine` =
    P(dt), `coarse` = P(2 dt), `bias` = b1 = P(2 dt) - P(dt) (the first-order step error of
    P(dt)), `richardson` = 2 P(dt) - P(2 dt); with three levels also `coarse4` = P(4 dt),
    `bias4` = b2 = P(4 dt) - P(2 dt), the order check `order` = b2 - 2 b1 (`6 c2 dt^2` for
    `P(dt) = P(0) + c1 dt + c2 dt^2`), the second-order step error `step` = (5 b1 - b2) / 3 and
    `richardson2` = (8 P(dt) - 6 P(2 dt) + P(4 dt)) / 3, each with its paired standard error
    (None with two levels); `independent_se` is what the error of `bias` would be from two
    independent samples of the same size. `estimate` and `extrapolated` give what is reported:
    the second-order forms where there are three levels (module docstring)."""

    fine: float
    coarse: float
    bias: float
    bias_se: float
    richardson: float
    richardson_se: float
    independent_se: float
    runs: int
    decided: int
    coarse4: float | None = None
    bias4: float | None = None
    bias4_se: float | None = None
    order: float | None = None
    order_se: float | None = None
    step: float | None = None
    step_se: float | None = None
    richardson2: float | None = None
    richardson2_se: float | None = None

    @property
    def levels(self) -> int:
        """2 (dt, 2 dt) or 3 (dt, 2 dt, 4 dt)."""
        return 2 if self.coarse4 is None else 3

    def first_order(self) -> bool | None:
        """Whether the order check `|b2 - 2 b1| <= ORDER_Z se` holds (None: two levels, or no
        paired error)."""
        if self.order is None or self.order_se is None or not math.isfinite(self.order_se):
            return None
        return abs(self.order) <= _ORDER_Z * self.order_se

    def order_text(self) -> str:
        """'order check: first order', 'order check: second order visible, b2/b1 = r', or why
        the order is not checked."""
        first = self.first_order()
        if first is None:
            return ("order not checked: two steps, the layers are not a multiple of 4"
                    if self.levels == 2 else
                    "order not checked (no paired error)")
        if first:
            return "order check: first order"
        assert self.bias4 is not None
        r = self.bias4 / self.bias if self.bias != 0 else math.inf
        return f"order check: second order visible, b2/b1 = {r:.2f}"

    def spread(self) -> float:
        """`|b2 - 2 b1| / 3 = |2 c2 dt^2|`, what the second-order term changes in the step error
        and in Richardson: the error added to the second-order forms for the terms beyond them
        (0 with two levels)."""
        return 0.0 if self.order is None else abs(self.order) / 3.0

    def estimate(self) -> tuple[float, float]:
        """The step error of P(dt) and its error: with three levels the second-order `(5 b1 -
        b2) / 3` with its paired error and `spread` added in quadrature, whatever the order
        check says (module docstring: why); with two, `b1` and its paired error."""
        if self.step is not None and self.step_se is not None:
            return self.step, math.hypot(self.step_se, self.spread())
        return self.bias, self.bias_se

    def step_error(self, dt: float) -> StepError:
        """The measured step error (`estimate`) as a `StepError` of P(dt)."""
        if not math.isfinite(self.bias):
            return StepError(None, math.nan, dt, "no run decided at every step")
        b, se = self.estimate()
        at = "dt, 2 dt and 4 dt" if self.levels == 3 else "dt and 2 dt"
        return StepError(b, se, dt, f"measured on {self.runs} runs coupled at {at}; "
                         f"{self.order_text()}", resolve=True)

    def extrapolated(self, level: float = 0.95) -> dict[str, Any]:
        """The Richardson value with its interval (t quantiles): with three levels `(8 P(dt) - 6
        P(2 dt) + P(4 dt)) / 3` with its paired error and `spread` in quadrature, with two `2
        P(dt) - P(2 dt)` and its paired error."""
        from scipy.stats import t as student

        p, se, form = self.richardson, self.richardson_se, "2 P(dt) - P(2 dt)"
        if self.richardson2 is not None and self.richardson2_se is not None:
            p, se = self.richardson2, math.hypot(self.richardson2_se, self.spread())
            form = "(8 P(dt) - 6 P(2 dt) + P(4 dt)) / 3"
        q = float(student.ppf(0.5 + level / 2, max(self.runs - 1, 1)))
        lo, hi = p - q * se, p + q * se
        return {"p": p, "se": se, "ci": [lo, hi], "level": level, "runs": self.runs,
                "form": form,
                "text": f"{p:.4f} [{lo:.4f}, {hi:.4f}] ({level:.0%}, Richardson {form} over "
                        f"{self.runs} coupled runs; {self.order_text()})"}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


def _influence(hits: np.ndarray, dec: np.ndarray) -> tuple[float, np.ndarray]:
    """The ratio `P = sum(h) / sum(d)` and its per-run influence `(h - P d) / mean(d)`."""
    m = dec.mean()
    if m == 0:
        return math.nan, np.full(hits.shape, math.nan)
    p = hits.sum() / dec.sum()
    return float(p), (hits - p * dec) / m


def _se(u: np.ndarray) -> float:
    n = u.shape[0]
    return float(u.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan


def _combined(ps: list[float], us: list[np.ndarray], w: tuple[float, ...]) -> tuple[float, float]:
    """The combination `sum w_k P_k` and its paired error (of `sum w_k u_k`); `w` may be
    shorter than `ps` (the weights beyond it are 0)."""
    n = len(w)
    return (float(sum(a * b for a, b in zip(w, ps[:n], strict=True))),
            _se(sum((a * b for a, b in zip(w, us[:n], strict=True)), np.zeros(us[0].shape))))


def _paired(ps: list[float], us: list[np.ndarray], runs: int, decided: int) -> Paired:
    """`Paired` of the probabilities `ps` at dt, 2 dt (and 4 dt) and their influences `us`."""
    b1, b1_se = _combined(ps, us, (-1, 1))
    r1, r1_se = _combined(ps, us, (2, -1))
    base = Paired(ps[0], ps[1], b1, b1_se, r1, r1_se, math.hypot(_se(us[0]), _se(us[1])),
                  runs, decided)
    if len(ps) == 2:
        return base
    b2, b2_se = _combined(ps, us, (0, -1, 1))
    order, order_se = _combined(ps, us, (2, -3, 1))
    step, step_se = _combined(ps, us, (-5 / 3, 2, -1 / 3))
    r2, r2_se = _combined(ps, us, (8 / 3, -2, 1 / 3))
    return replace(base, coarse4=ps[2], bias4=b2, bias4_se=b2_se, order=order,
                   order_se=order_se, step=step, step_se=step_se, richardson2=r2,
                   richardson2_se=r2_se)


def _paired_estimates(codes: np.ndarray) -> dict[str, Paired]:
    """The probabilities of `OUTCOMES` at each step from outcome codes `(runs, 2)` or `(runs,
    3)` (columns at `dt`, `2 dt`, `4 dt`), paired by run.

    Args:
        codes: `clusters.Outcome` codes of each coupled run at each step.

    Returns:
        `Paired` by summary key.
    """
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] not in (2, 3):
        raise ParameterError(f"codes must have shape (runs, 2) or (runs, 3); got {codes.shape}")
    dec = (codes == Outcome.SINGLE) | (codes == Outcome.BIPOLAR)
    both = int(dec.all(1).sum())
    out = {}
    for name, o in _OUTCOMES.items():
        ps, us = zip(*(_influence((codes[:, k] == o).astype(float), dec[:, k].astype(float))
                       for k in range(codes.shape[1])), strict=True)
        out[name] = _paired(list(ps), list(us), codes.shape[0], both)
    return out


def _coupled_outcomes(p: ModelParams, T: float, dt: float, runs: int, seed: int, *,
                     init: Any = "uniform", rho0: float | None = None, tol: float = 1e-8,
                     until: str = "horizon", scheme: str = "network",
                     weights: Any = None, dtype: torch.dtype = torch.float64,
                     device: str = "cpu", batch_size: int = COUPLED_BATCH, levels: int | None = None,
                     decide_every: int | None = None) -> np.ndarray:
    """Outcome codes `(runs, levels)` of `runs` runs of `p` at steps `dt`, `2 dt` (and `4 dt`)
    on one path each (`sim.coupled._coupled_steps`), read at the horizon `T` or, with
    `until='decided'`, at each step's first test decided (a first passage, as a run stopped once
    decided reads it; tested every `options._decide_every(dt)` fine steps rounded up to a multiple
    of the coarsest step).

    Args:
        p: the model (`sim.coupled._check_step_coupling`).
        T: the horizon, a whole even number of steps `dt` (a multiple of 4 for three levels).
        dt: the fine step.
        runs: the coupled runs.
        seed: their root seed (streams of their own: not the runs of `simulate` with this seed).
        init: 'uniform', 'pair' or tokens `(n, d)` / `(runs, n, d)`.
        rho0: the start of `init='pair'`.
        tol: the outcome tolerance (and the decision's).
        until: 'horizon' or 'decided'.
        scheme: 'network' or 'sde'.
        weights: token weights `(n,)` or `(runs, n)`, or None.
        dtype: the torch dtype.
        device: the torch device.
        batch_size: runs advanced together (numbers do not depend on it).
        levels: 2 or 3 steps coupled; None: `levels_of` the number of steps.
        decide_every: with `until='decided'`, fine steps between two decision tests (rounded up to a
            multiple of the coarsest step), as the run's `StoppingRule.decide_every`; None:
            `options._decide_every(dt)`.

    Returns:
        The codes, int8.
    """
    from ..sim.batch import _initial_tokens
    from ..sim.coupled import _check_step_coupling, _coupled_steps
    from ..sim.options import _decide_every as decide_every_of
    from ..sim.rng import _RUN_BLOCK

    _check_step_coupling(p)
    runs = _check_int("runs", runs, 1)
    steps = round(T / dt)
    if steps < 2 or steps % 2 or not math.isclose(steps * dt, T, rel_tol=1e-9):
        raise ParameterError(f"step doubling needs T = {T:g} to be an even number of steps dt = "
                             f"{dt:g}; got T/dt = {T / dt:g}")
    levels = _levels_of(steps) if levels is None else levels
    every = decide_every_of(dt) if decide_every is None else _check_int(
        "decide_every", decide_every, 1)
    decide = (tol, every) if until == "decided" else None
    batch_size = max(_RUN_BLOCK, batch_size // _RUN_BLOCK * _RUN_BLOCK)
    wt = None if weights is None else torch.as_tensor(np.asarray(weights), dtype=dtype,
                                                      device=device)

    def advance(block: Block) -> np.ndarray:
        rs = block.streams
        x0 = _initial_tokens(init, p, rs, block.start, dtype, rho0)
        w = wt if wt is None or wt.ndim == 1 else wt[block.start:block.stop]
        return _codes(_coupled_steps(x0, p, steps, dt, rs, scheme, decide, w, levels), p, tol)

    return np.concatenate(run_blocks(runs, batch_size, advance, seed=seed, device=device))


def _codes(both: torch.Tensor, p: ModelParams, tol: float) -> np.ndarray:
    """Outcome codes `(runs, levels)` of the states `(runs, levels, n, d)` (`tokens_outcome`, of
    the directions off the sphere)."""
    from .token_clusters import _tokens_outcome

    if p.norm != "post":  # the residual stream: its directions
        both = both / torch.linalg.vector_norm(both, dim=-1, keepdim=True)
    return np.stack([_tokens_outcome(both[:, k], tol)[0] for k in range(both.shape[1])], 1)


def measure_step_error(p: ModelParams, T: float, dt: float, runs: int, seed: int, **kw: Any
                       ) -> dict[str, Paired]:
    """The step error of each outcome probability at step `dt`, `paired_estimates` of
    `_coupled_outcomes` (runs coupled at dt, 2 dt and, for a multiple of 4 layers, 4 dt).

    Args:
        p: the model.
        T: the horizon.
        dt: the fine step (`T / dt` layers).
        runs: the coupled runs.
        seed: their root seed.
        **kw: as `_coupled_outcomes` (`init`, `rho0`, `tol`, `until`, `scheme`, ...).

    Returns:
        The `Paired` estimates by summary key ('p_one_cluster', 'p_bipolar').
    """
    return _paired_estimates(_coupled_outcomes(p, T, dt, runs, seed, **kw))


def _coupled_seed(seed: int) -> int:
    """The root seed of the coupled runs beside a run of root seed `seed` (streams of their
    own)."""
    from ..sim.rng import derive_seed

    return derive_seed(seed, 44, 2)


@dataclass(frozen=True)
class StepChoice:
    """The step chosen for a run of horizon `T` (`choose_step`): the grid, the pilot's step
    `dt0` and its measured `Paired` estimates, and `why`, one line."""

    grid: TimeGrid
    dt0: float
    pilot: dict[str, Paired]
    capped: bool
    why: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"dt": self.grid.dt, "layers": self.grid.steps, "dt0": self.dt0,
                "capped": self.capped, "why": self.why,
                "pilot": {k: v.to_dict() for k, v in self.pilot.items()}}


def _start_step(p: ModelParams) -> float:
    """The pilot's step, about `0.4 / max(d, 1 + beta)` (smaller where the interaction is
    strong)."""
    return 0.4 / max(p.d, 1.0 + p.beta)


def _layers_for(T: float, dt: float) -> int:
    """The smallest number of layers, a multiple of `_LAYER_MULTIPLE`, whose step `T / L` is at
    most `dt`."""
    m = _LAYER_MULTIPLE
    return m * max(1, math.ceil(T / dt / m - 1e-9))


def _wanted_step(pilot: dict[str, Paired], dt0: float, runs: int) -> float:
    """The step at which the upper bound `|b0| + 2 s0` of each pilot step error
    (`Paired.estimate`), scaled linearly to the step, equals the Monte Carlo error of its
    probability over `runs` runs (`mc_error` at the pilot's P(dt0), kept off 0 and 1 by half a
    pilot run); at most `dt0`. Where the error is of second order, the linear scaling overstates
    it at smaller steps: the step errs small."""
    dt = dt0
    for e in pilot.values():
        if not math.isfinite(e.bias):
            continue
        floor = 0.5 / max(e.runs, 1)
        pf = min(max(e.fine, floor), 1.0 - floor)
        b, se = e.estimate()
        bound = abs(b) + 2.0 * se
        target = mc_error(pf, runs)
        if bound > target:
            dt = min(dt, dt0 * target / bound)
    return dt


def choose_step(p: ModelParams, T: float, runs: int, seed: int, *, scheme: str = "network",
                pilot_runs: int = _PILOT_RUNS, **kw: Any) -> StepChoice:
    """The step of a run of `runs` runs to horizon `T` by `_STEP_RULE`: a pilot of `min(runs,
    pilot_runs)` runs coupled at `dt0`, `2 dt0` and `4 dt0` (`_start_step`), then `wanted_step`,
    as a whole number of layers, a multiple of 4 (`layers_for`; at most `_MAX_CHOSEN_LAYERS`:
    `capped` then).

    Args:
        p: the model.
        T: the horizon.
        runs: the runs the chosen step is for (their Monte Carlo error is the target).
        seed: the run's root seed (the pilot uses streams of its own).
        scheme: 'network' or 'sde'.
        pilot_runs: the pilot's runs at most.
        **kw: as `_coupled_outcomes` (init, rho0, tol, until, weights, dtype, device).

    Returns:
        The `StepChoice`.
    """
    from ..sim.rng import derive_seed

    L0 = _layers_for(T, _start_step(p))
    dt0 = T / L0
    n_pilot = min(runs, _check_int("pilot_runs", pilot_runs, 2))
    pilot = measure_step_error(p, T, dt0, n_pilot, derive_seed(seed, 44, 1), scheme=scheme, **kw)
    dt = _wanted_step(pilot, dt0, runs)
    L = _layers_for(T, dt)
    capped = L > _MAX_CHOSEN_LAYERS
    L = min(L, _MAX_CHOSEN_LAYERS)
    bounds = ", ".join(f"{k} {e.estimate()[0]:+.4f} ± {e.estimate()[1]:.4f} ({e.order_text()})"
                       for k, e in pilot.items() if math.isfinite(e.bias))
    head = (f"dt = {T / L:.4g} ({L} layers) chosen so that the estimated step error is below "
            f"the Monte Carlo error of {runs} runs: a pilot of {n_pilot} runs coupled at dt0 = "
            f"{dt0:.4g}, 2 dt0 and 4 dt0 ")
    why = head + (f"measured the step error {bounds}, scaled linearly to the step from its "
                  f"upper bound |b| + 2 se" if bounds else
                  "decided no run at every step, so the rule could not be checked: dt0 kept")
    if capped:
        why += f"; capped at {_MAX_CHOSEN_LAYERS} layers, so the rule may not hold"
    return StepChoice(TimeGrid.make(T=T, dt=T / L), dt0, pilot, capped, why)


def _add_measured(summary: dict[str, Any], measured: dict[str, Paired] | None, dt: float,
                 extrapolate: bool = False) -> None:
    """Fill the step error of each probability of `summary` (`clusters._outcome_summary`) that
    has none with the measured one (`Paired.step_error`), and with
    `extrapolate` add the Richardson value (`summary[key]['extrapolated']`); with `measured`
    None, nothing.

    Args:
        summary: the summary, changed in place.
        measured: `paired_estimates` by key, or None.
        dt: the run's step.
        extrapolate: add the Richardson values.
    """
    if measured is None:
        return
    for key, e in measured.items():
        est = summary.get(key)
        if est is None:
            continue
        old = est.get("step_error")
        if old is None or old.get("bias") is None:
            est["step_error"] = e.step_error(dt).to_dict(mc_error(est["p"], est["decided"]))
        if extrapolate:
            est["extrapolated"] = e.extrapolated()


def _add_scaled(summary: dict[str, Any], choice: StepChoice) -> None:
    """Put the pilot's step error (`Paired.estimate`), scaled linearly to the chosen step (`b0
    dt / dt0`, its error likewise), beside each probability of `summary` that has none."""
    dt, r = choice.grid.dt, choice.grid.dt / choice.dt0
    for key, e in choice.pilot.items():
        est = summary.get(key)
        if est is None or (est.get("step_error") or {}).get("bias") is not None:
            continue
        b, se = e.estimate()
        step = (StepError(None, math.nan, dt, "no pilot run decided at every step")
                if not math.isfinite(e.bias) else
                StepError(b * r, se * r, dt, f"scaled linearly from {e.runs} runs coupled at "
                          f"dt0 = {choice.dt0:.4g}, 2 dt0 and 4 dt0; {e.order_text()}",
                          resolve=True))
        est["step_error"] = step.to_dict(mc_error(est["p"], est["decided"]))


def _not_estimated(summary: dict[str, Any], dt: float, why: str) -> None:
    """Mark each probability of `summary` without a step error 'not estimated' (`why`); one
    already marked keeps its reason."""
    for key in _OUTCOMES:
        est = summary.get(key)
        if est is not None and est.get("step_error") is None:
            est["step_error"] = StepError(None, math.nan, dt, why).to_dict(
                mc_error(est["p"], est["decided"]))


def _beside_run(p: ModelParams, grid: TimeGrid, runs: int, seed: int, coupled: int,
               **kw: Any) -> dict[str, Any]:
    """The coupled measurement beside a run (`simulate_with_step_error`): `coupled` runs
    (`coupled_seed(seed)`) at the run's step, twice and (layers a multiple of 4) four times it
    (`levels_of`), as a JSON-ready dict (`estimates`: `Paired.to_dict()` by summary key;
    `reason` where nothing was measured)."""
    why = None if coupled > 0 else "switched off"
    why = why or _why_not_coupled(p, grid.steps, kw.get("scheme", "network"))
    if why is not None or p.n < 2:
        return {"coupled_runs": 0, "dt": grid.dt, "reason": why or "one token"}
    est = measure_step_error(p, grid.T, grid.dt, coupled, _coupled_seed(seed), **kw)
    return {"coupled_runs": coupled, "dt": grid.dt, "runs": runs,
            "levels": _levels_of(grid.steps), "estimates": {k: v.to_dict() for k, v in est.items()}}


def estimates_of(record: dict[str, Any]) -> dict[str, Paired] | None:
    """The `Paired` estimates of a `_beside_run` record (None where nothing was measured)."""
    est = record.get("estimates")
    return None if est is None else {k: Paired(**v) for k, v in est.items()}


def _grid_or_chosen(p: ModelParams, layers: int | None, alpha: float | None, T: float | None,
                   dt: float | None, runs: int, seed: int, scheme: str = "network", **kw: Any
                   ) -> tuple[TimeGrid, StepChoice | None]:
    """The `TimeGrid` of `(layers, alpha)` or `(T, dt)` (`TimeGrid.make`, exact), or, with `T`
    and no `dt`, the step chosen by `choose_step` (`kw` as `_coupled_outcomes`) with its
    `StepChoice` (None otherwise); ParameterError where step doubling cannot run."""
    if T is None or dt is not None:
        return TimeGrid.make(layers, alpha, T, dt, exact=True), None
    from ..sim.expansion import _choose_evaluator

    evaluator = _choose_evaluator(p, "auto", "fast", kw.get("dtype", torch.float64))
    why = _why_not_coupled(p, 2, scheme, evaluator) or (
        None if p.n >= 2 else "one token has no outcome")
    if why is not None:
        raise ParameterError(f"--time without --dt chooses the step by step doubling, which "
                             f"cannot run here ({why}); give --dt")
    choice = choose_step(p, T, runs, seed, scheme=scheme, **kw)
    return choice.grid, choice


def _step_summary(pairs: dict[str, Any], res: Any, choice: StepChoice | None,
                 extrapolate: bool) -> dict[str, Any]:
    """Put a step error beside each probability of `pairs` (`clusters._outcome_summary` of the
    run `res`): the pilot's scaled estimate where the step was chosen (`choice`), else the
    coupled measurement `res.extra['step']`, else 'not estimated' with the reason; with
    `extrapolate`, the Richardson values. Returns `{'coupled_runs': ..., 'reason': ...}`."""
    dt = res.grid.dt
    if choice is not None:
        _add_scaled(pairs, choice)
    rec = res.extra.get("step", {"coupled_runs": 0, "reason": "switched off (--no-step-error)"})
    _add_measured(pairs, estimates_of(rec), dt, extrapolate)
    _not_estimated(pairs, dt, rec.get("reason", "not measured"))
    return {"coupled_runs": rec["coupled_runs"], **({"reason": rec["reason"]} if "reason" in rec
                                                     else {})}


def _pair_step(p: ModelParams, rho0: float | str, result: dict[str, Any], engine: str,
              tol: float, until: str, seed: int, coupled: int = _COUPLED_RUNS) -> StepError:
    """The step error of P_anti of a two-token run (`pair_monte_carlo.monte_carlo`'s `result`),
    measured on `min(runs, coupled)` coupled runs (`coupled_seed(seed)`); none for the
    reduced engine or where step doubling cannot run (`why_not_coupled`)."""
    dt, steps = result["dt"], result["steps"]
    if engine != "network":
        return StepError(None, math.nan, dt, "engine 'reduced' (the 1-D diffusion) is not "
                         "measured")
    why = _why_not_coupled(p, steps, "network")
    if why is not None:
        return StepError(None, math.nan, dt, why)
    init, r0 = ("uniform", None) if isinstance(rho0, str) else ("pair", rho0)
    every = 1 if p.mlp_block.active else None  # a first passage, as the run tests it
    e = measure_step_error(p, result["T"], result["T"] / steps,
                           min(result["counts"]["runs"], coupled), _coupled_seed(seed),
                           init=init, rho0=r0, tol=tol, until=until, decide_every=every)["p_bipolar"]
    return e.step_error(result["T"] / steps)


def simulate_with_step_error(params: ModelParams, grid: TimeGrid, *,
                             step: StepControl = StepControl(), runs: int = 1, seed: int = 0,
                             scheme: str = "network", initial: InitialState = InitialState(),
                             stopping: StoppingRule = StoppingRule(),
                             recording: Recording = Recording(),
                             execution: Execution = Execution(),
                             progress: _Progress | None = None) -> SimResult:
    """`simulate`, and beside it the step error of its outcome probabilities measured on runs
    coupled at dt, 2 dt (and 4 dt) (`_beside_run`), in `extra['step']`.

    The run's own numbers are those of `simulate` with the same arguments; `min(runs,
    step.coupled_runs)` coupled runs (every run with `step.extrapolate`) start as the run does,
    on streams of their own (`coupled_seed`), and are read with the run's tolerance (its
    stopping rule's, or `step.tol` / `DECIDE_TOL` for a run to the horizon). `estimates_of`
    reads the record back, `_add_measured` puts it beside a summary.

    Args:
        params: as `simulate`.
        grid: as `simulate`.
        step: the measurement (`StepControl`); with `extrapolate`, a run that cannot be coupled
            is refused before any work.
        runs: as `simulate`.
        seed: as `simulate`.
        scheme: as `simulate`.
        initial: as `simulate`.
        stopping: as `simulate`.
        recording: as `simulate`.
        execution: as `simulate`.
        progress: as `simulate`.

    Returns:
        The `SimResult`, with `extra['step']`.
    """
    from ..sim.simulate import _coupling_refusal, _step_runs, simulate

    if not isinstance(step, StepControl):
        raise TypeError(f"step must be a StepControl (e.g. StepControl(extrapolate=True)); got "
                        f"{type(step).__name__}")
    why = None
    if isinstance(params, ModelParams) and isinstance(grid, TimeGrid) and isinstance(
            initial, InitialState) and isinstance(execution, Execution):
        why = _coupling_refusal(params, grid, _check_int("runs", runs, 1), scheme, initial,
                               execution)
        if why is not None and step.extrapolate:
            raise ParameterError(f"extrapolate (Richardson over dt, 2 dt and 4 dt) cannot run "
                                 f"here: {why}")
    res = simulate(params, grid, runs=runs, seed=seed, scheme=scheme, initial=initial,
                   stopping=stopping, recording=recording, execution=execution,
                   progress=progress)
    tol = res.extra.get("tol", _DECIDE_TOL if step.tol is None else step.tol)
    n = _step_runs(params, grid, res.runs, scheme, initial, step, execution)
    weights = _check_token_weights(initial.weights, params.n, res.runs)
    rec = _beside_run(params, grid, res.runs, res.seed, n, init=initial.init, rho0=initial.rho0,
                     tol=tol, until=stopping.until, decide_every=stopping.decide_every,
                     scheme=scheme, weights=weights,
                     dtype=execution.torch_dtype, device=str(execution.device))
    if n == 0:
        rec["reason"] = why or "switched off"
    res.extra["step"] = {**rec, "tol": tol, "extrapolate": step.extrapolate}
    return res
