"""Coupled levels: networks of several depths and the SDE on one Brownian path.

One fine grid of `ref_steps` steps of `h = T / ref_steps` carries the Brownian increments; a
coarse grid of `k` fine steps per step (a network of `L = ref_steps / k` layers, or the SDE at
step `k h`) steps once every `k` fine steps, driven by the sum of their increments. The fine SDE
is `march`'s state: one `march` step is one fine step of every scheme (`_Levels`), so the layers
of all the coupled schemes are applied through the one layer loop `tokensde.sim.loop.march`.

`coupled_states` (networks of several depths and both Richardson grids of the SDE, driven by
`RunStreams`; what the convergence study of `tokensde.analysis.convergence` reduces to
statistics) and `coupled_paths` (one network and its SDE on increments given by the caller) are
the two entries of that one stepper.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..model.params import ModelParams, ParameterError, TimeGrid, check_int
from .batch import qk_draws
from .layers import NORM_STEPS, attention_output, layer_step, normalize, residual_step
from .loop import Progress, march
from .rng import RunStreams
from .samplers import apply_matrices, mlp_kernel_noise, mlp_noise_given, scheme_params
from .sde import sde_layer, sde_step

LAWS: tuple[str, ...] = ("gaussian", "uniform")

# on_step(j, nets, fine, half): the states after fine step j
OnStep = Callable[[int, dict[tuple[str, int], torch.Tensor], torch.Tensor, torch.Tensor], None]
# drive(j) -> (dw, zm, forms): the Brownian increment, the MLP block's normals and the qk forms of
# fine step j (1-based)
Drive = Callable[[int], tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]


def check_levels(levels: Sequence[int], ref_steps: int) -> tuple[int, ...]:
    """Sorted distinct levels, each >= 1 and dividing `ref_steps`; `ref_steps` even."""
    ref_steps = check_int("ref_steps", ref_steps, 2)
    out = tuple(sorted({check_int("level", L, 1) for L in levels}))
    if not out:
        raise ParameterError("levels must hold at least one layer count; got none")
    bad = [L for L in out if ref_steps % L]
    if bad or ref_steps % 2:
        raise ParameterError(f"ref_steps must be even and a multiple of every level; got "
                             f"ref_steps={ref_steps}, levels not dividing it: {bad}")
    return out


def uniform_from_gaussian(v: torch.Tensor, sigma: float) -> torch.Tensor:
    """Entry-wise quantile map `N(0, sigma^2) -> U(-sigma sqrt 3, sigma sqrt 3)` (same variance)."""
    if sigma == 0.0:
        return torch.zeros_like(v)
    return sigma * math.sqrt(3.0) * torch.special.erf(v / (sigma * math.sqrt(2.0)))


def coupled_states(x0: torch.Tensor, p: ModelParams, T: float, levels: Sequence[int],
                   ref_steps: int, rs: RunStreams, laws: Sequence[str] = LAWS,
                   progress: Progress | None = None,
                   on_step: OnStep | None = None,
                   qk_rs: RunStreams | None = None,
                   mlp_rs: RunStreams | None = None,
                   ) -> tuple[dict[tuple[str, int], torch.Tensor], torch.Tensor, torch.Tensor]:
    """Networks of `L` layers and the SDE at steps `T / ref_steps` and `2 T / ref_steps`, one Brownian path.

    The final states `(runs, n, d)` of every (law, level) network, of the SDE on the fine grid
    (`ref_steps` steps over `[0, T]`) and of the SDE on the grid twice as coarse, all driven by one
    Brownian path: fine step `j` draws `dW_j = sigma sqrt(h) Z_j`, `Z_j = rs.normal(d, d)`; with
    `heads > 1`, one path per head, `Z_j = rs.normal(heads, d, d)` and `sigma / sqrt(heads)`.
    A network of law 'gaussian' takes `V_k = (sum of the fine dW in layer k) / sqrt(dt)`, of law
    'uniform' its entry-wise quantile transform (`uniform_from_gaussian`, same variance).

    A random qk law draws its forms from `qk_rs`: with qk_redraw='run' once, shared by every
    network and SDE of a run; with 'layer' afresh at every fine step of the SDE, which averages
    over the law with `qk_samples` draws per head and step (`model.scheme_params`): its path is
    `Z_j = rs.normal(heads, qk_samples, d, d)` over `sqrt(heads qk_samples)`, a network's head `h`
    takes the sum over the draws as its path and, as its form for a layer, the first draw of head
    `h` at the first fine step of the layer (the SDE twice as coarse: the draws of its first fine
    step). Each scheme then still sees forms independent over its steps and of the noise, and the
    shared draws keep the schemes close (common random numbers).

    An MLP block (docs/variants.md §5) draws from `mlp_rs`: fine step `j` of the SDE drives its
    kernel noise `mlp_sigma C_K(x) Z^m_j` by standard normals `Z^m_j` `(n, d)`; a network's layer
    draws its hidden pre-activations afresh and drives the block's output `s C_H Z` (the exact
    fast form, `tokensde.sim.samplers.mlp_noise_fast`) by the sum of the `Z^m_j` of its fine steps
    over `sqrt(k)`: one Gaussian path for both, coupled as far as `s^2 H H^T` is close to
    `mlp_sigma^2 khat(X X^T)`.

    Pre-norm (`p.norm='pre'`, docs/variants.md §4): the state is the residual stream, attention
    and the MLP block read its directions, the network's sublayers and the SDE's Euler step are the
    residual update `x + sqrt(dt) xi` (no projection, no Ito drift). Peri-norm is refused (its
    SDE's noise is not the value noise of a shared matrix path).

    Args:
        x0: The initial tokens `(runs, n, d)`, shared by every scheme.
        p: The model (norm 'post' or 'pre').
        T: The horizon.
        levels: The network depths `L`, each dividing `ref_steps`.
        ref_steps: The fine SDE steps over `[0, T]` (even).
        rs: The run streams of the Brownian path.
        laws: The value-noise laws of the networks ('gaussian', 'uniform').
        progress: Called with the number of runs after each fine step, or None.
        on_step: `on_step(j, nets, fine, half)`, called after fine step `j` (every network has
            then done the layers that end at or before `j h`; `half` is the SDE twice as coarse,
            current at even `j`), or None.
        qk_rs: The streams of a random qk law's forms, or None.
        mlp_rs: The streams of the MLP block's weights (needed with an MLP block), or None.

    Returns:
        `(nets, fine, half)`: the networks' final states by `(law, L)`, the fine SDE's and the
        coarse SDE's, each `(runs, n, d)`.
    """
    levels = check_levels(levels, ref_steps)
    _check_coupled("coupled_states", p)
    if p.mlp_block.active and mlp_rs is None:
        raise ParameterError(f"mlp={p.mlp!r} needs the streams of its weights (mlp_rs)")
    h = T / ref_steps
    c = _Coupling(p, h)
    draws = None if qk_rs is None else qk_draws(p, "sde", qk_rs, x0.dtype)

    def drive(j: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        dw = c.increment(rs, x0.dtype)
        zm = mlp_rs.normal(p.n, p.d, dtype=x0.dtype) if mlp_rs is not None and c.mlp else None
        return dw, zm, None if draws is None else draws.next()

    # the coarse grids: the SDE twice as coarse (level None), then each level
    grids = [c.grid(None, 2, 2 * h, math.sqrt(2 * h), x0),
             *(c.grid(L, k, k * h, math.sqrt(k * h), x0)
               for L in levels for k in (ref_steps // L,))]
    run = _Levels(c, x0, grids, tuple(laws), drive, h, math.sqrt(h), mlp_rs)
    fine = run.march(x0.clone(), ref_steps, progress, on_step)
    assert run.half is not None
    return run.nets, fine, run.half


def coupled_paths(
    x0: torch.Tensor,
    p: ModelParams,
    grid: TimeGrid,
    increments: Callable[[int], torch.Tensor],
    substeps: int = 1,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the network and the SDE on one Brownian path; return both final states.

    The network uses `V_k = sum(dW) / sqrt(dt)`; the SDE steps on the grid `substeps` times finer.
    Matrix noise, without token noise (`token_noise = 0`) or an MLP block. The one stepper of
    `coupled_states`, on increments given by the caller: one level of `grid.steps` layers, the
    'gaussian' law, no SDE twice as coarse.

    Args:
        x0: initial unit tokens `(runs, n, d)`.
        p: the model parameters (norm 'post' or 'pre').
        grid: the network's layers (`dt` its step).
        increments: `increments(k)` gives the Brownian increments `dW` of layer `k`,
            `(runs, substeps, d, d)`, or `(runs, substeps, heads, d, d)` with `heads > 1`;
            called once per layer, in order.
        substeps: SDE steps per layer.
        weights: token weights `(n,)` or `(runs, n)` of the attention (`layers.weights_from_logits`).

    Returns:
        The final states `(network, sde)`, each `(runs, n, d)`.
    """
    _check_coupled("coupled_paths", p)
    if p.mlp_block.active:
        raise ParameterError(f"coupled_paths carries no MLP block noise; got mlp={p.mlp!r} "
                             "(use coupled_states with mlp_rs)")
    substeps = check_int("substeps", substeps, 1)
    h = grid.dt / substeps
    c = _Coupling(p, h)
    layer: list[torch.Tensor] = []  # the increments of the current layer

    def drive(j: int) -> tuple[torch.Tensor, None, None]:
        i = (j - 1) % substeps
        if i == 0:
            layer[:] = [increments((j - 1) // substeps)]
        return layer[0][:, i], None, None

    # the network's increment: the sum over its layer as one reduction (`dW.sum(1)`)
    net = c.grid(grid.steps, substeps, grid.dt, grid.dt**0.5, x0, total=lambda: layer[0].sum(1))
    run = _Levels(c, x0, [net], ("gaussian",), drive, h, h**0.5, None, weights, half=False)
    x_sde = run.march(x0.clone(), grid.steps * substeps)
    return run.nets["gaussian", grid.steps], x_sde


def _check_coupled(name: str, p: ModelParams) -> None:
    if p.norm not in ("post", "pre"):
        raise ParameterError(f"{name} takes norm='post' or 'pre'; got norm={p.norm!r}")
    if p.token_noise > 0:
        raise ParameterError(f"{name} does not carry independent token noise; got "
                             f"token_noise={p.token_noise:g} (the allowed value is 0)")


@dataclass
class _Grid:
    """A coarse grid of `k` fine steps per step of size `dt` (`root` = its square root; `level`
    None: the SDE twice as coarse): the sums of the fine increments `dw` and of the block's normals
    `zm` over its current step, and the forms drawn at that step's first fine step. `total`, when
    given, is the step's summed increment computed by the caller (then `dw` is not summed)."""

    level: int | None
    k: int
    dt: float
    root: float
    dw: torch.Tensor
    zm: torch.Tensor | None
    forms: torch.Tensor | None = None
    total: Callable[[], torch.Tensor] | None = None

    def add(self, j: int, dw: torch.Tensor, zm: torch.Tensor | None, forms: torch.Tensor | None
            ) -> bool:
        """Add fine step `j`; True when it ends a step of this grid."""
        if (j - 1) % self.k == 0:
            self.forms = forms
        if self.total is None:
            self.dw += dw
        if self.zm is not None and zm is not None:
            self.zm += zm
        return j % self.k == 0

    def increment(self) -> torch.Tensor:
        """The summed increment of the step just ended."""
        return self.dw if self.total is None else self.total()

    def reset(self) -> None:
        """Start the next step: the sums back to zero."""
        self.dw.zero_()
        if self.zm is not None:
            self.zm.zero_()


class _Coupling:
    """How one fine Brownian increment drives the SDE's heads and the networks' (`coupled_states`):
    with `m` draws of the qk law per head and SDE step, the SDE sees `heads m` paths and a
    network's head the sum of its `m`."""

    def __init__(self, p: ModelParams, h: float) -> None:
        self.p, self.ps, self.h = p, scheme_params(p, "sde"), h
        self.m = self.ps.heads // p.heads  # draws of the qk law per head and SDE step
        self.sig = p.sigma / math.sqrt(self.ps.heads)  # entry scale of one SDE head's value noise
        self.sig_net = p.sigma / math.sqrt(p.heads)  # and of one network head's
        d = p.d
        self.net_shape = (d, d) if p.heads == 1 else (p.heads, d, d)
        self.shape = self.net_shape if self.m == 1 else (p.heads, self.m, d, d)
        self.mlp = p.mlp_block.active
        # what attention reads, and the steps: post-norm projects, pre-norm adds to the stream
        self.inputs = (lambda t: t) if p.norm == "post" else normalize
        self.net_step = NORM_STEPS[p.norm]
        self.sde_step = sde_step if p.norm == "post" else residual_step

    def grid(self, level: int | None, k: int, dt: float, root: float, x0: torch.Tensor,
             total: Callable[[], torch.Tensor] | None = None) -> _Grid:
        """Empty sums for a grid of `k` fine steps per step of size `dt` (`root = sqrt(dt)`)."""
        zm = torch.zeros(x0.shape[0], self.p.n, self.p.d, dtype=x0.dtype) if self.mlp else None
        dw = torch.zeros(x0.shape[0], *self.shape, dtype=x0.dtype) if total is None else \
            torch.zeros(0, dtype=x0.dtype)
        return _Grid(level, k, dt, root, dw, zm, total=total)

    def increment(self, rs: RunStreams, dtype: torch.dtype) -> torch.Tensor:
        """One fine step's Brownian increment `sig sqrt(h) Z`."""
        return self.sig * math.sqrt(self.h) * rs.normal(*self.shape, dtype=dtype)

    def sde(self, x: torch.Tensor, forms: torch.Tensor | None, dw: torch.Tensor,
            zm: torch.Tensor | None, k: int, dt: float, root: float,
            weights: torch.Tensor | None = None) -> torch.Tensor:
        """One SDE step of size `dt` (`root = sqrt(dt)`), `k` fine steps, driven by their summed
        increments `dw` and normals `zm`."""
        ps = self.ps
        y = attention_output(self.inputs(x), ps, forms, weights=weights)
        v = (dw if self.m == 1 else dw.flatten(1, 2)) / root
        z = None if zm is None else zm if k == 1 else zm / math.sqrt(k)
        mlp = None if z is None else (lambda u: mlp_kernel_noise(u, ps, z))
        return sde_layer(x, y, apply_matrices(y, v), ps, dt, mlp, self.sde_step)

    def forms(self, f: torch.Tensor | None) -> torch.Tensor | None:
        """The networks' forms: the first of the `m` draws of each head."""
        if f is None or self.m == 1:
            return f
        g = f.unflatten(1, (self.p.heads, self.m))[:, :, 0]
        return g[:, 0] if self.p.heads == 1 else g

    def networks(self, nets: dict[tuple[str, int], torch.Tensor], g: _Grid,
                 laws: Sequence[str], mlp_rs: RunStreams | None,
                 weights: torch.Tensor | None = None) -> None:
        """One layer of the level-`g.level` network of every law, in place in `nets`: value
        matrices from the summed increments (Gaussian, or their quantile transform), the hidden
        pre-activations of the block drawn afresh and its output driven by the summed normals."""
        p, dt = self.p, g.dt
        total = g.increment()
        dw = total if self.m == 1 else total.sum(2).reshape(-1, *self.net_shape)
        v_gauss = dw / g.root
        forms = self.forms(g.forms)
        pre = None if not self.mlp or mlp_rs is None else mlp_rs.normal(
            p.n, p.mlp_hidden, dtype=total.dtype)
        zm, root_k = g.zm, math.sqrt(g.k)
        mlp = None if pre is None or zm is None else (
            lambda u: mlp_noise_given(u, p, pre, zm, root_k))
        level = g.level
        assert level is not None, "networks() runs on the grids of the network levels"
        for law in laws:
            v = v_gauss if law == "gaussian" else uniform_from_gaussian(v_gauss, self.sig_net)
            x = nets[law, level]
            y = attention_output(self.inputs(x), p, forms, weights=weights)
            nets[law, level] = layer_step(x, y, apply_matrices(y, v), p, dt, mlp, self.net_step)


class _Levels:
    """One fine step of every coupled scheme, as the layer `march` applies: the fine SDE is the
    state `march` carries; the networks (`nets`) and the SDE twice as coarse (`half`) are stepped
    here whenever a step of their grid ends."""

    def __init__(self, c: _Coupling, x0: torch.Tensor, grids: list[_Grid], laws: tuple[str, ...],
                 drive: Drive, h: float, root_h: float, mlp_rs: RunStreams | None,
                 weights: torch.Tensor | None = None, half: bool = True) -> None:
        self.c, self.grids, self.laws, self.drive = c, grids, laws, drive
        self.h, self.root_h, self.mlp_rs, self.weights = h, root_h, mlp_rs, weights
        self.half = x0.clone() if half else None
        self.nets = {(law, g.level): x0.clone() for law in laws for g in grids
                     if g.level is not None}
        self.j = 0  # fine steps done

    def __call__(self, fine: torch.Tensor) -> torch.Tensor:
        """Fine step `j + 1`: the fine SDE, then each grid whose step it ends."""
        self.j += 1
        j, c = self.j, self.c
        dw, zm, f = self.drive(j)
        fine = c.sde(fine, f, dw, zm, 1, self.h, self.root_h, self.weights)
        for g in self.grids:
            if not g.add(j, dw, zm, f):
                continue
            if g.level is None:
                assert self.half is not None
                self.half = c.sde(self.half, g.forms, g.increment(), g.zm, g.k, g.dt, g.root,
                                  self.weights)
            else:
                c.networks(self.nets, g, self.laws, self.mlp_rs, self.weights)
            g.reset()
        return fine

    def march(self, fine: torch.Tensor, steps: int, progress: Progress | None = None,
              on_step: OnStep | None = None) -> torch.Tensor:
        """`steps` fine steps through `loop.march`, `on_step(j, nets, fine, half)` after each."""
        at = np.arange(1, steps + 1) if on_step is not None else np.empty(0, dtype=np.int64)

        def record(c: int, x: torch.Tensor) -> None:
            if on_step is not None:
                on_step(c + 1, self.nets, x, self.half if self.half is not None else x)

        return march(fine, steps, self, at, record, progress)
