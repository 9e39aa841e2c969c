"""The two predictions of a mapped real network, from its embeddings: tokensde's discrete network at
the real depth (`scheme='network'`, L layers of dt = 1/L) and its depth limit (`scheme='sde'`, a
fine grid on [0, 1]), both by the exact Gram-space sampler (docs/gram.md: the law of the Gram
matrix, at a cost that does not grow with d), or, when the mapped model has biases (which that
sampler does not carry), by the exact fast sampler in R^d (sampler 'fast'): `simulate`'s runs,
in batches of `RUN_BLOCK`, every layer observed.

Initial tokens: the real embeddings, divided by `sqrt(d r0^2)` (pre-norm: the residual stream keeps
its radii) or normalised (post-norm; with LayerNorm's centring, centred and written in the d - 1
coordinates of the model), handed to `simulate` as they are (`InitialState.as_is`). Each run is an
independent unit.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch

from ..model.params import TimeGrid
from ..sim.observe import Observer
from ..sim.options import Execution, InitialState, Recording
from ..sim.rng import _RUN_BLOCK
from ..sim.simulate import simulate
from .mapping import Mapping
from .measure import _TOL, directions_gram, gram_stats

__all__ = ["initial_state", "predict"]

_SDE_STEPS = 64  # Euler steps of the depth limit on [0, 1] (a default run; docs/benchmarks.md)
_SDE_RUNS = 32  # runs of the depth limit in a default run (the first embeddings)
_SDE_QK_SAMPLES = 2  # draws of the query/key law per head and SDE step (docs/variants.md §3): the
# logits of a real init are small (standard deviation d s var_QK ~ 0.1), so the average over the
# law barely moves the attention, and each draw costs a head of noise


def _centred_coordinates(x: torch.Tensor) -> torch.Tensor:
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
            x = _centred_coordinates(x)
        return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x / (m.params.d * m.radius2) ** 0.5


def _prediction_execution(biased: bool) -> Execution:
    """How a prediction is computed: float64, dense attention, the exact Gram sampler (the fast
    one where the model has biases, which the Gram sampler does not carry)."""
    return Execution(sampler="fast" if biased else "gram", attention_eval="dense",
                     dtype="float64", batch_size=_RUN_BLOCK)


def predict(m: Mapping, x0: torch.Tensor, seed: int, scheme: str = "network",
            steps: int = _SDE_STEPS, tol: float = _TOL,
            progress: Callable[[int], None] | None = None
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Statistics of the prediction at every recorded layer: `(fractions (K,), {stat: (runs, K)})`
    from embeddings `x0` `(runs, n, d)` (one run each); `scheme='sde'`: the limit on `steps`
    Euler steps of [0, 1], the query/key law averaged with `_SDE_QK_SAMPLES` draws. The runs
    are `simulate`'s from `initial_state` (`InitialState.as_is`), every layer observed."""
    grid = m.grid if scheme == "network" else TimeGrid(steps, 1.0 / steps)
    p = m.params
    if scheme == "sde" and p.qk_law.random:
        p = p.with_(qk_samples=_SDE_QK_SAMPLES)
    x = initial_state(m, x0)
    names: list[str] = []  # the statistics, in gram_stats' order (set at the first call)

    def stats(xc: torch.Tensor) -> torch.Tensor:
        got = gram_stats(directions_gram(xc), tol)
        names[:] = list(got)
        return torch.stack([torch.as_tensor(v, dtype=torch.float64) for v in got.values()], -1)

    with warnings.catch_warnings():
        # the caller chooses the limit's step (`steps`) and judges it, as before predict went
        # through simulate: simulate's warning on a coarse Euler step is kept out
        warnings.filterwarnings("ignore", "scheme='sde' with sigma", RuntimeWarning)
        res = simulate(p, grid, runs=x.shape[0], seed=seed, scheme=scheme,
                       initial=InitialState.as_is(x),
                       # invariant, but the effective rank magnifies the rounding of a
                       # rotated rank-deficient state (sqrt of ~0 eigenvalues): not checked
                       recording=Recording(range(grid.steps + 1), (),
                                           Observer("stats", stats, invariant=True,
                                                    check=False)),
                       execution=_prediction_execution(p.has_bias),
                       progress=progress)
    kept = res.observed["stats"]  # (runs, K, stats)
    return np.arange(grid.steps + 1) / grid.steps, {
        k: np.ascontiguousarray(kept[..., i]) for i, k in enumerate(names)}
