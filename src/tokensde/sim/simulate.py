"""The batched simulator: many independent deep random-attention networks (or their SDE limit).

`simulate(params, grid, ...)` runs `runs` independent systems of `n` tokens in R^d for
`grid.steps` layers,

    x_i^{k+1} = N(x_i^k + dt M y_i^k + sqrt(dt) V_k y_i^k)       (scheme="network", spec §2)

or the Euler-Maruyama-projected SDE of spec §3 (scheme="sde"), and keeps Gram matrices, tokens
or the user's statistics at chosen checkpoints. Its options are four objects (`sim.options`):
`InitialState`, `StoppingRule`, `Recording` and `Execution`. Numbers depend only on `seed`,
never on the batch size: the batches of runs, their streams, recorders and stopping rules are
the batch driver's (`driver.run_blocks`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..model.params import ModelParams, ParameterError, TimeGrid, _check_int
from ..model.qk.base import QK_SAMPLES
from .batch import (  # re-exported: the batch protocol of the real architectures and benchmarks
    _SCHEMES,
    Draws,
    _initial_tokens,
    default_batch,
    run_batch,
)
from .bias import _check_bias
from .budget import Budget, check_budget
from .coupled import _why_not_coupled
from .driver import Block, Decision, run_blocks
from .expansion import _choose_evaluator, _expansion_basis
from .gram import _frame_forms, run_batch_gram, uniform_frame
from .loop import _Progress
from .norm_sde import _check_peri_sde
from .observe import Observer, _builtin_observers, _coordinate_outputs, _Observations
from .options import (
    _DECIDE_TOL,
    Execution,
    InitialState,
    Recording,
    StepControl,
    StoppingRule,
    _check_token_weights,
    _decide_every,
    _observer_layers,
    _resolve_checkpoints,
)
from .planning import RunPlan
from .result import SimResult
from .rng import _RUN_BLOCK, MLP_STREAM, QK_STREAM  # the stream keys: re-exported
from .samplers import choose_sampler
from .sde import _check_sde_step
from .token_noise import _check_token_noise

__all__ = ["plan_run", "resolve_sampler", "simulate", "simulation_budget"]


def _check_objects(params: Any, grid: Any, initial: Any, stopping: Any, recording: Any,
                   execution: Any, progress: Any) -> None:
    """TypeError naming the argument when one is not of its type."""
    if not isinstance(params, ModelParams):
        raise TypeError(f"params must be a ModelParams (e.g. ModelParams(**d)); got "
                        f"{type(params).__name__}")
    if not isinstance(grid, TimeGrid):
        raise TypeError(f"grid must be a TimeGrid: TimeGrid.make(layers=L) (alpha = 1/sqrt(L)), "
                        f"TimeGrid.make(layers=L, alpha=a) or TimeGrid.make(T=T, dt=dt); got "
                        f"{grid!r}")
    for name, value, cls, example in (
            ("initial", initial, InitialState, "InitialState.pair(0.5)"),
            ("stopping", stopping, StoppingRule, "StoppingRule.decided(tol=1e-6)"),
            ("recording", recording, Recording, "Recording(checkpoints=11, record=('gram',))"),
            ("execution", execution, Execution, "Execution(sampler='fast', dtype='float32')")):
        if not isinstance(value, cls):
            raise TypeError(f"{name} must be a {cls.__name__} (e.g. {example}); got "
                            f"{type(value).__name__}")
    if progress is not None and not callable(progress):
        raise TypeError("progress must be None or a callable taking the number of runs "
                        f"advanced; got {progress!r}")


def _check_memory(plan: RunPlan, execution: Execution) -> None:
    """Refuse a run this machine (or the device) cannot hold at all: a lower bound on the memory
    (kept records + one block of layer workspace, `RunPlan.budget`) against the physical memory;
    the command line checks against the memory available now (`budget.available_memory`)."""
    b = plan.budget()
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    check_budget(b, host, "cpu", warn=False, limit_h=math.inf, have_is="this machine has")
    dev = execution.torch_device
    if dev.type == "cuda":
        have = torch.cuda.get_device_properties(dev).total_memory
        workspace = plan.memory().workspace
        check_budget(Budget(b.what, workspace, 0, b.runs, 0.0, b.detail, b.lower), have,
                     dev.type, warn=False, limit_h=math.inf, have_is="the device has")


def simulation_budget(params: ModelParams, grid: TimeGrid, runs: int = 1, *,
                      initial: InitialState = InitialState(),
                      stopping: StoppingRule = StoppingRule(),
                      recording: Recording = Recording(),
                      execution: Execution = Execution(),
                      step: StepControl | None = None, scheme: str = "network") -> Budget:
    """The memory and work of `simulate` with these arguments: `plan_run(...).budget()`, the
    accounting of the plan `simulate` runs (`planning.RunPlan.budget`).

    Args:
        params: the model.
        grid: the horizon.
        runs: the number of runs.
        initial: as `simulate`.
        stopping: as `simulate` (a run to decision has no upper bound on its time below the
            horizon's).
        recording: as `simulate`.
        execution: as `simulate`.
        step: the step-error measurement beside the run
            (`analysis.step_coupled.simulate_with_step_error`): its coupled runs (`step_runs`)
            add 1.5 (two steps) or 1.75 (three) times their layers' work.
        scheme: as `simulate`.

    Returns:
        The `Budget`.
    """
    return plan_run(params, grid, runs, scheme=scheme, initial=initial, stopping=stopping,
                    recording=recording, execution=execution, step=step).budget()


def _step_runs(params: ModelParams, grid: TimeGrid, runs: int, scheme: str,
              initial: InitialState, step: StepControl | None,
              execution: Execution = Execution()) -> int:
    """The coupled runs that measure the step error beside a run (`StepControl.runs`;
    `analysis.step_coupled.simulate_with_step_error`): none where `coupling_refusal` says why."""
    if step is None or _coupling_refusal(params, grid, runs, scheme, initial, execution):
        return 0
    return step.runs(runs)


def _coupling_refusal(params: ModelParams, grid: TimeGrid, runs: int, scheme: str,
                     initial: InitialState, execution: Execution) -> str | None:
    """Why no run coupled at dt, 2 dt (and 4 dt) can measure the step error of this run
    (`coupled._why_not_coupled`, with the attention evaluation the run would take in R^d), None
    where it can."""
    if params.n < 2:
        return "one token has no outcome"
    used = "fast" if execution.sampler in ("auto", "gram") else execution.sampler
    weights = _check_token_weights(initial.weights, params.n, runs)
    evaluator = _choose_evaluator(params, execution.attention_eval, used, execution.torch_dtype,
                                 weights)
    return _why_not_coupled(params, grid.steps, scheme, evaluator)


def resolve_sampler(params: ModelParams, execution: Execution, recording: Recording) -> str:
    """The sampler that runs (`samplers.choose_sampler`), given what is recorded: `auto` takes
    'gram' only when every output is a function of the inner products (no 'tokens' record, every
    observer declared invariant), and an explicit 'gram' refuses the others (ParameterError
    naming them), since it holds no coordinates in R^d (docs/gram.md).

    Args:
        params: the model.
        execution: its `sampler` is resolved.
        recording: the outputs asked for.

    Returns:
        'fast', 'full' or 'gram'.
    """
    coords = _coordinate_outputs(recording.kept(params.n), recording.observers)
    used = choose_sampler(params, execution.sampler, coordinates=bool(coords))
    if used == "gram" and coords:
        raise ParameterError(
            f"sampler='gram' holds the tokens only up to a rotation (in a frame of their span), "
            f"not their coordinates in R^d; it cannot record {', '.join(map(repr, coords))}: "
            f"record ('gram',) and observers declared Observer(name, fn, invariant=True) "
            f"(functions of the inner products), or use sampler='auto', 'fast' or 'full'")
    return used


def _check_init(init: Any, p: ModelParams, runs: int, rho0: float | None,
                normalize: bool = True) -> str:
    if isinstance(init, str) and init == "pair" and p.n != 2:
        raise ParameterError(f"init='pair' needs n = 2; got n = {p.n}")
    InitialState(init, rho0, normalize=normalize)  # what can be checked without the model
    if isinstance(init, str):
        return init
    a = np.asarray(init.cpu() if isinstance(init, torch.Tensor) else init, dtype=float)
    ok_shape = a.shape == (p.n, p.d) or a.shape == (runs, p.n, p.d)
    if not ok_shape:
        raise ParameterError(f"init array must have shape ({p.n}, {p.d}) or ({runs}, {p.n}, "
                             f"{p.d}); got {a.shape}")
    norms = np.linalg.norm(a, axis=-1)
    if not np.all(np.isfinite(a)) or np.any(norms == 0):
        raise ParameterError("init array must hold finite, non-zero token vectors")
    if not normalize and p.norm == "post" and not np.allclose(norms, 1.0, rtol=0.0,
                                                              atol=_ON_SPHERE):
        raise ParameterError(
            f"InitialState.as_is (normalize=False) keeps the tokens as given, but post-norm "
            f"tokens lie on the unit sphere: got norms from {norms.min():.6g} to "
            f"{norms.max():.6g}; give unit tokens, use InitialState.tokens (which normalises "
            f"them) or norm='pre' / 'peri' (a residual stream off the sphere)")
    return "array"


_ON_SPHERE = 1e-9  # how far from 1 the norm of a post-norm token given as is may be



def _decision(stopping: StoppingRule, dt: float, dtype: str) -> tuple[float, int] | None:
    """(tol, layers between tests) of `until='decided'` (tol checked against the run's dtype),
    or None for the horizon."""
    if stopping.until != "decided":
        return None
    from ..model.checks import check_tol

    t = check_tol(_DECIDE_TOL if stopping.tol is None else stopping.tol, "tol", dtype)
    return t, _decide_every(dt) if stopping.decide_every is None else stopping.decide_every


def _check_model(params: ModelParams, grid: TimeGrid, scheme: str, sampler: str) -> None:
    """Refuse a model the scheme or the sampler cannot run (the SDE step is only warned
    of, by `simulate`: `_warn_sde_step`)."""
    if scheme not in _SCHEMES:
        raise ParameterError(f"scheme must be one of {', '.join(_SCHEMES)}; got {scheme!r}")
    if scheme != "sde" and params.qk_samples != QK_SAMPLES:
        raise ParameterError(f"qk_samples (draws of the qk law per SDE step) applies only with "
                             f"scheme='sde'; got qk_samples={params.qk_samples} with "
                             f"scheme={scheme!r} (leave it at {QK_SAMPLES})")
    if params.norm == "peri" and scheme == "sde":
        _check_peri_sde(params)
    _check_bias(params, scheme)
    _check_token_noise(params, sampler)


def _warn_sde_step(params: ModelParams, grid: TimeGrid) -> None:
    """The SDE step's warning (`sde._check_sde_step`), once every refusal has passed."""
    _check_sde_step(params, grid.dt)


def plan_run(params: ModelParams, grid: TimeGrid, runs: int = 1, *, scheme: str = "network",
             initial: InitialState = InitialState(),
             stopping: StoppingRule = StoppingRule(),
             recording: Recording = Recording(),
             execution: Execution = Execution(),
             step: StepControl | None = None) -> RunPlan:
    """The plan `simulate` runs with these arguments: every option checked against the model,
    once, and the automatic choices resolved (sampler, attention evaluation, batch, checkpoints,
    decision); `RunPlan.budget()` is its memory and work.

    Args:
        params: as `simulate`.
        grid: as `simulate`.
        runs: as `simulate`.
        scheme: as `simulate`.
        initial: as `simulate`.
        stopping: as `simulate`.
        recording: as `simulate`.
        execution: as `simulate`.
        step: the step-error measurement beside the run
            (`analysis.step_coupled.simulate_with_step_error`): its coupled runs (`step_runs`).

    Returns:
        The `RunPlan`.

    Raises:
        ParameterError: as `simulate`, before any work.
    """
    runs = _check_int("runs", runs, 1)
    used = resolve_sampler(params, execution, recording)
    _check_model(params, grid, scheme, used)
    params.attention_kind.check_dtype(str(execution.dtype))
    decide = _decision(stopping, grid.dt, str(execution.dtype))
    init_kind = _check_init(initial.init, params, runs, initial.rho0, initial.normalize)
    w_all = _check_token_weights(initial.weights, params.n, runs)
    if w_all is not None and used == "gram":
        raise ParameterError("weights (token weights) are not carried by sampler='gram'; use "
                             "Execution(sampler='fast') or 'full'")
    tdtype, dev = execution.torch_dtype, execution.torch_device
    evaluator = _choose_evaluator(params, execution.attention_eval, used, tdtype, w_all)
    basis = _expansion_basis(params, tdtype, w_all) if evaluator == "expansion" else 0
    ck = _resolve_checkpoints(recording.checkpoints, grid.steps)
    at = _observer_layers(_observers(params, recording), ck, grid.steps)
    bs = default_batch(runs, params, used, tdtype, dev) if execution.batch_size is None else \
        execution.batch_size
    bs = runs if bs >= runs else math.ceil(bs / _RUN_BLOCK) * _RUN_BLOCK
    # the Gram sampler from a uniform start holds the tokens in a frame of n numbers each
    gram_frame = used == "gram" and isinstance(initial.init, str) and initial.init == "uniform"
    return RunPlan(params, grid, runs, scheme, used, evaluator, basis, bs, ck, at,
                   recording.kept(params.n), w_all, decide, init_kind, tdtype,
                   params.n if gram_frame else params.d,
                   _step_runs(params, grid, runs, scheme, initial, step, execution))


def _observers(params: ModelParams, recording: Recording) -> tuple[Observer, ...]:
    """Every observer of a run: the built-in records, then the user's."""
    return (*_builtin_observers(recording.kept(params.n), params.norm), *recording.observers)


def simulate(
    params: ModelParams,
    grid: TimeGrid,
    *,
    runs: int = 1,
    seed: int = 0,
    scheme: str = "network",
    initial: InitialState = InitialState(),
    stopping: StoppingRule = StoppingRule(),
    recording: Recording = Recording(),
    execution: Execution = Execution(),
    progress: _Progress | None = None,
) -> SimResult:
    """Simulate `runs` independent systems `x^{k+1} = N(x^k + dt M y^k + sqrt(dt) V_k y^k)` (or the SDE).

    A run's numbers depend on the seed, its index and, for a run of the last partial block of
    `RUN_BLOCK` runs, the number of runs: not on the batch size, early stopping nor the CPU.

    Args:
        params: the model (`ModelParams`).
        grid: the horizon, a `TimeGrid`: `TimeGrid.make(layers=L)` (residual scale
            `1/sqrt(L)`), `TimeGrid.make(layers=L, alpha=a)` or `TimeGrid.make(T=T, dt=dt)`
            (T a whole number of steps).
        runs: number of independent runs (noise paths).
        seed: root seed of the run streams.
        scheme: 'network' (the discrete model) or 'sde' (its depth limit).
        initial: where the tokens start, and their weights (`InitialState`: uniform by default,
            `InitialState.pair(rho0)`, `InitialState.tokens(x, weights)`).
        stopping: when each run stops (`StoppingRule`: at the horizon by default;
            `StoppingRule.decided(tol, decide_every)`: the horizon is a maximum and each run
            stops at the first test at which every pair of tokens is within `tol` of +1 or -1;
            `SimResult.decided_at` holds that layer, -1: never; a run's numbers up to its
            decision are those of the fixed-horizon run with the same seed).
        recording: what is kept and when (`Recording(checkpoints, record, observe)`: by default
            the start and the end, Gram matrices up to GRAM_RECORD_MAX tokens and tokens
            above).
        execution: how it is computed (`Execution(sampler, attention_eval, device, dtype,
            batch_size)`); numbers depend on the sampler and the dtype, never on the batch
            size, and no sampler changes what an output means (`resolve_sampler`: the Gram
            sampler runs only when every output is a function of the inner products).
        progress: a progress callback taking the number of run-layers advanced, or None.

    Returns:
        A `SimResult`: numpy arrays on the CPU (Gram matrices and/or tokens in R^d at the
        checkpoints, the final tokens `x` in R^d (refused after the Gram sampler: `state`),
        the observers' outputs in `observed`), the parameters, the seed, the sampler that ran
        and `extra['attention_eval']`.

    Raises:
        ParameterError: an argument outside its range, or options that do not go together
            (the message names the parameter).
        TypeError: an argument of the wrong type.
    """
    _check_objects(params, grid, initial, stopping, recording, execution, progress)
    runs = _check_int("runs", runs, 1)
    seed = _check_int("seed", seed, 0)
    plan = plan_run(params, grid, runs, scheme=scheme, initial=initial, stopping=stopping,
                    recording=recording, execution=execution)
    _check_memory(plan, execution)
    if scheme == "sde":
        _warn_sde_step(params, grid)
    book = _Observations(_observers(params, recording), runs, plan.observed_at, grid.dt)
    layer_of = np.full(runs, -1, dtype=np.int64)
    t0 = time.perf_counter()
    decision = None if plan.decide is None else Decision(*plan.decide, params.norm != "post")
    finals = run_blocks(
        runs, plan.batch_size, lambda b: _run_block(params, grid, scheme, initial, execution, plan, b,
                                               progress),
        seed=seed, device=execution.torch_device, book=book,
        guard=_finite_guard(params, execution.torch_dtype), decision=decision,
        decided_at=layer_of, steps=grid.steps, progress=progress)
    seen = book.arrays()  # 'gram' and 'tokens' go to their own fields
    extra: dict[str, Any] = {"attention_eval": plan.evaluator}
    own = book.own_layers(plan.checkpoints)
    if own:
        extra["observed_at"] = own
    if plan.decide is not None:
        extra |= {"tol": plan.decide[0], "decide_every": plan.decide[1], "max_T": grid.T}
    return SimResult(
        params=params, grid=grid, runs=runs, seed=seed, sampler=plan.sampler, scheme=scheme,
        init=plan.init_kind if plan.init_kind != "pair" else f"pair(rho0={initial.rho0})",
        checkpoints=plan.checkpoints, state=torch.cat(finals).numpy(), gram=seen.pop("gram", None),
        tokens=seen.pop("tokens", None), observed=seen, dtype=str(execution.dtype),
        device=str(execution.device), wall_s=time.perf_counter() - t0, extra=extra,
        decided_at=None if plan.decide is None else layer_of,
    )


def _finite_guard(params: ModelParams, tdtype: torch.dtype) -> Callable[[int, Any], None]:
    """The recorders' guard: FloatingPointError at the first non-finite state recorded."""

    def finite(k: int, xc: torch.Tensor) -> None:
        if not bool(torch.isfinite(xc).all()):
            hint = "lower beta or sigma" + (" or use float64" if tdtype != torch.float64 else "")
            raise FloatingPointError(
                f"non-finite tokens at layer {k} (beta={params.beta}, sigma="
                f"{params.noise_scale}, dtype={tdtype}): the step overflowed; {hint}")
    return finite


def _run_block(params: ModelParams, grid: TimeGrid, scheme: str, initial: InitialState,
               execution: Execution, plan: RunPlan, block: Block, progress: _Progress | None
               ) -> torch.Tensor:
    """One batch of `simulate` (`driver.run_blocks`): its start and its sampler's march, with
    the batch's streams, recorder and stopping rule; the final state on the CPU."""
    tdtype, dev = execution.torch_dtype, execution.torch_device
    rs, rec, start = block.streams, block.recorder, block.start
    init = initial.init
    if plan.sampler == "gram" and isinstance(init, str) and init == "uniform":
        x = uniform_frame(rs, params.n, params.d, tdtype)
    else:
        x = _initial_tokens(init, params, rs, start, tdtype, initial.rho0,
                           as_is=not initial.normalize)

    if plan.sampler == "gram":
        # the Gram sampler draws the forms' compressions to its frame, from the same streams
        framed = _frame_forms(params, scheme, rs.derived(QK_STREAM), tdtype) if \
            params.qk_law.random else None
        mlp_rs = rs.derived(MLP_STREAM) if params.mlp_block.active else None
        stop_test = block.stopping(*(s.retain for s in (rs, framed, mlp_rs) if s is not None))
        xf = run_batch_gram(x, params, grid, rs, scheme, rec, progress,
                            stop_test=stop_test, forms=framed, mlp_rs=mlp_rs)
    else:
        draws = Draws.of(params, scheme, rs, tdtype)
        stop_test = block.stopping(draws.retain)
        w = plan.weights
        wb = None if w is None else torch.as_tensor(w if w.ndim == 1 else w[start:block.stop],
                                                    dtype=tdtype, device=dev)
        xf = run_batch(x, params, grid, draws, plan.sampler, scheme, rec, progress, stop_test=stop_test,
                       weights=wb, attention_eval=plan.evaluator)
    return xf.cpu()
