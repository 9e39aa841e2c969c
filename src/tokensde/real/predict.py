"""The two predictions of a mapped real network, from its embeddings: tokensde's discrete network at
the real depth (`scheme='network'`, L layers of dt = 1/L) and its depth limit (`scheme='sde'`, a
fine grid on [0, 1]), both by the exact Gram-space sampler (docs/gram.md: the law of the Gram
matrix, at a cost that does not grow with d), or, when the mapped model has biases (which that
sampler does not carry), by the exact fast sampler in R^d (`simulate.run_batch`, sampler 'fast').

Initial tokens: the real embeddings, divided by `sqrt(d r0^2)` (pre-norm: the residual stream keeps
its radii) or normalised (post-norm). Each run is an independent unit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..model.params import TimeGrid
from ..sim.batch import Draws, run_batch
from ..sim.gram import frame_forms, run_batch_gram
from ..sim.rng import MLP_STREAM, QK_STREAM, RUN_BLOCK, RunStreams
from .mapping import Mapping
from .measure import TOL, directions_gram, gram_stats

SDE_STEPS = 64  # Euler steps of the depth limit on [0, 1] (a default run; docs/benchmarks.md)
SDE_RUNS = 32  # runs of the depth limit in a default run (the first embeddings)
SDE_QK_SAMPLES = 2  # draws of the query/key law per head and SDE step (docs/variants.md §3): the
# logits of a real init are small (standard deviation d s var_QK ~ 0.1), so the average over the
# law barely moves the attention, and each draw costs a head of noise


def initial_state(m: Mapping, x0: torch.Tensor) -> torch.Tensor:
    """The tokensde state `(runs, n, d)` of real embeddings `x0`: `x0 / sqrt(d r0^2)` (pre) or
    `x0 / |x0|` (post), float64."""
    x = x0.to(torch.float64)
    if m.params.norm == "post":
        return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x / (m.params.d * m.radius2) ** 0.5


def predict(m: Mapping, x0: torch.Tensor, seed: int, scheme: str = "network",
            steps: int = SDE_STEPS, tol: float = TOL,
            progress: Callable[[int], None] | None = None
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Statistics of the prediction at every recorded layer: `(fractions (K,), {stat: (runs, K)})`
    from embeddings `x0` `(runs, n, d)` (one run each); `scheme='sde'`: the limit on `steps`
    Euler steps of [0, 1], the query/key law averaged with `SDE_QK_SAMPLES` draws."""
    grid = m.grid if scheme == "network" else TimeGrid(steps, 1.0 / steps)
    p = m.params
    if scheme == "sde" and p.qk_law.random:
        p = p.with_(qk_samples=SDE_QK_SAMPLES)
    ck = np.arange(grid.steps + 1)
    x = initial_state(m, x0)
    runs = x.shape[0]
    out: dict[str, np.ndarray] = {}
    for start in range(0, runs, RUN_BLOCK):
        stop = min(start + RUN_BLOCK, runs)
        rs = RunStreams(seed, runs, start, stop)
        mlp_rs = rs.derived(MLP_STREAM) if p.mlp_block.active else None

        def record(c: int, xc: torch.Tensor, lo: int = start, hi: int = stop) -> None:
            for k, v in gram_stats(directions_gram(xc), tol).items():
                if k not in out:
                    out[k] = np.empty((runs, len(ck)))
                out[k][lo:hi, c] = v

        if p.has_bias:
            run_batch(x[start:stop], p, grid, Draws.of(p, scheme, rs, torch.float64), "fast",
                      scheme, ck, record, progress)
        else:
            forms = frame_forms(p, scheme, rs.derived(QK_STREAM), torch.float64)
            run_batch_gram(x[start:stop], p, grid, rs, scheme, ck, record, progress,
                           forms=forms, mlp_rs=mlp_rs)
    return ck / grid.steps, out
