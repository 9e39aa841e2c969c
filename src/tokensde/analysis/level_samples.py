"""The coupled samples of the convergence study: per-run statistics of networks at several depths
and of their SDE on one Brownian path (`tokensde.sim.coupled` steps them).

A `Problem` is a model, a horizon and the statistics to test (`_STATISTICS`); `coupled_samples`
runs the levels and the fine and half-fine SDE references on shared noise and keeps, per run,
each statistic at T and the strong error at chosen times. `analysis.convergence` fits the orders.

Pure: tensors in, arrays out, explicit seed. Shapes: tokens `(runs, n, d)`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..model.params import ModelParams, ParameterError, _check_int
from ..sim.coupled import _LAWS, CoupledState, _check_levels, coupled_states
from ..sim.driver import Block, run_blocks
from ..sim.layers import normalize
from ..sim.loop import _Progress
from ..sim.observe import Observer, _Observations
from ..sim.options import Execution
from ..sim.rng import _RUN_BLOCK, MLP_STREAM, QK_STREAM, RunStreams, derive_seed
from ..sim.simulate import _initial_tokens
from .clusters import upper_pairs

__all__ = ["CoupledSamples", "Problem", "coupled_samples"]

_KIND_SAMPLES = "tokensde.convergence-samples"
_LEVELS: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256, 512, 1024)

_Statistic = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _pairs(x: torch.Tensor) -> torch.Tensor:
    return upper_pairs(x @ x.transpose(-1, -2))


def _pair_mean(x: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """Mean pairwise inner product `mean_{i<j} <x_i, x_j>` per run (for n = 2: `rho`)."""
    return _pairs(x).mean(-1)


def _pair_square_mean(x: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """Mean squared pairwise inner product `mean_{i<j} <x_i, x_j>^2` per run (n = 2: `rho^2`)."""
    return _pairs(x).square().mean(-1)


def _self_overlap(x: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """Mean overlap with the start `mean_i <x_i(T), x_i(0)>` per run."""
    return (x * x0).sum(-1).mean(-1)


_STATISTICS: dict[str, _Statistic] = {
    "pair_mean": _pair_mean,
    "pair_square_mean": _pair_square_mean,
    "self_overlap": _self_overlap,
}


@dataclass(frozen=True)
class Problem:
    """A reference problem: model, horizon `T`, initial state, and the statistics to test.

    `statistics` maps a key of `_STATISTICS` to its display label.
    """

    name: str
    params: ModelParams
    T: float
    init: str = "uniform"
    rho0: float | None = None
    statistics: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description."""
        return {"name": self.name, "params": self.params.to_dict(), "T": self.T,
                "init": self.init, "rho0": self.rho0, "statistics": dict(self.statistics)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Problem:
        """Inverse of `to_dict`."""
        return cls(name=data["name"], params=ModelParams.from_dict(data["params"]), T=data["T"],
                   init=data["init"], rho0=data["rho0"], statistics=dict(data["statistics"]))


_PROBLEMS: dict[str, Problem] = {
    "two_tokens": Problem(
        "two_tokens", ModelParams(n=2, d=3, beta=1.0), T=2.0, init="pair", rho0=0.0,
        statistics={"pair_mean": "E[rho_T]", "pair_square_mean": "E[rho_T^2]"}),
    "eight_tokens": Problem(
        "eight_tokens", ModelParams(n=8, d=3, beta=1.0), T=2.0, init="uniform",
        statistics={"pair_mean": "E mean<x_i,x_j>", "pair_square_mean": "E mean<x_i,x_j>^2"}),
}


@dataclass
class CoupledSamples:
    """Per-run values from one pass over a shared Brownian path.

    `net`: statistic values of the networks at time T `(laws, levels, stats, runs)`; `ref_fine`,
    `ref_half`: of the SDE on the fine grid and on the grid twice as coarse `(stats, runs)`;
    `sq_err`: the per-run `mean_i |x_i^L(t) - x_i^fine(t)|^2` at the times `strong_at * T`
    `(times, laws, levels, runs)`.
    """

    levels: tuple[int, ...]
    laws: tuple[str, ...]
    stats: tuple[str, ...]
    net: np.ndarray
    ref_fine: np.ndarray
    ref_half: np.ndarray
    sq_err: np.ndarray
    strong_at: tuple[float, ...] = (1.0,)


def coupled_samples(
    problem: Problem,
    levels: Sequence[int] = _LEVELS,
    ref_steps: int = 2048,
    runs: int = 1024,
    seed: int = 0,
    laws: Sequence[str] = _LAWS,
    start: int = 0,
    stop: int | None = None,
    strong_at: Sequence[float] = (1.0,),
    *,
    execution: Execution = Execution(),
    progress: _Progress | None = None,
) -> CoupledSamples:
    """Per-run statistics `f(X^L_T)`, `f(X^h_T)`, `f(X^{2h}_T)` and `|X^L_t - X^h_t|^2` on shared paths.

    Runs `[start, stop)` of a `runs`-run experiment: every level and both references on shared
    Brownian paths, reduced to per-run statistics (strong errors at the times `strong_at * T`,
    fractions in (0, 1] that put a layer boundary of every level on the time).

    Runs are cut into batches of whole `RUN_BLOCK`s (`sim.driver.run_blocks`), so the numbers
    depend only on `seed` and the run index, never on `start`, `stop` or the batch size. The
    strong errors are kept by an observer (`sim.observe.Observer`) of the coupled states with
    its own checkpoints, the fine steps of `strong_at`. Pre-norm: the statistics and the strong
    errors read the token directions `x / |x|` of the residual stream (what attention reads).

    Args:
        problem: The reference problem (model, horizon, initial state, statistics).
        levels: The network depths `L`, each dividing `ref_steps`.
        ref_steps: The fine SDE steps over `[0, T]` (even).
        runs: The runs of the whole experiment.
        seed: The root seed.
        laws: The value-noise laws of the networks.
        start: The first run of this part (a multiple of `RUN_BLOCK`).
        stop: The run after the last of this part (default `runs`).
        strong_at: The time fractions of the strong errors.
        execution: How it runs: `batch_size`, the most runs simulated at once (None: 4096);
            the rest as the coupled levels run (CPU, float64, dense attention): other values
            are refused.
        progress: Called with the number of runs done, or None.

    Returns:
        The `CoupledSamples` of the runs `[start, stop)`.
    """
    lv = _check_levels(levels, ref_steps)
    runs = _check_int("runs", runs, 1)
    seed = _check_int("seed", seed, 0)
    stop = runs if stop is None else stop
    if start % _RUN_BLOCK or not 0 <= start < stop <= runs:
        raise ParameterError(f"run range [{start}, {stop}) must lie in [0, {runs}] and start on a "
                             f"multiple of {_RUN_BLOCK}")
    laws = tuple(laws)
    for law in laws:
        if law not in _LAWS:
            raise ParameterError(f"law must be one of {', '.join(_LAWS)}; got {law!r}")
    p = problem.params
    if p.noise != "matrix":
        raise ParameterError(f"convergence needs noise='matrix'; got noise={p.noise!r}")
    if p.token_noise > 0:
        raise ParameterError(f"convergence does not carry independent token noise; got "
                             f"token_noise={p.token_noise:g} (the allowed value is 0)")
    if p.norm not in ("post", "pre"):
        raise ParameterError(f"convergence takes norm='post' or 'pre' (peri-norm is checked "
                             f"uncoupled: diagnostics/norm_weak_order.py); got norm={p.norm!r}")
    view = normalize if p.norm == "pre" else (lambda t: t)  # pre-norm: what attention reads
    names = tuple(problem.statistics)
    fns = [_STATISTICS[k] for k in names]
    at = _strong_steps(strong_at, lv, ref_steps)
    bs = max(_RUN_BLOCK, _batch_size(execution) // _RUN_BLOCK * _RUN_BLOCK)
    m = stop - start
    net = np.empty((len(laws), len(lv), len(names), m))
    ref_f, ref_h = np.empty((len(names), m)), np.empty((len(names), m))

    def strong(s: CoupledState) -> torch.Tensor:
        """`mean_i |x_i^L - x_i^fine|^2` per run, `(runs, laws, levels)`."""
        return torch.stack([torch.stack([
            (view(s.nets[law, L]) - view(s.fine)).square().sum(-1).mean(-1) for L in lv], -1)
            for law in laws], -2)

    steps = np.array(sorted(at))
    book = _Observations([Observer("sq_err", strong, checkpoints=steps.tolist())], m, [steps],
                        problem.T / ref_steps)
    def advance(block: Block) -> None:
        lo, hi = block.start, block.stop
        rs_init = RunStreams(derive_seed(seed, 1), runs, lo, hi)
        x0 = _initial_tokens(problem.init, p, rs_init, lo, torch.float64, problem.rho0)
        cols = slice(lo - start, hi - start)
        rs = block.streams
        nets, fine, half = coupled_states(x0, p, problem.T, lv, ref_steps, rs, laws, progress,
                                          rs.derived(QK_STREAM), rs.derived(MLP_STREAM),
                                          recorder=block.recorder)
        u0 = view(x0)
        for s, f in enumerate(fns):
            ref_f[s, cols] = f(view(fine), u0).numpy()
            ref_h[s, cols] = f(view(half), u0).numpy()
        for a, law in enumerate(laws):
            for b, L in enumerate(lv):
                x = view(nets[law, L])
                for s, f in enumerate(fns):
                    net[a, b, s, cols] = f(x, u0).numpy()

    run_blocks(runs, bs, advance, seed=seed, first=start, last=stop, book=book)
    kept = book.arrays()["sq_err"]  # (runs, steps, laws, levels), steps sorted
    column = {int(j): c for c, j in enumerate(steps)}
    sq = np.stack([kept[:, column[j]] for j in _steps_in_order(strong_at, ref_steps)])
    return CoupledSamples(lv, laws, names, net, ref_f, ref_h,
                          np.ascontiguousarray(sq.transpose(0, 2, 3, 1)),
                          tuple(float(f) for f in strong_at))


def _batch_size(execution: Execution) -> int:
    """The most runs of `coupled_samples` at once (None: 4096); ParameterError naming the
    other fields of `execution` where they are not those of the coupled levels."""
    if not isinstance(execution, Execution):
        raise TypeError(f"execution must be an Execution; got {type(execution).__name__}")
    fixed = {"sampler": ("auto", "full"), "attention_eval": ("auto", "dense"),
             "device": ("cpu",), "dtype": ("float64",)}
    bad = [f"{k}={getattr(execution, k)!r}" for k, ok in fixed.items()
           if getattr(execution, k) not in ok]
    if bad:
        raise ParameterError(f"coupled_samples runs the coupled levels on the CPU in float64 with "
                             f"dense attention and full value matrices; got {', '.join(bad)}")
    return 4096 if execution.batch_size is None else execution.batch_size


def _steps_in_order(strong_at: Sequence[float], ref_steps: int) -> list[int]:
    """The fine step of each fraction of `strong_at`, in its order."""
    return [round(float(f) * ref_steps) for f in strong_at]


def _concat_samples(parts: Sequence[CoupledSamples]) -> CoupledSamples:
    """Join samples of consecutive run ranges of one experiment."""
    first = parts[0]
    cat = lambda name: np.concatenate([getattr(q, name) for q in parts], axis=-1)  # noqa: E731
    return CoupledSamples(first.levels, first.laws, first.stats, cat("net"), cat("ref_fine"),
                          cat("ref_half"), cat("sq_err"), first.strong_at)


_SAMPLE_ARRAYS: tuple[str, ...] = ("net", "ref_fine", "ref_half", "sq_err")


def _samples_to_arrays(s: CoupledSamples) -> dict[str, np.ndarray]:
    """Arrays (and a JSON `meta` entry) from which `samples_from_arrays` rebuilds `s`."""
    meta = {"levels": list(s.levels), "laws": list(s.laws), "stats": list(s.stats),
            "strong_at": list(s.strong_at)}
    return {"meta": np.array(json.dumps(meta)), **{k: getattr(s, k) for k in _SAMPLE_ARRAYS}}


def _samples_from_arrays(data: Any) -> CoupledSamples:
    """Inverse of `samples_to_arrays` (a dict or an open .npz)."""
    meta = json.loads(str(data["meta"]))
    net, fine, half, sq = (np.asarray(data[k]) for k in _SAMPLE_ARRAYS)
    return CoupledSamples(tuple(meta["levels"]), tuple(meta["laws"]), tuple(meta["stats"]),
                          net, fine, half, sq, tuple(meta["strong_at"]))


def _strong_steps(strong_at: Sequence[float], levels: tuple[int, ...], ref_steps: int
                  ) -> dict[int, int]:
    """Fine-step index -> position, for each time fraction in `strong_at`."""
    out: dict[int, int] = {}
    for k, f in enumerate(strong_at):
        j = round(float(f) * ref_steps)
        ok = 0 < float(f) <= 1 and abs(j - f * ref_steps) < 1e-9
        bad = [L for L in levels if (j * L) % ref_steps] if ok else list(levels)
        if bad:
            raise ParameterError(f"strong_at fractions must lie in (0, 1] and fall on a layer "
                                 f"boundary of every level; {f!r} does not for levels {bad}")
        out[j] = k
    return out


