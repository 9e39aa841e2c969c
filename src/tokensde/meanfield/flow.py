"""Weighted token systems carried by one common noise path: n particles and the many-token limit.

With common noise only, every token moves by the same random flow `Phi_t` (the layer map or the SDE
step of `tokensde.sim`, driven by one `V_k` per layer and run), and the attention of a token at
`x` is an integral against the current measure `mu_t`:
`y(x) = ∫ exp(beta <x, x'>) x' dmu_t(x') / ∫ exp(beta <x, x'>) dmu_t(x')`. So `mu_t` is
`mu_0` pushed forward by that flow, and a weighted node set `sum_k w_k delta_{x_k}` moved by the
same layers is the limit measure up to the quadrature error of its nodes. n particles are the
special case of `n` equal weights (and, once tokens coincide, integer multiples).

`run_coupled` advances several such systems (particles at several n, the limit at K nodes) on the
SAME noise path: the value matrix `V_k` `(d, d)` of each run and layer is drawn once from the run's
own stream (`noise_path`, independent of every system's size and of batching) and applied to all.
Nodes closer than `merge_tol` (`1 - <x_i, x_j> < merge_tol`) are merged (weights summed, position
their weighted mean), so a measure that concentrates into atoms costs what its atoms cost.
The batches of runs go through the one batch driver `tokensde.sim.driver.run_blocks` (their
streams: `path_streams`) and the layers through the one layer loop `tokensde.sim.loop._march`:
`_Layer` steps every system, the stopping rule `_Absorb` merges, decides and takes decided runs
out of the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..analysis.clusters import is_antipodal, is_merged
from ..model.checks import ParameterError, _check_int, _check_real
from ..model.noise import apply_matrices
from ..model.params import ModelParams, TimeGrid
from ..sim.budget import EXPANSION_UNITS, RUN_UNITS, SCORE_UNITS, Budget
from ..sim.decide import _DENSE_MAX, _geometric_decided
from ..sim.driver import Block, run_blocks
from ..sim.expansion import _choose_evaluator, _expansion_basis
from ..sim.layers import _attention_output, network_step, normalize
from ..sim.loop import _march
from ..sim.options import Execution, StoppingRule, _decide_every
from ..sim.rng import _RUN_BLOCK, RunStreams
from ..sim.sde import sde_step
from .merge import merge_nodes

__all__ = ["MERGE_TOL", "FlowPlan", "FlowResult", "System", "check_flow_params", "decided",
           "noise_path", "path_streams", "run_coupled"]

_STEPS = {"network": network_step, "sde": sde_step}
MERGE_TOL = 1e-10  # default merge threshold on 1 - <x_i, x_j> (angle about 1.4e-5)
_FLOW_TOL = 1e-6  # default decision tolerance of `run_coupled` (`StoppingRule.decided()`)


@dataclass
class System:
    """A weighted token system: tokens `x` `(runs, K, d)`, weights `w` `(runs, K)` summing to 1."""

    name: str
    x: torch.Tensor
    w: torch.Tensor


@dataclass
class FlowResult:
    """Final states of coupled systems. `decided_at[s, r]`: the layer at which system `s` of run
    `r` had every pair of live nodes within `tol` of +1 or -1 (-1: not by the horizon); `live`
    `[s][r]` its live node count then; `x`, `w` the states (node axis padded with zero weights)."""

    names: list[str]
    x: list[torch.Tensor]
    w: list[torch.Tensor]
    decided_at: np.ndarray
    grid: TimeGrid
    tol: float
    merge_tol: float | None
    extra: dict[str, float] = field(default_factory=dict)


def check_flow_params(p: ModelParams) -> ModelParams:
    """The model the coupled flow steps: Gaussian matrix noise, post-norm, one head, a fixed
    query/key form, no MLP."""
    if not isinstance(p, ModelParams):
        raise TypeError(f"params must be a ModelParams; got {type(p).__name__}")
    bad = [(p.noise != "matrix" or p.law != "gaussian",
            f"noise='matrix', law='gaussian' (got {p.noise!r}, {p.law!r})"),
           (p.norm != "post", f"norm='post' (got {p.norm!r})"),
           (p.heads != 1, f"heads = 1 (got {p.heads})"),
           (p.qk_law.random, f"qk='identity' (got {p.qk!r})"),
           (p.mlp_block.active, f"mlp='none' (got {p.mlp!r})"),
           (p.token_noise > 0, f"token_noise = 0 (got {p.token_noise:g})")]
    why = [msg for b, msg in bad if b]
    if why:
        raise ParameterError("the mean-field flow needs " + ", ".join(why))
    return p


def decided(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
    """`(runs,)`: every pair of live nodes (weight > 0) has `1 - |<x_i, x_j>| < tol`; on the
    circle at every K, and above DENSE_MAX nodes elsewhere, without the `K x K` inner products
    (`sim.decide._geometric_decided`, each dead node replaced by a copy of the first live one)."""
    if x.shape[0] and (x.shape[-1] == 2 or x.shape[-2] > _DENSE_MAX):
        live = w > 0
        first = live.to(torch.int8).argmax(-1).view(-1, 1, 1).expand(-1, 1, x.shape[-1])
        return _geometric_decided(torch.where(live.unsqueeze(-1), x, x.gather(-2, first)), tol)
    g = x @ x.transpose(-1, -2)
    live = w > 0
    ok = is_merged(g, tol) | is_antipodal(g, tol) | ~(live.unsqueeze(-1) & live.unsqueeze(-2))
    ok.diagonal(dim1=-2, dim2=-1).fill_(True)
    return ok.flatten(1).all(-1)


def _as_system(name: str, x: torch.Tensor | np.ndarray, w: torch.Tensor | np.ndarray | None,
               runs: int, dtype: torch.dtype, device: torch.device) -> System:
    xt = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x,
                         dtype=dtype, device=device)
    if xt.dim() == 2:
        xt = xt.expand(runs, *xt.shape)
    if xt.dim() != 3 or xt.shape[0] != runs:
        raise ParameterError(f"system {name!r}: tokens must be (K, d) or ({runs}, K, d); got "
                             f"{tuple(xt.shape)}")
    K = xt.shape[1]
    if w is None:
        wt = torch.full((runs, K), 1.0 / K, dtype=dtype, device=device)
    else:
        wt = torch.as_tensor(np.asarray(w) if not isinstance(w, torch.Tensor) else w,
                             dtype=dtype, device=device)
        wt = wt.expand(runs, K) if wt.dim() == 1 else wt
        if wt.shape != (runs, K) or bool((wt < 0).any()) or not bool(torch.isfinite(wt).all()):
            raise ParameterError(f"system {name!r}: weights must be finite, >= 0, of shape ({K},) "
                                 f"or ({runs}, {K})")
        wt = wt / wt.sum(-1, keepdim=True)
    return System(name, normalize(xt.clone()), wt.clone())


def path_streams(seed: int, lo: int, hi: int, device: torch.device | str = "cpu") -> RunStreams:
    """The run streams (`sim.rng.RunStreams`, as `simulate` draws from) of noise paths
    `[lo, hi)`: whole blocks of RUN_BLOCK runs, serving only those runs, so that a run's draws
    depend on the seed and its index alone (not on the runs beside it or the batch).

    Args:
        seed: root seed.
        lo: first run.
        hi: one past the last run.
        device: where the draws are made.

    Returns:
        The streams, serving runs lo..hi-1 in order.
    """
    first = lo // _RUN_BLOCK * _RUN_BLOCK
    top = -(-hi // _RUN_BLOCK) * _RUN_BLOCK
    rs = RunStreams(seed, top, first, top, device)
    mask = torch.zeros(top - first, dtype=torch.bool)
    mask[lo - first:hi - first] = True
    rs.retain(mask)
    return rs


def noise_path(seed: int, run: int, steps: int, d: int, sigma: float = 1.0,
               dtype: torch.dtype = torch.float64) -> np.ndarray:
    """The value matrices `V_1..V_steps` `(steps, d, d)` of run `run`: i.i.d. N(0, sigma^2)
    entries, one `(d, d)` draw per layer from the run's stream (`path_streams`), as
    `run_coupled` draws them.

    Args:
        seed: root seed.
        run: the run (noise path) index.
        steps: number of layers.
        d: token dimension.
        sigma: entry standard deviation.
        dtype: dtype of the draws.

    Returns:
        `(steps, d, d)` array.
    """
    rs = path_streams(seed, run, run + 1)
    return np.stack([(sigma * rs.normal(d, d, dtype=dtype))[0].numpy() for _ in range(steps)])


_ROW_HELD = 4  # token-sized arrays a system holds per run and layer (state, output, noise, step)


@dataclass(frozen=True)
class FlowPlan:
    """What `run_coupled` will do: `runs` noise paths of the model `params` (its d and beta)
    over `grid`, in batches of `batch_size` runs (`sim.driver.run_blocks`), through systems of
    `sizes` nodes whose attention each evaluates as `evaluators` says ('dense' or 'expansion'
    of `basis` functions), in `dtype`."""

    params: ModelParams
    grid: TimeGrid
    runs: int
    batch_size: int
    sizes: tuple[int, ...]
    evaluators: tuple[str, ...]
    basis: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, p: ModelParams, grid: TimeGrid, sizes: Sequence[int], runs: int,
           execution: Execution = Execution(),
           weights: Sequence[torch.Tensor | np.ndarray | None] | None = None) -> FlowPlan:
        """The plan of `run_coupled(p, grid, systems of `sizes` nodes (weights `weights`, None:
        equal), runs, execution=execution)`: the batch it takes and each system's evaluator
        (`_evaluator`'s rule at its node count, before any merge)."""
        dtype, attention_eval = execution.torch_dtype, execution.attention_eval
        ws = [None] * len(sizes) if weights is None else list(weights)
        ev, basis = [], []
        for k, w in zip(sizes, ws, strict=True):
            q = p.with_(n=k)
            ev.append(_choose_evaluator(q, attention_eval, "full", dtype, w))
            basis.append(_expansion_basis(q, dtype, w) if ev[-1] == "expansion" else 0)
        bs = runs if execution.batch_size is None else execution.batch_size
        return cls(p, grid, runs, bs, tuple(sizes), tuple(ev), tuple(basis), dtype)

    @property
    def blocks(self) -> int:
        """Batches advanced one after another: ceil(runs / batch_size)."""
        return -(-self.runs // self.batch_size)

    def system_cost(self, i: int) -> tuple[int, float]:
        """Numbers held per run, and work per layer and run, of system `i` (k nodes in R^d):
        its tokens (4 k d), then dense attention's `k x k` scores and `k^2 (d + SCORE_UNITS)`
        work, or the expansion of R basis functions, `(1 + d)(2 k + R)` numbers and
        `EXPANSION_UNITS k R (1 + d)` work (`sim.budget.estimate_work`'s units); node merging
        forms `k x k` inner products up to `DENSE_MAX` nodes and above 3 dimensions
        (`merge._group_leads`); plus the value noise, `k d^2`, and RUN_UNITS."""
        k, d, r = self.sizes[i], self.params.d, self.basis[i]
        held, work = _ROW_HELD * k * d, float(k * d * d + RUN_UNITS)
        if self.evaluators[i] == "expansion":
            held += (1 + d) * (2 * k + r)
            work += float(EXPANSION_UNITS * k * r * (1 + d))
        else:
            held += k * k
            work += float(k * k * (d + SCORE_UNITS))
        if d > 3 or (d == 3 and k <= _DENSE_MAX):  # merging's inner products
            held += k * k
            work += float(k * k * d)
        return held, work

    def budget(self) -> Budget:
        """Memory and work of the plan: per run the value matrix d x d and each system's
        numbers (`system_cost`), `itemsize` bytes each; work `layers x runs x` the systems'
        per layer, an upper bound (runs stop once decided); a layer step per layer, system and
        batch."""
        d, steps = self.params.d, self.grid.steps
        costs = [self.system_cost(i) for i in range(len(self.sizes))]
        size = torch.finfo(self.dtype).bits // 8
        per_run = size * (d * d + sum(c[0] for c in costs))
        return Budget("this flow", per_run * self.runs, per_run, self.runs,
                      float(steps) * self.runs * sum(c[1] for c in costs),
                      f"{self.runs} runs of systems of {', '.join(map(str, self.sizes))} nodes "
                      f"in R^{d}, {steps} layers at most", ("runs",), bounded=False,
                      steps=float(steps) * len(self.sizes) * self.blocks)


def run_coupled(
    p: ModelParams,
    grid: TimeGrid,
    systems: Sequence[tuple[str, torch.Tensor | np.ndarray, torch.Tensor | np.ndarray | None]],
    runs: int = 1,
    seed: int = 0,
    scheme: str = "network",
    *,
    stopping: StoppingRule = StoppingRule.decided(),
    merge_tol: float | None = MERGE_TOL,
    merge_every: int | None = None,
    execution: Execution = Execution(),
    shared_path: bool = False,
) -> FlowResult:
    """Advance every system `(name, x0 (K, d) or (runs, K, d), w (K,), (runs, K) or None=equal)`
    through `grid.steps` layers of `scheme` ('network': `x <- N(x + dt M y + sqrt(dt) V_k y)`;
    'sde': its Euler-projected Ito limit) driven by the same `V_k` (`noise_path`) per layer.

    Every `stopping.decide_every` layers (default: depth time 0.05, `options._decide_every`)
    nodes are merged (`merge_nodes`, unless `merge_tol` is None) and, with
    `StoppingRule.decided(tol)`, a run leaves once every system is decided (`decided` at `tol`,
    default `_FLOW_TOL`). `execution.batch_size` runs advance together (default all); numbers
    depend on `seed` and the run's index only, not on the batch or the systems run beside it.
    `shared_path`: every run takes the path of run 0 (runs then differ only by their initial
    states: draws of an initial sample on one common path).

    Args:
        p: The model (pure noise: softmax attention, matrix noise; see `check_flow_params`).
        grid: The layers (steps and step size).
        systems: `(name, x0, w)` per system: nodes `(K, d)` or `(runs, K, d)`, weights `(K,)` or
            `(runs, K)` summing to 1, or None for equal weights.
        runs: Number of noise paths.
        seed: Root seed; run `r` takes the path of `noise_path(seed, r, ...)`.
        scheme: 'network' or 'sde'.
        stopping: `StoppingRule.decided(tol, decide_every)` (a run leaves once every system is
            decided at `tol`; tests and merges every `decide_every` layers) or
            `StoppingRule()` (to the horizon; merges every `decide_every(dt)` layers).
        merge_tol: Nodes closer than this merge (None: never); below `tol` when deciding.
        merge_every: Layers between merges (None: `stopping.decide_every`, else depth time
            0.05); the decision tests run at the merges, so a `StoppingRule` that names its
            `decide_every` takes no other.
        execution: The device, the dtype, the runs advanced together (`batch_size`, None: all)
            and the attention evaluator (`attention_eval`: 'auto' takes the O(n) expansion
            by `choose_evaluator`'s rule at each system's node count); the sampler is the full
            one (a `d x d` matrix per layer and run), so `sampler` must be 'auto' or 'full'.
        shared_path: Every run takes the path of run 0.

    Returns:
        A `FlowResult`: final nodes and weights of each system and run, and the layer of decision.
    """
    p = check_flow_params(p)
    runs, seed = _check_int("runs", runs, 1), _check_int("seed", seed, 0)
    if scheme not in _STEPS:
        raise ParameterError(f"scheme must be one of {', '.join(_STEPS)}; got {scheme!r}")
    if not isinstance(stopping, StoppingRule):
        raise TypeError(f"stopping must be a StoppingRule (e.g. StoppingRule.decided(tol=1e-6)); "
                        f"got {type(stopping).__name__}")
    until = stopping.until
    tol = _FLOW_TOL if stopping.tol is None else stopping.tol
    if merge_tol is not None:
        merge_tol = _check_real("merge_tol", merge_tol, 0.0, strict=True)
        if until == "decided" and merge_tol >= tol:
            raise ParameterError(f"merge_tol must be < tol = {tol:g} (merging must not decide "
                                 f"a run); got {merge_tol!r}")
    every = _merge_every(stopping, merge_every, grid.dt)
    if execution.sampler not in ("auto", "full"):
        raise ParameterError(f"execution.sampler must be 'auto' or 'full' (the flow draws each "
                             f"d x d value matrix); got {execution.sampler!r}")
    dtype, attention_eval = execution.torch_dtype, execution.attention_eval
    if len(systems) == 0:
        raise ParameterError("systems must hold at least one (name, x0, weights) entry")
    dev = execution.torch_device
    sy = [_as_system(name, x, w, runs, dtype, torch.device("cpu")) for name, x, w in systems]
    for s in sy:
        if s.x.shape[-1] != p.d:
            raise ParameterError(f"system {s.name!r} has tokens in R^{s.x.shape[-1]}; params.d = {p.d}")
    bs = FlowPlan.of(p, grid, [s.x.shape[-2] for s in sy], runs, execution,
                      [s.w for s in sy]).batch_size
    at = np.full((len(sy), runs), -1, dtype=np.int64)
    final_x: list[list[torch.Tensor | None]] = [[None] * runs for _ in sy]
    final_w: list[list[torch.Tensor | None]] = [[None] * runs for _ in sy]

    def advance(block: Block) -> None:
        lo, hi = block.start, block.stop
        part = [System(s.name, s.x[lo:hi].to(dev), s.w[lo:hi].to(dev)) for s in sy]
        _advance(p, grid, part, block, _STEPS[scheme], until, tol, every, merge_tol, at,
                 final_x, final_w, shared_path, attention_eval)

    # the value matrices of run r come from its run stream (`path_streams`, as `noise_path`)
    run_blocks(runs, bs, advance, streams=lambda lo, hi: path_streams(
        seed, 0, 1, dev) if shared_path else path_streams(seed, lo, hi, dev))
    return FlowResult(
        names=[s.name for s in sy], x=[_pad(fx) for fx in final_x], w=[_pad(fw) for fw in final_w],
        decided_at=at, grid=grid, tol=tol, merge_tol=merge_tol)


def _merge_every(stopping: StoppingRule, merge_every: int | None, dt: float) -> int:
    """Layers between merges (and decision tests) of `run_coupled`."""
    if merge_every is None:
        return _decide_every(dt) if stopping.decide_every is None else stopping.decide_every
    every = _check_int("merge_every", merge_every, 1)
    if stopping.decide_every not in (None, every):
        raise ParameterError(f"merge_every={every} differs from the stopping rule's decide_every"
                             f"={stopping.decide_every}: the decision tests run at the merges; "
                             f"give one of them")
    return every


def _advance(p: ModelParams, grid: TimeGrid, sy: list[System], block: Block,
             step: Callable[..., torch.Tensor], until: str, tol: float, every: int,
             merge_tol: float | None, at: np.ndarray, final_x: list[list[torch.Tensor | None]],
             final_w: list[list[torch.Tensor | None]], shared_path: bool = False,
             attention_eval: str = "auto") -> None:
    """One batch of `run_coupled` (`sim.driver.run_blocks`: the runs of `block`, their streams)
    through the one layer loop `sim.loop._march`: `_Layer` applies a layer to every system,
    `_Absorb` (the stopping rule) merges, decides and keeps; fills `at`, `final_x`, `final_w`
    at the block's runs."""
    rs = block.streams
    batch = _Batch(sy, [_evaluator(p, s, attention_eval) for s in sy])
    rule = block.use(_Absorb(p, np.arange(block.start, block.stop), until, tol, every,
                             merge_tol, at, final_x, final_w,
                             None if shared_path else rs.retain))
    _march(batch, grid.steps, _Layer(p, grid, rs, step, shared_path), stop_test=rule)


class _Batch:
    """The state `march` carries: the systems of a batch of runs (`x` `(runs, K, d)`, `w` each)
    and how each one's attention is evaluated; `shape[0]` runs, `batch[mask]` selects rows (the
    evaluators are kept: they change at a merge only)."""

    def __init__(self, systems: list[System], evaluators: list[str]) -> None:
        self.systems, self.evaluators = systems, evaluators

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.systems[0].x.shape[0],)

    def __getitem__(self, mask: torch.Tensor) -> _Batch:
        m = mask.to(self.systems[0].x.device)
        return _Batch([System(s.name, s.x[m], s.w[m]) for s in self.systems],
                      list(self.evaluators))


class _Layer:
    """One layer of every system of the batch, driven by one value matrix per run `V_k`
    `(d, d)` drawn from the run streams `rs` (all runs: run 0's when `shared_path`)."""

    def __init__(self, p: ModelParams, grid: TimeGrid, rs: RunStreams,
                 step: Callable[..., torch.Tensor], shared_path: bool) -> None:
        self.p, self.dt, self.rs, self.step, self.shared_path = p, grid.dt, rs, step, shared_path

    def __call__(self, b: _Batch) -> _Batch:
        p = self.p
        v = p.noise_scale * self.rs.normal(p.d, p.d, dtype=b.systems[0].x.dtype)
        if self.shared_path:
            v = v.expand(b.shape[0], p.d, p.d)
        for s, e in zip(b.systems, b.evaluators, strict=True):
            y = _attention_output(s.x, p, weights=s.w, evaluator=e)
            s.x = self.step(s.x, y, apply_matrices(y, v), p, self.dt)
        return b


class _Absorb:
    """`run_coupled`'s stopping rule (a `sim.loop._StopTest`): every `every` layers and at the last,
    merge each system's nodes (unless `merge_tol` is None; its evaluator chosen afresh), and with
    `until='decided'` mark each system decided at `tol` (`at[s, run] = k`, its live nodes and
    weights stored then); a run leaves once every system of it is decided (`retain`: drop it from
    the run streams; None with a shared path). At the end, `keep` stores each undecided system."""

    def __init__(self, p: ModelParams, run_ids: np.ndarray, until: str, tol: float, every: int,
                 merge_tol: float | None, at: np.ndarray,
                 final_x: list[list[torch.Tensor | None]],
                 final_w: list[list[torch.Tensor | None]],
                 retain: Callable[[torch.Tensor], None] | None) -> None:
        self.p, self.run_ids, self.until, self.tol, self.every = p, run_ids, until, tol, every
        self.merge_tol, self.at, self.final_x, self.final_w = merge_tol, at, final_x, final_w
        self._retain = retain
        self.decided_at = np.full(len(run_ids), -1, dtype=np.int64)
        self.final: _Batch | None = None

    def _store(self, si: int, r: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
        for j, run in enumerate(self.run_ids[r.numpy()].tolist()):
            lv = w[j] > 0
            self.final_x[si][run], self.final_w[si][run] = x[j][lv].cpu(), w[j][lv].cpu()

    def check(self, k: int, b: _Batch, rows: torch.Tensor) -> tuple[_Batch, torch.Tensor]:
        """Merge, then decide each system; the runs whose every system is decided."""
        done = torch.ones(len(rows), dtype=torch.bool)
        for si, s in enumerate(b.systems):
            if self.merge_tol is not None:
                s.x, s.w = merge_nodes(s.x, s.w, self.merge_tol)
                b.evaluators[si] = _evaluator(self.p, s)
            if self.until == "decided":
                ids = self.run_ids[rows.numpy()]
                now = decided(s.x, s.w, self.tol).cpu() & torch.as_tensor(self.at[si, ids] < 0)
                self.at[si, ids[now.numpy()]] = k
                dv = now.to(s.x.device)
                self._store(si, rows[now], s.x[dv], s.w[dv])
                done &= torch.as_tensor(self.at[si, ids] >= 0)
        return b, done if self.until == "decided" else torch.zeros_like(done)

    def keep(self, rows: torch.Tensor, b: _Batch) -> None:
        """Store the systems of batch rows `rows` not stored at their decision."""
        ids = self.run_ids[rows.numpy()]
        for si, s in enumerate(b.systems):
            left = torch.as_tensor(self.at[si, ids] < 0)
            self._store(si, rows[left], s.x[left.to(s.x.device)], s.w[left.to(s.x.device)])
        self.final = b

    def retain(self, live: torch.Tensor) -> None:
        if self._retain is not None:
            self._retain(live)


def _evaluator(p: ModelParams, s: System, attention_eval: str = "auto") -> str:
    """How the attention of system `s` is evaluated: `attention_eval`, where 'auto' is
    `choose_evaluator`'s fixed rule at its node count and weights (the O(n) expansion on the
    circle and the sphere from a few hundred nodes, `sim.expansion.auto_uses_expansion`)."""
    return _choose_evaluator(p.with_(n=s.x.shape[-2]), attention_eval, "full", s.x.dtype, s.w)


def _pad(parts: list[torch.Tensor | None]) -> torch.Tensor:
    """Stack per-run node sets of different sizes, padding the node axis with zeros."""
    ts = [t for t in parts if t is not None]
    top = max(t.shape[0] for t in ts)
    out = torch.zeros((len(ts), top, *ts[0].shape[1:]), dtype=ts[0].dtype)
    for i, t in enumerate(ts):
        out[i, :t.shape[0]] = t
    return out
