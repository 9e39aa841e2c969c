"""The batched simulator: many independent deep random-attention networks (or their SDE limit).

`simulate` runs `runs` independent systems of `n` tokens in R^d for `grid.steps` layers,

    x_i^{k+1} = N(x_i^k + dt M y_i^k + sqrt(dt) V_k y_i^k)       (scheme="network", spec §2)

or the Euler-Maruyama-projected SDE of spec §3 (scheme="sde"), and records Gram matrices (and
optionally tokens) at chosen checkpoints. Numbers depend only on `seed`, never on `batch_size`.

Options that only make sense together are small frozen objects, each also given by its loose
keywords: `InitialState` (init, rho0), `StoppingRule` (until, tol, decide_every) and
`Recording` (checkpoints, record).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..model.checks import check_tol
from ..model.params import ModelParams, ParameterError, TimeGrid, check_int, check_real
from ..model.qk import QKDraws
from .bias import BIAS_STREAM, check_bias, mlp_branch
from .budget import SAMPLER_STEPS, Budget, check_budget, estimate_memory, estimate_work
from .expansion import (
    basis_size,
    check_expansion,
    choose_evaluator,
    truncation_order,
    unit_roundoff,
)
from .gram import frame_forms, run_batch_gram, uniform_frame
from .layers import (
    NORM_STEPS,
    attention_output,
    layer_step,
    network_step,
    normalize,
    residual_step,
)
from .loop import Progress, Stop, march
from .norm_sde import check_peri_sde, peri_noise, peri_sde_step
from .observe import RECORDS, Observations, ObserveSpec, builtin_observers, check_observers
from .result import SimResult
from .rng import MLP_STREAM, QK_STREAM, RUN_BLOCK, RunStreams  # the stream keys: re-exported
from .samplers import choose_sampler, mlp_sampler, noise_sampler, scheme_params
from .sde import check_sde_step, sde_layer, sde_step
from .token_noise import add_token_noise, check_token_noise, token_noise_streams

SCHEMES: dict[str, Callable[..., torch.Tensor]] = {"network": network_step, "sde": sde_step}
# the step of each (scheme, norm) other than post-norm (docs/variants.md §4): the Euler step of the
# pre-norm limit is the residual update itself
NORM_SCHEMES: dict[tuple[str, str], Callable[..., torch.Tensor]] = {
    **{("network", k): v for k, v in NORM_STEPS.items()},
    ("sde", "pre"): residual_step, ("sde", "peri"): peri_sde_step}
# the default record: Gram matrices (n x n per run and checkpoint) up to this many tokens, the
# tokens (n x d) above (one Gram matrix of 65536 tokens takes 34 GB)
GRAM_RECORD_MAX = 1024
DTYPES: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32}
BATCH_BYTES = 1 << 30  # CUDA: the whole noise workspace of a batch
CACHE_BYTES = 4 << 20  # CPU: one per-layer tensor of a batch (benchmarks/bench_batch.py)


def default_record(n: int) -> tuple[str, ...]:
    """What `simulate` records by default: `('gram',)` for `n <= GRAM_RECORD_MAX`, else
    `('tokens',)` (O(n d) per checkpoint instead of O(n^2)).

    Args:
        n: the number of tokens.

    Returns:
        The record tuple.
    """
    return ("gram",) if n <= GRAM_RECORD_MAX else ("tokens",)


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'float64' / 'float32' (or a torch dtype) to a torch dtype."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if dtype not in DTYPES:
        raise ParameterError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    return DTYPES[dtype]


def resolve_device(device: str | torch.device, name: str = "device") -> torch.device:
    """A torch device, checking that CUDA (and device N of 'cuda:N') exists when asked for;
    ParameterError naming `name` otherwise."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ParameterError(f"{name} must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}") from err
    if dev.type not in ("cpu", "cuda"):
        raise ParameterError(f"{name} must be 'cpu' or 'cuda'; got {device!r}")
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ParameterError(f"{name} {device!r} asked for, but CUDA is not available here")
        if dev.index is not None and dev.index >= count:
            raise ParameterError(f"{name} must be cuda:0 ... cuda:{count - 1} here; got {device!r}")
    return dev


def resolve_checkpoints(checkpoints: int | Sequence[int] | None, steps: int) -> np.ndarray:
    """Layer indices to record: None -> [0, steps]; an int K >= 2 -> K evenly spaced (both ends
    included); a sequence -> those layer indices (whole numbers in [0, steps])."""
    if checkpoints is None:
        return np.array([0, steps])
    if isinstance(checkpoints, int | np.integer) and not isinstance(checkpoints, bool):
        if not 2 <= checkpoints <= steps + 1:
            raise ParameterError("checkpoints (a count K of evenly spaced records, the start and "
                                 f"the end included) must be an integer in [2, layers + 1 = "
                                 f"{steps + 1}]; got {checkpoints!r}")
        return np.unique(np.round(np.linspace(0, steps, int(checkpoints))).astype(int))
    bad = ParameterError(f"checkpoints must be layer indices in [0, {steps}] (whole numbers), a "
                         f"count K >= 2 or None; got {checkpoints!r}")
    if isinstance(checkpoints, str | bytes | bool) or not isinstance(checkpoints, Iterable):
        raise bad
    try:
        a = np.asarray(list(checkpoints), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise bad from err
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a != np.round(a)) \
            or a.min() < 0 or a.max() > steps:
        raise bad
    return np.unique(a.astype(int))


def _check_call(params: Any, grid: Any, runs: Any, sampler: str, device: str | torch.device,
               dtype: str | torch.dtype, checkpoints: Any, record: Sequence[str] | None,
               progress: Any, init: Any = "uniform", attention_eval: str = "auto",
               weights: Any = None) -> None:
    """The checks of `simulate` that come before any work: argument types, USA beta for the
    dtype, and a lower bound on the memory the run needs (kept records + one block of layer
    workspace) against the machine's; the Gram sampler from a uniform start holds nothing of
    size d."""
    if not isinstance(params, ModelParams):
        raise TypeError(f"params must be a ModelParams (e.g. ModelParams(**d)); got "
                        f"{type(params).__name__}")
    if not isinstance(grid, TimeGrid):
        raise TypeError(f"grid (the second positional argument) must be a TimeGrid or None; got "
                        f"{grid!r}: give the horizon by keyword, layers=... or T=..., dt=...")
    if progress is not None and not callable(progress):
        raise TypeError("progress must be None or a callable taking the number of runs "
                        f"advanced; got {progress!r}")
    runs = check_int("runs", runs, 1)
    tdtype, dev = resolve_dtype(dtype), resolve_device(device)
    name = str(tdtype).removeprefix("torch.")
    params.attention_kind.check_dtype(name)
    b = simulation_budget(params, grid, runs, sampler, checkpoints, record, tdtype, init,
                          attention_eval=attention_eval, weights=weights)
    # the library refuses only what this machine cannot hold at all (its physical memory); the
    # command line checks against the memory available now (`budget.available_memory`)
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    check_budget(b, host, "cpu", warn=False, limit_h=math.inf, have_is="this machine has")
    if dev.type == "cuda":
        have = torch.cuda.get_device_properties(dev).total_memory
        workspace = b.memory - b.per_run * b.runs
        check_budget(Budget(b.what, workspace, 0, b.runs, 0.0, b.detail, b.lower), have,
                     dev.type, warn=False, limit_h=math.inf, have_is="the device has")


def simulation_budget(params: ModelParams, grid: TimeGrid, runs: int, sampler: str = "auto",
                      checkpoints: int | Sequence[int] | None = None,
                      record: Sequence[str] | None = None,
                      dtype: str | torch.dtype = "float64", init: Any = "uniform",
                      until: str = "horizon", attention_eval: str = "auto",
                      weights: np.ndarray | torch.Tensor | None = None) -> Budget:
    """The memory (`budget.estimate_memory`: records kept, plus one block of layer workspace)
    and the work (`budget.estimate_work`, runs x layers x heads x n x (w (n + w) + 25 n), or n x
    (8 R (1 + w) + w^2) with the O(n) attention of R basis functions; `layers x batches` layer
    steps, 3 each with the Gram and fast samplers, `budget.SAMPLER_STEPS`) of `simulate` with these
    arguments, w the width held (d; n for the Gram sampler from a uniform start, which holds
    nothing of size d; its work is that of width min(n, d), as it takes about as long as the
    full sampler). `record` None: `default_record(n)`; `attention_eval` and `weights` as
    `simulate` (the expansion holds no n x n array)."""
    runs = check_int("runs", runs, 1)
    tdtype = resolve_dtype(dtype)
    k = len(resolve_checkpoints(checkpoints, grid.steps))
    used = choose_sampler(params, sampler)
    n, heads = params.n, params.heads
    record = default_record(n) if record is None else record
    w = n if used == "gram" and isinstance(init, str) and init == "uniform" else params.d
    size = torch.finfo(tdtype).bits // 8
    basis = 0
    if choose_evaluator(params, attention_eval, used, tdtype,
                        check_token_weights(weights, n, runs)) == "expansion":
        beta = check_expansion(params)
        basis = basis_size(params.d, truncation_order(beta, params.d, unit_roundoff(tdtype)))
    # the fast sampler with n >= d draws V itself, as the full one does: no n x n factor
    full = used == "full" or (used == "fast" and n >= params.d)
    mem = estimate_memory(runs, n, w, k, block=min(runs, RUN_BLOCK), record=record, heads=heads,
                          full=full, mlp=_mlp_width(params, used), itemsize=size, basis=basis)
    one = estimate_memory(1, n, w, k, block=0, record=record, itemsize=size).kept
    name = str(tdtype).removeprefix("torch.")
    detail = (f"{runs} run{'s' * (runs != 1)}, n = {n}, d = {params.d}, {heads} "
              f"head{'s' * (heads > 1)}, {k} checkpoints, {grid.steps} layers, sampler {used}, "
              f"{name}"
              + (f", attention by expansion ({basis} basis functions)" if basis else ""))
    lower = ("runs", "n", "d", *(("heads",) if heads > 1 else ()), "checkpoints")
    # layer steps one after another: one per layer and batch of runs (`default_batch`)
    steps = grid.steps * math.ceil(runs / default_batch(runs, params, used, tdtype)) * (
        SAMPLER_STEPS.get("full" if full else used, 1.0))
    return Budget("this simulation", mem.total, one, runs,
                  estimate_work(runs, grid.steps, n, min(w, params.d), heads,
                                _mlp_width(params, used), basis),
                  detail, lower, bounded=until != "decided", longer=("runs", "layers", "n", "d"),
                  steps=steps)


def pair_tokens(rho0: float, d: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Two unit vectors with `<x_1, x_2> = rho0`: `e_1` and `rho0 e_1 + sqrt(1 - rho0^2) e_2`."""
    x = torch.zeros(2, d, dtype=dtype, device=device)
    x[0, 0] = 1.0
    x[1, 0] = rho0
    x[1, 1] = math.sqrt(max(0.0, 1.0 - rho0 * rho0))
    return x


def initial_tokens(
    init: str | np.ndarray | torch.Tensor,
    p: ModelParams,
    rs: RunStreams,
    start: int,
    dtype: torch.dtype,
    rho0: float | None = None,
) -> torch.Tensor:
    """Initial tokens `(runs, n, d)` for this batch: 'uniform' on the sphere, 'pair' at `rho0`, or
    a given array `(n, d)` or `(runs_total, n, d)` (rows are normalised)."""
    b, n, d = rs.runs, p.n, p.d
    if isinstance(init, str):
        if init == "uniform":
            return normalize(rs.normal(n, d, dtype=dtype))
        if init == "pair":
            if rho0 is None:
                raise ParameterError("init='pair' needs rho0 in [-1, 1]")
            return pair_tokens(float(rho0), d, dtype, rs.device).expand(b, 2, d).clone()
        raise ParameterError(f"init must be 'uniform', 'pair' or an array; got {init!r}")
    a = torch.as_tensor(init, dtype=dtype, device=rs.device)
    a = a[start:start + b] if a.ndim == 3 else a.expand(b, n, d)
    return normalize(a.clone())


def _check_init(init: Any, p: ModelParams, runs: int, rho0: float | None) -> str:
    if isinstance(init, str) and init == "pair" and p.n != 2:
        raise ParameterError(f"init='pair' needs n = 2; got n = {p.n}")
    InitialState(init, rho0)  # what can be checked without the model
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
    return "array"


def _mlp_width(p: ModelParams, sampler: str) -> int:
    """Per-run size of the MLP block's largest draw: both weight matrices (`full`) or the hidden
    units' pre-activations and what draws them (`fast`, `gram`); 0 without a block."""
    if not p.mlp_block.active:
        return 0
    return 2 * p.mlp_hidden * p.d if sampler == "full" else 2 * p.n * p.mlp_hidden


def default_batch(runs: int, p: ModelParams, sampler: str, dtype: torch.dtype,
                  device: torch.device | str = "cpu") -> int:
    """Runs per batch: all of them unless a batch passes the memory budget, else whole blocks.

    On CPU a layer is memory-bound once its largest tensor (`full`: V, d x d per run; `fast`: the
    noise, n x d; `gram`: the noise factor, 2n x n, or 2n x heads n with forms per head) leaves
    the cache, so the budget is CACHE_BYTES for that tensor. On CUDA, where a batch must be large
    to fill the device, it is BATCH_BYTES for the whole noise workspace.
    """
    n, d = p.n, p.d
    width = {"full": d * d, "fast": n * max(n, d), "gram": 2 * n * n}[sampler]
    if p.qk_law.random:  # the drawn query/key forms, one d x d per head (gram: the noise factor
        # of the heads' stacked outputs, 2n x heads n; the forms in the frame are n x n)
        width = max(width, p.heads * (2 * n * n if sampler == "gram" else d * d))
    width = max(width, _mlp_width(p, sampler))
    if torch.device(device).type == "cuda":
        per_run, budget = (width + n * d) * 4 + 2 * n * n, BATCH_BYTES
    else:
        per_run, budget = width, CACHE_BYTES
    fit = budget // (per_run * (torch.finfo(dtype).bits // 8))
    return min(runs, max(RUN_BLOCK, fit // RUN_BLOCK * RUN_BLOCK))


def qk_draws(p: ModelParams, scheme: str, rs: RunStreams, dtype: torch.dtype
             ) -> QKDraws | None:
    """The random query/key forms of the runs of `rs` (None for qk='identity'), drawn from streams
    of their own (`rs.derived(QK_STREAM)`): the initial tokens and the value noise stay those of
    qk='identity' with the same seed."""
    if not p.qk_law.random:
        return None
    q = scheme_params(p, scheme)
    return QKDraws(q.qk_law, q.heads, rs.derived(QK_STREAM), dtype)


def run_batch(
    x: torch.Tensor,
    p: ModelParams,
    grid: TimeGrid,
    rs: RunStreams,
    sampler: str,
    scheme: str,
    checkpoints: np.ndarray,
    record: Callable[..., None],
    progress: Progress | None = None,
    stop: Stop | None = None,
    forms: QKDraws | None = None,
    mlp_rs: RunStreams | None = None,
    weights: torch.Tensor | None = None,
    bias_rs: RunStreams | None = None,
    attention_eval: str = "dense",
    token_rs: RunStreams | None = None,
) -> torch.Tensor:
    """Advance one batch `x` `(runs, n, d)` through `grid.steps` layers, calling `record(c, x)` at
    checkpoint number `c`; return the final state (see `march` for `stop`). `forms`: the random
    query/key forms (`qk_draws`), needed when `p.qk` is a random law; `mlp_rs`: the streams of
    the MLP blocks (`rs.derived(MLP_STREAM)`), needed when `p.mlp` is not 'none'; `weights`
    `(n,)` or `(runs, n)`: token weights of the attention (`layers.weights_from_logits`);
    `bias_rs`: the streams of the biases (`rs.derived(BIAS_STREAM)`), needed when `p.has_bias`
    (`bias.mlp_branch`: the MLP sublayer adds `sqrt(dt) bias_sigma g`, one `g` per layer shared
    by the tokens, and the block's hidden units a bias `mlp_bias c`); `attention_eval`: 'dense'
    or 'expansion' (`layers.attention_output`, resolved by `expansion.choose_evaluator`);
    `token_rs`: the streams of the independent token noise (`token_noise.token_noise_streams`),
    needed when `p.token_noise > 0` (`token_noise.add_token_noise`: `tau g_i` joins each
    token's unit-time noise)."""
    check_bias(p, scheme)
    check_token_noise(p, sampler)
    if p.token_noise > 0 and token_rs is None:
        raise ParameterError(f"token_noise={p.token_noise:g} draws a Gaussian per token: pass "
                             "its streams (token_rs = token_noise.token_noise_streams(p, rs))")
    q = scheme_params(p, scheme)
    step = SCHEMES[scheme] if p.norm == "post" else NORM_SCHEMES[scheme, p.norm]
    noise = peri_noise if (scheme, p.norm) == ("sde", "peri") else noise_sampler(sampler, q)
    silent = p.noise_scale == 0.0
    inputs = (lambda t: t) if p.norm == "post" else normalize  # what attention sees
    block = mlp_sampler(sampler, scheme) if p.mlp_block.active else None
    if block is not None and mlp_rs is None:
        raise ParameterError(f"mlp={p.mlp!r} draws MLP weights: pass their streams (mlp_rs)")

    # the limit takes both noises in one step, the network one sublayer each (docs/variants.md §5)
    advance = sde_layer if scheme == "sde" else layer_step
    mlp = mlp_branch(q, sampler, block, mlp_rs, bias_rs)

    def layer(xk: torch.Tensor) -> torch.Tensor:
        y = attention_output(inputs(xk), q, None if forms is None else forms.next(), weights,
                             attention_eval)
        xi = torch.zeros_like(xk) if silent else noise(y, q, rs)
        if token_rs is not None:
            xi = add_token_noise(xi, q, token_rs)
        return advance(xk, y, xi, q, grid.dt, mlp, step)

    return march(x, grid.steps, layer, checkpoints, record, progress, stop=stop)


def _both(*fns: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], None]:
    """One callback calling each of `fns` with its argument."""
    def call(mask: torch.Tensor) -> None:
        for f in fns:
            f(mask)
    return call


def check_token_weights(weights: Any, n: int, runs: int) -> np.ndarray | None:
    """Token weights as a float64 array `(n,)` or `(runs, n)`: finite, non-negative, each row of
    positive sum (None stays None); else ParameterError."""
    if weights is None:
        return None
    try:
        w = np.asarray(weights.cpu() if isinstance(weights, torch.Tensor) else weights,
                       dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"weights must be numbers of shape ({n},) or ({runs}, {n})") from err
    if w.shape not in ((n,), (runs, n)):
        raise ParameterError(f"weights must have shape ({n},) or ({runs}, {n}); got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(w.sum(-1) <= 0):
        raise ParameterError("weights must be finite and >= 0, with a positive sum per run")
    return w


UNTIL: tuple[str, ...] = ("horizon", "decided")
DECIDE_DT = 0.05  # default test interval for until='decided', in depth time


def decide_every(dt: float) -> int:
    """Layers between two decision tests: the most that stay within depth time `DECIDE_DT`."""
    return max(1, int(DECIDE_DT / dt + 1e-9))


def _check_until(until: str, tol: float | None, every: int | None, dt: float,
                 dtype: str | torch.dtype = "float64") -> tuple[float, int] | None:
    if until != "decided":
        StoppingRule(until, tol, every)  # a bad `until`, or tol / decide_every without 'decided'
        return None
    rule = StoppingRule(until, None, every)  # tol: checked against the run's dtype here
    name = str(resolve_dtype(dtype)).removeprefix("torch.")
    t = check_tol(DECIDE_TOL if tol is None else tol, "tol", name)
    return t, decide_every(dt) if rule.decide_every is None else rule.decide_every


DECIDE_TOL = 1e-6


@dataclass(frozen=True, eq=False)
class InitialState:
    """Where the tokens start: `init='uniform'` (independent uniform points on the sphere),
    `'pair'` (two tokens with `<x_1, x_2> = rho0`) or an array `(n, d)` / `(runs, n, d)` (rows
    normalised). Checked when made, as far as it can be without the model; it compares by
    identity, since it may hold an array."""

    init: str | np.ndarray | torch.Tensor = "uniform"
    rho0: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.init, str):
            if self.init not in ("uniform", "pair"):
                raise ParameterError(f"init must be 'uniform', 'pair' or an array; got {self.init!r}")
            if self.init == "pair":
                if self.rho0 is None:
                    raise ParameterError("init='pair' needs rho0 in [-1, 1]")
                r = check_real("rho0", self.rho0, -1.0)
                if r > 1.0:
                    raise ParameterError(f"rho0 must be a finite number in [-1, 1]; got {self.rho0!r}")
                object.__setattr__(self, "rho0", r)
            elif self.rho0 is not None:
                raise ParameterError("rho0 is only used with init='pair'")
        elif self.rho0 is not None:
            raise ParameterError("rho0 is only used with init='pair'")

    @classmethod
    def uniform(cls) -> InitialState:
        """Independent uniform tokens on the sphere."""
        return cls("uniform")

    @classmethod
    def pair(cls, rho0: float) -> InitialState:
        """Two tokens at inner product `rho0` in [-1, 1]."""
        return cls("pair", rho0)


@dataclass(frozen=True)
class StoppingRule:
    """When a run stops: at the horizon (`until='horizon'`), or at the first test, every
    `decide_every` layers (default `decide_every(dt)`), at which every pair of tokens is within
    `tol` (default `DECIDE_TOL`) of +1 or -1 (`until='decided'`; the horizon is then a maximum).
    `tol` is checked against the run's dtype again by `simulate`."""

    until: str = "horizon"
    tol: float | None = None
    decide_every: int | None = None

    def __post_init__(self) -> None:
        if self.until not in UNTIL:
            raise ParameterError(f"until must be one of {', '.join(UNTIL)}; got {self.until!r}")
        if self.until == "horizon" and (self.tol is not None or self.decide_every is not None):
            raise ParameterError("tol and decide_every are only used with until='decided'")
        if self.tol is not None:
            object.__setattr__(self, "tol", check_tol(self.tol, "tol", "float64"))
        if self.decide_every is not None:
            object.__setattr__(self, "decide_every", check_int("decide_every", self.decide_every, 1))

    @classmethod
    def decided(cls, tol: float | None = None, decide_every: int | None = None) -> StoppingRule:
        """Stop each run once it is decided (see the class)."""
        return cls("decided", tol, decide_every)


@dataclass(frozen=True)
class Recording:
    """What is saved: `record` (any of 'gram', 'tokens'; None: `default_record(n)`, Gram
    matrices up to GRAM_RECORD_MAX tokens, tokens above) at `checkpoints` (None: the start and
    the end; an int K >= 2: K evenly spaced layers; a sequence: those layer indices)."""

    checkpoints: int | tuple[int, ...] | None = None
    record: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.record, str):
            raise ParameterError(f"record must be a tuple of {RECORDS}; got the string "
                                 f"{self.record!r} (write ({self.record!r},))")
        if self.record is not None:  # None: `default_record(n)`, resolved by `simulate`
            record = tuple(self.record)
            bad = set(record) - set(RECORDS)
            if bad:
                raise ParameterError(f"record must be a subset of {RECORDS}; got {sorted(bad)}")
            object.__setattr__(self, "record", record)
        ck = self.checkpoints
        if ck is not None and not isinstance(ck, int | np.integer) and isinstance(ck, Iterable) \
                and not isinstance(ck, str | bytes):
            object.__setattr__(self, "checkpoints", tuple(ck))


def _group(given: Any, cls: type, loose: dict[str, Any]) -> dict[str, Any]:
    """The values of one option group: the fields of the object `given` (a `cls`), or the loose
    keywords when it is None. A loose keyword away from its default next to an object is an
    error."""
    if given is None:
        return loose
    if not isinstance(given, cls):
        raise TypeError(f"expected a {cls.__name__} or None; got {type(given).__name__}")
    default = cls()
    clash = [k for k, v in loose.items() if not _is_default(v, getattr(default, k))]
    if clash:
        raise ParameterError(f"give {' / '.join(clash)} or a {cls.__name__}, not both")
    return {k: getattr(given, k) for k in loose}


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (isinstance(value, str | tuple | type(None))
                                and type(value) is type(default) and value == default)


def simulate(
    params: ModelParams,
    grid: TimeGrid | None = None,
    *,
    layers: int | None = None,
    alpha: float | None = None,
    T: float | None = None,
    dt: float | None = None,
    runs: int = 1,
    init: str | np.ndarray | torch.Tensor = "uniform",
    rho0: float | None = None,
    seed: int = 0,
    sampler: str = "auto",
    scheme: str = "network",
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float64",
    checkpoints: int | Sequence[int] | None = None,
    record: Sequence[str] | None = None,
    batch_size: int | None = None,
    progress: Progress | None = None,
    until: str = "horizon",
    tol: float | None = None,
    decide_every: int | None = None,
    initial: InitialState | None = None,
    stopping: StoppingRule | None = None,
    recording: Recording | None = None,
    weights: np.ndarray | torch.Tensor | None = None,
    attention_eval: str = "auto",
    observe: ObserveSpec | None = None,
) -> SimResult:
    """Simulate `runs` independent systems `x^{k+1} = N(x^k + dt M y^k + sqrt(dt) V_k y^k)` (or the SDE).

    The keywords that belong together can be given as one object instead: `initial` (an
    `InitialState`: init, rho0), `stopping` (a `StoppingRule`: until, tol, decide_every) and
    `recording` (a `Recording`: checkpoints, record); an object and one of its keywords away
    from its default is an error. A run's numbers depend on the seed and its index alone: not
    on the batch size, the other runs, early stopping nor the CPU.

    Args:
        params: the model (`ModelParams`).
        grid: the horizon as a `TimeGrid`; or give `(layers, alpha)` or `(T, dt)`.
        layers: number of layers `L` (with `alpha`, the residual scale; default `1/sqrt(L)`).
        alpha: residual scale, `dt = alpha^2`.
        T: depth time of the horizon (with `dt`).
        dt: depth-time step per layer.
        runs: number of independent runs (noise paths).
        init: 'uniform' (i.i.d. uniform tokens), 'pair' (two tokens at `<x_1, x_2> = rho0`), or
            the initial tokens `(n, d)` or `(runs, n, d)`.
        rho0: the initial inner product of `init='pair'`.
        seed: root seed of the run streams.
        sampler: 'auto', 'fast', 'full' or 'gram' (`samplers.choose_sampler`).
        scheme: 'network' (the discrete model) or 'sde' (its depth limit).
        device: torch device.
        dtype: 'float64' (default) or 'float32'.
        checkpoints: layers recorded: an integer K (K evenly spaced records), a list of layer
            indices, or None (start and end).
        record: any of 'gram', 'tokens' (None: `default_record(n)`, Gram matrices up to
            GRAM_RECORD_MAX tokens, the tokens above).
        batch_size: runs advanced together (default `default_batch`); numbers never depend on it.
        progress: a progress callback, or None.
        until: 'horizon', or 'decided': the horizon is a maximum and each run stops at the first
            test (every `decide_every` layers, default `decide_every(dt)`) at which every pair of
            tokens is within `tol` (default 1e-6) of +1 or -1; `SimResult.decided_at` holds that
            layer (-1: never). A run's numbers up to its decision are those of the fixed-horizon
            run with the same seed.
        tol: the decision tolerance of `until='decided'`.
        decide_every: layers between two decision tests.
        initial: an `InitialState` instead of `init`, `rho0`.
        stopping: a `StoppingRule` instead of `until`, `tol`, `decide_every`.
        recording: a `Recording` instead of `checkpoints`, `record`.
        weights: token weights `(n,)` or `(runs, n)`, non-negative with a positive sum, so that
            `A_ij ∝ w_j exp(beta <Q x_i, K x_j>)` (integer weights equal repeated tokens; None:
            the unweighted model, bit for bit); not with sampler='gram'.
        attention_eval: how the attention is evaluated, not which kernel (that is
            `ModelParams.attention`): 'dense' (n x n weights), 'expansion' (the O(n) harmonic
            expansion at d = 2, 3: softmax/USA, one head, identity query/key, no mask; refused by
            name elsewhere) or 'auto' (`expansion.auto_uses_expansion`: a fixed rule of n, d,
            beta and dtype, dense where the expansion does not apply).
        observe: statistics kept at every checkpoint beside `record`: an `Observer(name, fn)`,
            a sequence of them or a mapping `{name: fn}`, `fn(x)` `(runs_in_batch, ...)` of
            the state `x` `(runs_in_batch, n, w)` that `record=('tokens',)` would keep (with
            sampler='gram' in an n-dimensional isometric frame: only inner products mean
            anything); `SimResult.observed[name]` holds its outputs `(runs, K, ...)`. For every
            layer give `checkpoints=range(L + 1)`, and `record=()` to keep nothing else.

    Returns:
        A `SimResult`: numpy arrays on the CPU (Gram matrices and/or tokens at the checkpoints,
        the observers' outputs in `observed`), the parameters, the seed, the sampler that ran
        and `extra['attention_eval']`.

    Raises:
        ParameterError: an argument outside its range, or options that do not go together
            (the message names the parameter).
    """
    init, rho0 = _group(initial, InitialState, {"init": init, "rho0": rho0}).values()
    until, tol, decide_every = _group(stopping, StoppingRule, {
        "until": until, "tol": tol, "decide_every": decide_every}).values()
    checkpoints, record = _group(recording, Recording, {"checkpoints": checkpoints,
                                                        "record": record}).values()
    given = {k: v for k, v in (("layers", layers), ("alpha", alpha), ("T", T), ("dt", dt))
             if v is not None}
    if grid is not None and given:
        raise ParameterError(f"give the horizon once: a TimeGrid, or {', '.join(given)} (got "
                             f"both a grid and {', '.join(f'{k}={v!r}' for k, v in given.items())})")
    # T and dt: a whole number of steps, or an error that proposes one (never another horizon)
    grid = grid if grid is not None else TimeGrid.make(layers, alpha, T, dt, exact=True)
    _check_call(params, grid, runs, sampler, device, dtype, checkpoints, record, progress, init,
                attention_eval, weights)
    runs = check_int("runs", runs, 1)
    seed = check_int("seed", seed, 0)
    if scheme not in SCHEMES:
        raise ParameterError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}")
    if params.norm == "peri" and scheme == "sde":
        check_peri_sde(params)
    check_bias(params, scheme)  # before check_sde_step's warning: a refusal comes first
    check_token_noise(params, sampler)
    if scheme == "sde":
        check_sde_step(params, grid.dt)
    kept: tuple[str, ...] = tuple(default_record(params.n) if record is None else record)
    Recording(None, kept)  # checks the names
    user = check_observers(observe)
    decide = _check_until(until, tol, decide_every, grid.dt, dtype)
    init_kind = _check_init(init, params, runs, rho0)
    tdtype, dev = resolve_dtype(dtype), resolve_device(device)
    used = choose_sampler(params, sampler)
    w_all = check_token_weights(weights, params.n, runs)
    if w_all is not None and used == "gram":
        raise ParameterError("weights (token weights) are not carried by sampler='gram'; use "
                             "sampler='fast' or 'full'")
    evaluator = choose_evaluator(params, attention_eval, used, tdtype, w_all)
    ck = resolve_checkpoints(checkpoints, grid.steps)
    bs = default_batch(runs, params, used, tdtype, dev) if batch_size is None else check_int(
        "batch_size", batch_size, 1)
    bs = runs if bs >= runs else math.ceil(bs / RUN_BLOCK) * RUN_BLOCK
    n, d, K = params.n, params.d, len(ck)
    book = Observations((*builtin_observers(kept, params.norm), *user), runs, K)
    finals = []
    layer_of = np.full(runs, -1, dtype=np.int64)
    t0 = time.perf_counter()
    for start in range(0, runs, bs):
        stop = min(start + bs, runs)
        rs = RunStreams(seed, runs, start, stop, dev)
        if used == "gram" and isinstance(init, str) and init == "uniform":
            x = uniform_frame(rs, n, d, tdtype)
        else:
            x = initial_tokens(init, params, rs, start, tdtype, rho0)

        def rec(c: int, xc: torch.Tensor, rows: torch.Tensor | None = None, lo: int = start,
                hi: int = stop) -> None:
            if not bool(torch.isfinite(xc).all()):
                hint = "lower beta or sigma" + (" or use float64" if tdtype != torch.float64
                                                else "")
                raise FloatingPointError(
                    f"non-finite tokens at checkpoint {c} (beta={params.beta}, sigma="
                    f"{params.noise_scale}, dtype={tdtype}): the step overflowed; {hint}")
            at = slice(lo, hi) if rows is None else rows + lo
            book.record(at, c, xc)  # 'gram', 'tokens' and the user's observers

        # the Gram sampler draws the forms' compressions to its frame, from the same streams
        forms = qk_draws(params, scheme, rs, tdtype) if used != "gram" else None
        framed = frame_forms(params, scheme, rs.derived(QK_STREAM), tdtype) if (
            used == "gram" and params.qk_law.random) else None
        mlp_rs = rs.derived(MLP_STREAM) if params.mlp_block.active else None
        bias_rs = rs.derived(BIAS_STREAM) if params.has_bias else None
        token_rs = token_noise_streams(params, rs)
        retain = _both(rs.retain, *(f.retain for f in (forms, framed, mlp_rs, bias_rs, token_rs)
                                    if f is not None))
        halt = None if decide is None else Stop(*decide, stop - start, retain,
                                                  directions=params.norm != "post")
        if used == "gram":
            xf = run_batch_gram(x, params, grid, rs, scheme, ck, rec, progress, stop=halt,
                                forms=framed, mlp_rs=mlp_rs)
        else:
            wb = None if w_all is None else torch.as_tensor(
                w_all if w_all.ndim == 1 else w_all[start:stop], dtype=tdtype, device=dev)
            xf = run_batch(x, params, grid, rs, used, scheme, ck, rec, progress, stop=halt,
                           forms=forms, mlp_rs=mlp_rs, weights=wb, bias_rs=bias_rs,
                           attention_eval=evaluator, token_rs=token_rs)
        if halt is not None:
            layer_of[start:stop] = halt.layer
            if progress is not None:  # the layers that decided runs did not need
                progress(int(np.where(halt.layer >= 0, grid.steps - halt.layer, 0).sum()))
        finals.append(xf.cpu())
    seen = book.arrays()  # 'gram' and 'tokens' go to their own fields
    extra: dict[str, Any] = {"attention_eval": evaluator}
    if decide is not None:
        extra |= {"tol": decide[0], "decide_every": decide[1], "max_T": grid.T}
    return SimResult(
        params=params, grid=grid, runs=runs, seed=seed, sampler=used, scheme=scheme,
        init=init_kind if init_kind != "pair" else f"pair(rho0={rho0})", checkpoints=ck,
        x=torch.cat(finals).numpy(), gram=seen.pop("gram", None), tokens=seen.pop("tokens", None),
        observed=seen,
        dtype=str(tdtype).removeprefix("torch."), device=str(dev),
        wall_s=time.perf_counter() - t0, extra=extra,
        decided_at=None if decide is None else layer_of,
    )
