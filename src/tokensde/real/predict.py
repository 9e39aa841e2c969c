"""The two predictions of a mapped real network, from its embeddings: tokensde's discrete network at
the real depth (`scheme='network'`, L layers of dt = 1/L) and its depth limit (`scheme='sde'`, a
fine grid on [0, 1]), both by the exact Gram-space sampler (docs/gram.md: the law of the Gram
matrix, at a cost that does not grow with d), or, when the mapped model has biases (which that
sampler does not carry), by the exact fast sampler in R^d (`batch.run_batch`, sampler 'fast').

Initial tokens: the real embeddings, divided by `sqrt(d r0^2)` (pre-norm: the residual stream keeps
its radii) or normalised (post-norm; with LayerNorm's centring, centred and written in the d - 1
coordinates of the model). Each run is an independent unit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..model.params import TimeGrid
from ..sim.batch import Draws, run_batch
from ..sim.gram import frame_forms, run_batch_gram
from ..sim.loop import OnLayers
from ..sim.rng import MLP_STREAM, QK_STREAM, RUN_BLOCK, RunStreams
from .mapping import Mapping
from .measure import TOL, directions_gram, gram_stats

SDE_STEPS = 64  # Euler steps of the depth limit on [0, 1] (a default run; docs/benchmarks.md)
SDE_RUNS = 32  # runs of the depth limit in a default run (the first embeddings)
_SDE_QK_SAMPLES = 2  # draws of the query/key law per head and SDE step (docs/variants.md §3): the
# logits of a real init are small (standard deviation d s var_QK ~ 0.1), so the average over the
# law barely moves the attention, and each draw costs a head of noise


def centred_coordinates(x: torch.Tensor) -> torch.Tensor:
    """The coordinates `(..., d - 1)` of the centred `x - mean(x) 1` in an orthonormal basis of
    the d - 1 dimensions orthogonal to `1 = (1, ..., 1)`: `x` after the Householder reflection
    that takes `1 / sqrt(d)` to the last axis, without that axis (inner products of centred
    tokens kept)."""
    d = x.shape[-1]
    w = torch.full((d,), d ** -0.5, dtype=x.dtype)
    w[-1] -= 1.0
    w = w / torch.linalg.vector_norm(w)
    return (x - 2.0 * (x @ w)[..., None] * w)[..., :-1]


def initial_state(m: Mapping, x0: torch.Tensor) -> torch.Tensor:
    """The tokensde state `(runs, n, d)` of real embeddings `x0`: `x0 / sqrt(d r0^2)` (pre) or
    `x0 / |x0|` (post); post-LN with centring, the centred embeddings in `d - 1` coordinates
    (`centred_coordinates`), normalised. float64."""
    x = x0.to(torch.float64)
    if m.params.norm == "post":
        if m.law.model_d < m.law.d:
            x = centred_coordinates(x)
        return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x / (m.params.d * m.radius2) ** 0.5


def predict(m: Mapping, x0: torch.Tensor, seed: int, scheme: str = "network",
            steps: int = SDE_STEPS, tol: float = TOL,
            progress: Callable[[int], None] | None = None
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Statistics of the prediction at every recorded layer: `(fractions (K,), {stat: (runs, K)})`
    from embeddings `x0` `(runs, n, d)` (one run each); `scheme='sde'`: the limit on `steps`
    Euler steps of [0, 1], the query/key law averaged with `_SDE_QK_SAMPLES` draws."""
    grid = m.grid if scheme == "network" else TimeGrid(steps, 1.0 / steps)
    p = m.params
    if scheme == "sde" and p.qk_law.random:
        p = p.with_(qk_samples=_SDE_QK_SAMPLES)
    ck = np.arange(grid.steps + 1)
    x = initial_state(m, x0)
    runs = x.shape[0]
    out: dict[str, np.ndarray] = {}
    for start in range(0, runs, RUN_BLOCK):
        stop = min(start + RUN_BLOCK, runs)
        rs = RunStreams(seed, runs, start, stop)
        mlp_rs = rs.derived(MLP_STREAM) if p.mlp_block.active else None

        def record(k: int, xc: torch.Tensor, rows: torch.Tensor, lo: int = start,
                   hi: int = stop) -> None:
            for key, v in gram_stats(directions_gram(xc), tol).items():
                if key not in out:
                    out[key] = np.empty((runs, len(ck)))
                out[key][lo:hi, k] = v  # every layer is recorded: column k is layer k

        at = OnLayers(ck, record)
        if p.has_bias:
            run_batch(x[start:stop], p, grid, Draws.of(p, scheme, rs, torch.float64), "fast",
                      scheme, at, progress)
        else:
            forms = frame_forms(p, scheme, rs.derived(QK_STREAM), torch.float64)
            run_batch_gram(x[start:stop], p, grid, rs, scheme, at, progress,
                           forms=forms, mlp_rs=mlp_rs)
    return ck / grid.steps, out
