"""One batch of runs through the layers: its initial tokens, its random draws, its layer step.

`run_batch` advances a batch `(runs, n, d)` of the network (or of its SDE) with the fast or full
sampler through `march`, the one layer loop; `Draws` holds the batch's random streams: the
value noise and tokens, and the streams derived from them for the query/key forms, the MLP
blocks, the biases and the independent token noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..model.params import ModelParams, ParameterError, TimeGrid
from ..model.qk import QKDraws
from .bias import _BIAS_STREAM, _check_bias, _mlp_branch
from .layers import _NORM_STEPS, _attention_output, _layer_step, _residual_step, network_step, normalize
from .loop import _DecidedStop, _march, _Progress, _Recorder
from .norm_sde import _peri_noise, _peri_sde_step
from .rng import _RUN_BLOCK, MLP_STREAM, QK_STREAM, RunStreams
from .samplers import _mlp_sampler, _noise_sampler, _scheme_params
from .sde import _sde_layer, sde_step
from .token_noise import _add_token_noise, _check_token_noise, _token_noise_streams

__all__ = ["Draws", "default_batch", "run_batch"]

_SCHEMES: dict[str, Callable[..., torch.Tensor]] = {"network": network_step, "sde": sde_step}
# the step of each (scheme, norm) other than post-norm (docs/variants.md §4): the Euler step of the
# pre-norm limit is the residual update itself
_NORM_SCHEMES: dict[tuple[str, str], Callable[..., torch.Tensor]] = {
    **{("network", k): v for k, v in _NORM_STEPS.items()},
    ("sde", "pre"): _residual_step, ("sde", "peri"): _peri_sde_step}

_BATCH_BYTES = 1 << 30  # CUDA: the whole noise workspace of a batch
_CACHE_BYTES = 4 << 20  # CPU: one per-layer tensor of a batch (benchmarks/bench_batch.py)


def _pair_tokens(rho0: float, d: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Two unit vectors with `<x_1, x_2> = rho0`: `e_1` and `rho0 e_1 + sqrt(1 - rho0^2) e_2`."""
    x = torch.zeros(2, d, dtype=dtype, device=device)
    x[0, 0] = 1.0
    x[1, 0] = rho0
    x[1, 1] = math.sqrt(max(0.0, 1.0 - rho0 * rho0))
    return x


def _initial_tokens(
    init: str | np.ndarray | torch.Tensor,
    p: ModelParams,
    rs: RunStreams,
    start: int,
    dtype: torch.dtype,
    rho0: float | None = None,
    as_is: bool = False,
) -> torch.Tensor:
    """Initial tokens `(runs, n, d)` for this batch: 'uniform' on the sphere, 'pair' at `rho0`, or
    a given array `(n, d)` or `(runs_total, n, d)` (rows normalised, or kept as they are with
    `as_is`: a residual stream, `InitialState.as_is`)."""
    b, n, d = rs.runs, p.n, p.d
    if isinstance(init, str):
        if init == "uniform":
            return normalize(rs.normal(n, d, dtype=dtype))
        if init == "pair":
            if rho0 is None:
                raise ParameterError("init='pair' needs rho0 in [-1, 1]")
            return _pair_tokens(float(rho0), d, dtype, rs.device).expand(b, 2, d).clone()
        raise ParameterError(f"init must be 'uniform', 'pair' or an array; got {init!r}")
    a = torch.as_tensor(init, dtype=dtype, device=rs.device)
    a = a[start:start + b] if a.ndim == 3 else a.expand(b, n, d)
    return a.clone() if as_is else normalize(a.clone())


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
        per_run, budget = (width + n * d) * 4 + 2 * n * n, _BATCH_BYTES
    else:
        per_run, budget = width, _CACHE_BYTES
    fit = budget // (per_run * (torch.finfo(dtype).bits // 8))
    return min(runs, max(_RUN_BLOCK, fit // _RUN_BLOCK * _RUN_BLOCK))


def _qk_draws(p: ModelParams, scheme: str, rs: RunStreams, dtype: torch.dtype
             ) -> QKDraws | None:
    """The random query/key forms of the runs of `rs` (None for qk='identity'), drawn from streams
    of their own (`rs.derived(QK_STREAM)`): the initial tokens and the value noise stay those of
    qk='identity' with the same seed."""
    if not p.qk_law.random:
        return None
    q = _scheme_params(p, scheme)
    return QKDraws(q.qk_law, q.heads, rs.derived(QK_STREAM), dtype)


@dataclass(frozen=True)
class Draws:
    """The random streams of one batch of runs: `runs` (tokens and value noise), and those
    derived from it (`RunStreams.derived`), present where the model draws them: the query/key
    forms (`qk_draws`), the MLP blocks' weights, the biases and the independent token noise.

    Args:
        runs: the batch's run streams.
        forms: the random query/key forms, or None (qk='identity').
        mlp: the MLP blocks' streams, or None (no block).
        bias: the biases' streams, or None (no bias).
        token: the token noise's streams, or None (token_noise = 0).
    """

    runs: RunStreams
    forms: QKDraws | None = None
    mlp: RunStreams | None = None
    bias: RunStreams | None = None
    token: RunStreams | None = None

    @classmethod
    def of(cls, p: ModelParams, scheme: str, rs: RunStreams, dtype: torch.dtype) -> Draws:
        """Every stream that the model `p` draws from, for the runs of `rs`."""
        return cls(rs, _qk_draws(p, scheme, rs, dtype),
                   rs.derived(MLP_STREAM) if p.mlp_block.active else None,
                   rs.derived(_BIAS_STREAM) if p.has_bias else None,
                   _token_noise_streams(p, rs))

    def retain(self, mask: torch.Tensor) -> None:
        """Keep only the runs of `mask` in every stream (`DecidedStop`: decided runs leave)."""
        for s in (self.runs, self.forms, self.mlp, self.bias, self.token):
            if s is not None:
                s.retain(mask)


def run_batch(
    x: torch.Tensor,
    p: ModelParams,
    grid: TimeGrid,
    draws: Draws,
    sampler: str,
    scheme: str,
    recorder: _Recorder | None = None,
    progress: _Progress | None = None,
    stop_test: _DecidedStop | None = None,
    weights: torch.Tensor | None = None,
    attention_eval: str = "dense",
) -> torch.Tensor:
    """Advance one batch `x` `(runs, n, d)` of `x^{k+1} = N(x^k + dt M y^k + sqrt(dt) V_k y^k)`
    (or its SDE) through `grid.steps` layers, handing the state to `recorder` at its layers.

    Args:
        x: the batch's initial tokens `(runs, n, d)`.
        p: the model.
        grid: the horizon.
        draws: the batch's streams (`Draws.of`): each stream the model draws from must be there.
        sampler: 'fast' or 'full'.
        scheme: 'network' or 'sde'.
        recorder: what records the state (`loop._Recorder`: `recorder.at(k, x, rows)` at each
            layer `k` of `recorder.layers`), or None.
        progress: a progress callback, or None.
        stop_test: the stopping rule (`loop._march`), or None for the horizon.
        weights: token weights `(n,)` or `(runs, n)` of the attention, or None.
        attention_eval: 'dense' or 'expansion' (`expansion._choose_evaluator`).

    Returns:
        The final state `(runs, n, d)`.
    """
    _check_bias(p, scheme)
    _check_token_noise(p, sampler)
    needed = {"forms": p.qk_law.random, "mlp": p.mlp_block.active, "bias": p.has_bias,
              "token": p.token_noise > 0}
    missing = [k for k, used in needed.items() if used and getattr(draws, k) is None]
    if missing:
        raise ParameterError(f"the model draws {', '.join(missing)}: pass draws = "
                             "Draws.of(p, scheme, rs, dtype), which holds their streams")
    q = _scheme_params(p, scheme)
    step = _SCHEMES[scheme] if p.norm == "post" else _NORM_SCHEMES[scheme, p.norm]
    noise = _peri_noise if (scheme, p.norm) == ("sde", "peri") else _noise_sampler(sampler, q)
    silent = p.noise_scale == 0.0
    inputs = (lambda t: t) if p.norm == "post" else normalize  # what attention sees
    block = _mlp_sampler(sampler, scheme) if p.mlp_block.active else None
    # the limit takes both noises in one step, the network one sublayer each (docs/variants.md §5)
    advance = _sde_layer if scheme == "sde" else _layer_step
    mlp = _mlp_branch(q, sampler, block, draws.mlp, draws.bias)
    rs, forms, token = draws.runs, draws.forms, draws.token

    def layer(xk: torch.Tensor) -> torch.Tensor:
        y = _attention_output(inputs(xk), q, None if forms is None else forms.next(), weights,
                             attention_eval)
        xi = torch.zeros_like(xk) if silent else noise(y, q, rs)
        if token is not None:
            xi = _add_token_noise(xi, q, token)
        return advance(xk, y, xi, q, grid.dt, mlp, step)

    return _march(x, grid.steps, layer, recorder, progress, stop_test=stop_test)
