"""Coupled levels: networks of several depths and the SDE on one Brownian path.

One fine grid of `ref_steps` steps of `h = T / ref_steps` carries the Brownian increments; a
coarse grid of `k` fine steps per step (a network of `L = ref_steps / k` layers, or the SDE at
step `k h`) steps once every `k` fine steps, driven by the sum of their increments. The fine SDE
is `march`'s state: one `march` step is one fine step of every scheme (`_Levels`), so the layers
of all the coupled schemes are applied through the one layer loop `tokensde.sim.loop._march`.

`coupled_states` (networks of several depths and both Richardson grids of the SDE, driven by
`RunStreams`; what the convergence study of `tokensde.analysis.convergence` reduces to
statistics) and `coupled_paths` (one network and its SDE on increments given by the caller) are
the two entries of that one stepper.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..model.params import ModelParams, ParameterError, TimeGrid, _check_int
from .batch import _qk_draws
from .layers import _NORM_STEPS, _attention_output, _layer_step, _residual_step, normalize
from .loop import _DecidedStop, _march, _Progress, _Recorder
from .rng import RunStreams
from .samplers import _mlp_kernel_noise, _mlp_noise_given, _scheme_params, apply_matrices
from .sde import _sde_layer, sde_step

_LAWS: tuple[str, ...] = ("gaussian", "uniform")



class CoupledState(NamedTuple):
    """What a `Recorder` of `coupled_states` gets after fine step `j`: every network by
    `(law, L)` (each has then done the layers that end at or before `j h`), the fine SDE and
    the SDE twice as coarse (current at even `j`; the fine SDE where it is not run), each
    `(runs, n, d)`."""

    nets: dict[tuple[str, int], torch.Tensor]
    fine: torch.Tensor
    half: torch.Tensor

# drive(j) -> (dw, zm, forms): the Brownian increment, the MLP block's normals and the qk forms of
# fine step j (1-based)
_Drive = Callable[[int], tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]


def _check_levels(levels: Sequence[int], ref_steps: int) -> tuple[int, ...]:
    """Sorted distinct levels, each >= 1 and dividing `ref_steps`; `ref_steps` even."""
    ref_steps = _check_int("ref_steps", ref_steps, 2)
    out = tuple(sorted({_check_int("level", L, 1) for L in levels}))
    if not out:
        raise ParameterError("levels must hold at least one layer count; got none")
    bad = [L for L in out if ref_steps % L]
    if bad or ref_steps % 2:
        raise ParameterError(f"ref_steps must be even and a multiple of every level; got "
                             f"ref_steps={ref_steps}, levels not dividing it: {bad}")
    return out


def _uniform_from_gaussian(v: torch.Tensor, sigma: float) -> torch.Tensor:
    """Entry-wise quantile map `N(0, sigma^2) -> U(-sigma sqrt 3, sigma sqrt 3)` (same variance)."""
    if sigma == 0.0:
        return torch.zeros_like(v)
    return sigma * math.sqrt(3.0) * torch.special.erf(v / (sigma * math.sqrt(2.0)))


def coupled_states(x0: torch.Tensor, p: ModelParams, T: float, levels: Sequence[int],
                   ref_steps: int, rs: RunStreams, laws: Sequence[str] = _LAWS,
                   progress: _Progress | None = None,
                   qk_rs: RunStreams | None = None,
                   mlp_rs: RunStreams | None = None,
                   *,
                   recorder: _Recorder[CoupledState] | None = None,
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
    over the law with `qk_samples` draws per head and step (`samplers._scheme_params`): its path is
    `Z_j = rs.normal(heads, qk_samples, d, d)` over `sqrt(heads qk_samples)`, a network's head `h`
    takes the sum over the draws as its path and, as its form for a layer, the first draw of head
    `h` at the first fine step of the layer (the SDE twice as coarse: the draws of its first fine
    step). Each scheme then still sees forms independent over its steps and of the noise, and the
    shared draws keep the schemes close (common random numbers).

    An MLP block (docs/variants.md §5) draws from `mlp_rs`: fine step `j` of the SDE drives its
    kernel noise `mlp_sigma C_K(x) Z^m_j` by standard normals `Z^m_j` `(n, d)`; a network's layer
    draws its hidden pre-activations afresh and drives the block's output `s C_H Z` (the exact
    fast form, `tokensde.sim.samplers._mlp_noise_fast`) by the sum of the `Z^m_j` of its fine steps
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
        qk_rs: The streams of a random qk law's forms, or None.
        mlp_rs: The streams of the MLP block's weights (needed with an MLP block), or None.
        recorder: What records the states (`loop._Recorder`, e.g. `loop.OnLayers` or
            `observe._Observations.batch`): `recorder.at(j, state, rows)` after each fine step
            `j` of `recorder.layers` (0: the start), `state` a `CoupledState`; or None.

    Returns:
        `(nets, fine, half)`: the networks' final states by `(law, L)`, the fine SDE's and the
        coarse SDE's, each `(runs, n, d)`.
    """
    levels = _check_levels(levels, ref_steps)
    _check_coupled("coupled_states", p)
    if p.mlp_block.active and mlp_rs is None:
        raise ParameterError(f"mlp={p.mlp!r} needs the streams of its weights (mlp_rs)")
    h = T / ref_steps
    c = _Coupling(p, h)
    draws = None if qk_rs is None else _qk_draws(p, "sde", qk_rs, x0.dtype)

    def drive(j: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        dw = c.increment(rs, x0.dtype)
        zm = mlp_rs.normal(p.n, p.d, dtype=x0.dtype) if mlp_rs is not None and c.mlp else None
        return dw, zm, None if draws is None else draws.next()

    # the coarse grids: the SDE twice as coarse (level None), then each level
    grids = [c.grid(None, 2, 2 * h, math.sqrt(2 * h), x0),
             *(c.grid(L, k, k * h, math.sqrt(k * h), x0)
               for L in levels for k in (ref_steps // L,))]
    run = _Levels(c, x0, grids, tuple(laws), drive, h, math.sqrt(h), mlp_rs)
    fine = run.march(x0.clone(), ref_steps, progress, recorder)
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
    substeps = _check_int("substeps", substeps, 1)
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
    run = _Levels(c, x0, [net], ("gaussian",), drive, h, h**0.5, None, weights)
    x_sde = run.march(x0.clone(), grid.steps * substeps)
    return run.nets["gaussian", grid.steps], x_sde


def _check_step_coupling(p: ModelParams) -> None:
    """ParameterError naming what `coupled_steps` cannot couple: value noise other than matrix
    noise (Gaussian or uniform law), norm 'peri', independent token noise, random biases."""
    _check_coupled("the step-doubling coupling", p)
    if p.noise != "matrix":
        raise ParameterError(f"the step-doubling coupling drives matrix value noise only; got "
                             f"noise={p.noise!r} (allowed: 'matrix')")
    if p.law not in _LAWS:
        raise ParameterError(f"the step-doubling coupling takes law one of {', '.join(_LAWS)}; "
                             f"got law={p.law!r}")
    if p.has_bias:
        raise ParameterError("the step-doubling coupling does not carry random biases; got "
                             f"bias_sigma={p.bias_sigma:g}, mlp_bias={p.mlp_bias:g} (allowed: 0)")


def _levels_of(steps: int) -> int:
    """The steps coupled over `steps` fine layers: 3 (dt, 2 dt, 4 dt) for a multiple of 4, else
    2 (dt, 2 dt; the order is then not checked)."""
    return 3 if steps % 4 == 0 else 2


def _why_not_coupled(p: ModelParams, steps: int, scheme: str, evaluator: str = "dense"
                    ) -> str | None:
    """Why the step error of a run of `p` over `steps` layers cannot be measured by step
    doubling (`coupled_steps`), None where it can; `evaluator` is the run's attention
    evaluation ('expansion': the coupled runs, which evaluate attention densely, are not run)."""
    try:
        _check_step_coupling(p)
    except ParameterError as err:
        return str(err)
    if scheme not in ("network", "sde"):
        return f"scheme {scheme!r}"
    if steps % 2:
        return f"step doubling needs an even number of layers; got {steps}"
    if evaluator == "expansion":
        return (f"the run evaluates attention by the O(n) expansion (n = {p.n}); the coupled "
                "runs evaluate it densely")
    return None


def _coupled_steps(x0: torch.Tensor, p: ModelParams, steps: int, dt: float, rs: RunStreams,
                  scheme: str = "network", decide: tuple[float, int] | None = None,
                  weights: torch.Tensor | None = None, levels: int = 2) -> torch.Tensor:
    """The model at steps `dt, 2 dt, ..., 2^(levels-1) dt` on one Brownian path: final states
    `(runs, levels, n, d)`.

    Step doubling: fine step `j` draws the increment `dW_j` as `coupled_states` does; the network
    at `dt` takes `V_j = dW_j / sqrt(dt)`, the network at `k dt` (k = 2, 4) takes the sum of the
    `V` of its `k` fine steps over `sqrt k` (the law of a network drawn at `k dt` directly), with
    the first forms of its fine steps and its own MLP hidden draws; with `scheme='sde'` the SDE at
    `dt` (march's state) and at `k dt` (driven likewise by the summed increments). All run
    `steps` fine steps (a multiple of `2^(levels-1)`), or, with `decide = (tol, every)`, each run
    until decided at every step (`loop._DecidedStop.decided`, tested every `every` fine steps, rounded up
    to a multiple of `2^(levels-1)` so that every coarse state is current). Models:
    `check_step_coupling`.

    Args:
        x0: initial tokens `(runs, n, d)`.
        p: the model.
        steps: fine steps (a multiple of `2^(levels-1)`).
        dt: the fine step.
        rs: the run streams (the random forms and MLP weights from `rs.derived`).
        scheme: 'network' or 'sde'.
        decide: `(tol, every)` to stop each run once decided at every step, or None.
        weights: token weights `(n,)` or `(runs, n)`, or None.
        levels: 2 (`dt`, `2 dt`) or 3 (`dt`, `2 dt`, `4 dt`).

    Returns:
        `(runs, levels, n, d)`: the final state at `dt` (index 0), `2 dt` (1) and `4 dt` (2).
    """
    from .rng import MLP_STREAM

    _check_step_coupling(p)
    if levels not in (2, 3):
        raise ParameterError(f"levels must be 2 or 3; got {levels!r}")
    m = 2 ** (levels - 1)
    steps = _check_int("steps", steps, m)
    if steps % m:
        raise ParameterError(f"coupling {levels} steps needs fine steps a multiple of {m}; got "
                             f"{steps}")
    if scheme not in ("network", "sde"):
        raise ParameterError(f"scheme must be 'network' or 'sde'; got {scheme!r}")
    c = _Coupling(p, dt)
    draws = _qk_draws(p, "sde", rs, x0.dtype)
    mlp_rs = rs.derived(MLP_STREAM) if p.mlp_block.active else None

    def drive(j: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        dw = c.increment(rs, x0.dtype)
        zm = mlp_rs.normal(p.n, p.d, dtype=x0.dtype) if mlp_rs is not None else None
        return dw, zm, None if draws is None else draws.next()

    net = scheme == "network"
    ks = [2**i for i in range(levels)]
    grids = [c.grid(steps // k if net else None, k, k * dt, math.sqrt(k * dt), x0)
             for k in (ks if net else ks[1:])]
    run = _Levels(c, x0, grids, (p.law,) if net else (), drive, dt, math.sqrt(dt), mlp_rs,
                  weights, fine=not net)

    def pick(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if net:
            return tuple(run.nets[p.law, steps // k] for k in ks)
        return (x, *(run.sdes[k] for k in ks[1:]))

    if decide is None:
        x = _march(x0.clone(), steps, run)
        return torch.stack(pick(x), 1)
    tol, every = decide
    every = m * max(1, -(-every // m))
    streams = [s.retain for s in (rs, draws, mlp_rs) if s is not None]
    rule = _BothDecided(run, pick, tol, every, x0.shape[0], streams, p.norm != "post")
    return _march(x0.clone(), steps, run, stop_test=rule)


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

    def retain(self, live: torch.Tensor) -> None:
        """Keep the runs `live` (boolean `(runs,)`) of the sums and forms (runs leaving)."""
        if self.total is None:
            self.dw = self.dw[live]
        if self.zm is not None:
            self.zm = self.zm[live]
        if self.forms is not None:
            self.forms = self.forms[live]


class _Coupling:
    """How one fine Brownian increment drives the SDE's heads and the networks' (`coupled_states`):
    with `m` draws of the qk law per head and SDE step, the SDE sees `heads m` paths and a
    network's head the sum of its `m`."""

    def __init__(self, p: ModelParams, h: float) -> None:
        self.p, self.ps, self.h = p, _scheme_params(p, "sde"), h
        self.m = self.ps.heads // p.heads  # draws of the qk law per head and SDE step
        self.sig = p.sigma / math.sqrt(self.ps.heads)  # entry scale of one SDE head's value noise
        self.sig_net = p.sigma / math.sqrt(p.heads)  # and of one network head's
        d = p.d
        self.net_shape = (d, d) if p.heads == 1 else (p.heads, d, d)
        self.shape = self.net_shape if self.m == 1 else (p.heads, self.m, d, d)
        self.mlp = p.mlp_block.active
        # what attention reads, and the steps: post-norm projects, pre-norm adds to the stream
        self.inputs = (lambda t: t) if p.norm == "post" else normalize
        self.net_step = _NORM_STEPS[p.norm]
        self.sde_step = sde_step if p.norm == "post" else _residual_step

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
        y = _attention_output(self.inputs(x), ps, forms, weights=weights)
        v = (dw if self.m == 1 else dw.flatten(1, 2)) / root
        z = None if zm is None else zm if k == 1 else zm / math.sqrt(k)
        mlp = None if z is None else (lambda u: _mlp_kernel_noise(u, ps, z))
        return _sde_layer(x, y, apply_matrices(y, v), ps, dt, mlp, self.sde_step)

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
            lambda u: _mlp_noise_given(u, p, pre, zm, root_k))
        level = g.level
        assert level is not None, "networks() runs on the grids of the network levels"
        for law in laws:
            v = v_gauss if law == "gaussian" else _uniform_from_gaussian(v_gauss, self.sig_net)
            x = nets[law, level]
            y = _attention_output(self.inputs(x), p, forms, weights=weights)
            nets[law, level] = _layer_step(x, y, apply_matrices(y, v), p, dt, mlp, self.net_step)


class _Levels:
    """One fine step of every coupled scheme, as the layer `march` applies: the fine SDE is the
    state `march` carries; the networks (`nets`) and the coarse SDEs (`sdes`, by fine steps per
    step; `half` the one twice as coarse) are stepped here whenever a step of their grid ends."""

    def __init__(self, c: _Coupling, x0: torch.Tensor, grids: list[_Grid], laws: tuple[str, ...],
                 drive: _Drive, h: float, root_h: float, mlp_rs: RunStreams | None,
                 weights: torch.Tensor | None = None, fine: bool = True) -> None:
        self.c, self.grids, self.laws, self.drive = c, grids, laws, drive
        self.step_fine = fine  # False: the state march carries is not stepped (networks only)
        self.h, self.root_h, self.mlp_rs, self.weights = h, root_h, mlp_rs, weights
        # the coarse SDEs (the grids of level None), by fine steps per step
        self.sdes = {g.k: x0.clone() for g in grids if g.level is None}
        self.nets = {(law, g.level): x0.clone() for law in laws for g in grids
                     if g.level is not None}
        self.j = 0  # fine steps done

    @property
    def half(self) -> torch.Tensor | None:
        """The SDE twice as coarse (None where it is not run)."""
        return self.sdes.get(2)

    def __call__(self, fine: torch.Tensor) -> torch.Tensor:
        """Fine step `j + 1`: the fine SDE, then each grid whose step it ends."""
        self.j += 1
        j, c = self.j, self.c
        dw, zm, f = self.drive(j)
        if self.step_fine:
            fine = c.sde(fine, f, dw, zm, 1, self.h, self.root_h, self.weights)
        for g in self.grids:
            if not g.add(j, dw, zm, f):
                continue
            if g.level is None:
                self.sdes[g.k] = c.sde(self.sdes[g.k], g.forms, g.increment(), g.zm, g.k, g.dt,
                                       g.root, self.weights)
            else:
                c.networks(self.nets, g, self.laws, self.mlp_rs, self.weights)
            g.reset()
        return fine

    def retain(self, live: torch.Tensor) -> None:
        """Keep the runs `live` (boolean `(runs,)`) of every coupled state, sum and weight."""
        self.nets = {k: v[live] for k, v in self.nets.items()}
        self.sdes = {k: v[live] for k, v in self.sdes.items()}
        if self.weights is not None and self.weights.ndim == 2:
            self.weights = self.weights[live]
        for g in self.grids:
            g.retain(live)

    def state(self, fine: torch.Tensor) -> CoupledState:
        """The coupled states now, `fine` the fine SDE's (march's state)."""
        return CoupledState(dict(self.nets), fine, fine if self.half is None else self.half)

    def march(self, fine: torch.Tensor, steps: int, progress: _Progress | None = None,
              recorder: _Recorder[CoupledState] | None = None) -> torch.Tensor:
        """`steps` fine steps through `loop._march`, the `CoupledState` to `recorder` at its
        layers."""
        if recorder is None:
            return _march(fine, steps, self, None, progress)
        return _march(fine, steps, self, _Viewed(recorder, self.state), progress)


class _Viewed:
    """A `loop._Recorder` of march's state (the fine SDE) that hands `recorder` the
    `CoupledState` `view(x)`."""

    def __init__(self, recorder: _Recorder[CoupledState],
                 view: Callable[[torch.Tensor], CoupledState]) -> None:
        self.recorder, self.view, self.layers = recorder, view, recorder.layers

    def at(self, k: int, x: torch.Tensor, rows: torch.Tensor) -> None:
        """`recorder.at` of the coupled states."""
        self.recorder.at(k, self.view(x), rows)

    def left(self, k: int, x: torch.Tensor, rows: torch.Tensor) -> None:
        """`recorder.left` of the coupled states (no run leaves `coupled_states`)."""
        self.recorder.left(k, self.view(x), rows)


class _BothDecided:
    """The stopping rule (`loop._StopTest`) of `coupled_steps`: the state at each step is kept at its
    first test decided (`loop._DecidedStop.decided`: a first passage, as a run stopped once decided
    reads it; a pair within `tol` of the antipode may leave it again), and a run leaves once
    decided at every step; `retain` drops it from the coupled states and from the streams."""

    def __init__(self, levels: _Levels, pick: Callable[[torch.Tensor], tuple[torch.Tensor, ...]],
                 tol: float, every: int, runs: int,
                 streams: Sequence[Callable[[torch.Tensor], None]], directions: bool) -> None:
        self.levels, self.pick, self.every, self.streams = levels, pick, every, streams
        self.test = _DecidedStop(tol, every, runs, lambda m: None, directions)
        self.decided_at = self.test.decided_at
        self.final: torch.Tensor | None = None  # (runs, levels, n, d): the states kept
        self.seen: torch.Tensor | None = None  # (live runs, levels): decided at that step
        self._leaving = False  # `check` kept every state of the rows leaving now

    def check(self, k: int, x: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor,
                                                                          torch.Tensor]:
        """Keep the states newly decided; the rows decided at every step leave."""
        both = torch.stack(self.pick(x), 1)
        if self.final is None or self.seen is None:
            self.final = torch.empty((len(self.decided_at), *both.shape[1:]), dtype=both.dtype,
                                     device=both.device)
            self.seen = torch.zeros(both.shape[:2], dtype=torch.bool, device=both.device)
        for i in range(both.shape[1]):
            new = self.test.decided(both[:, i]) & ~self.seen[:, i]
            if bool(new.any()):
                self.final[rows[new.cpu()], i] = both[new, i]
                self.seen[:, i] |= new
        done = self.seen.all(1)
        self._leaving = bool(done.any())
        return x, done

    def keep(self, rows: torch.Tensor, x: torch.Tensor) -> None:
        """The rows leaving after `check` are kept already; at the end, keep the current state
        of each step not decided."""
        if self._leaving:
            self._leaving = False
            return
        assert self.final is not None and self.seen is not None
        both = torch.stack(self.pick(x), 1)
        for i in range(both.shape[1]):
            open_ = ~self.seen[:, i]
            self.final[rows[open_.cpu()], i] = both[open_, i]

    def retain(self, live: torch.Tensor) -> None:
        """Drop the runs that left from the coupled states, the flags and the streams."""
        self.levels.retain(live)
        if self.seen is not None:
            self.seen = self.seen[live]
        for f in self.streams:
            f(live)
