"""Exact Gram-space sampler for rotation-invariant attention (spec §4): cost per layer set by n, not d.

When `Q^T K = c I` and `M = a I`, a layer's law depends on the tokens only through their Gram
matrix. The tokens are kept as coordinates `u` `(runs, n, m)` in an orthonormal frame `B` (d x m) of
an m-dimensional subspace that contains them, `m = min(n, d)`. The layer noise `V y_i = V B w_i`
splits into the in-frame block `G = B^T V B` (an m x m Gaussian matrix) and the out-of-frame block
`B_perp^T V B`, which enters the Gram matrix only through `W = (B_perp^T V B)^T (B_perp^T V B)`, a
Wishart matrix with `d - m` degrees of freedom. `W` is drawn as `T^T T` with `T` its Bartlett factor
(chi variates with `d - m - i` dof on the diagonal, i = 0, 1, ..., standard normals above it).
The new tokens have `m + min(m, d - m)` coordinates; a QR factorisation brings them back to m.

Any frame that contains the tokens gives an exact sampler (the dof is `d - frame dimension`), so
rank-deficient configurations (merged tokens, n > d) need no numerical rank decision: the frame
dimension is always `m = min(n, d)` and the QR tolerates rank deficiency.

The variants whose every piece is rotation invariant (docs/variants.md §2, §3, §5) run here too:
- heads sharing one form `c I` have one output `y`, and `sum_h V_h y` (entry variance
  `sigma^2/heads` each) has the law of one `V y`: they are stepped as one head;
- query/key forms redrawn every layer from a rotation-invariant law enter the logits only through
  their m x m compression `B^T A B` (`QKLaw.frame_draw`, `FrameForms`); each head `h` has its own
  output `w^h`, and `sum_h V_h B w^h_i` is a d x (heads m) Gaussian matrix acting on the stacked
  `[w^1_i; ...; w^H_i] / sqrt(heads)`: the noise factor has `heads m` columns (in-frame block
  `m x heads m`, Bartlett factor of `Wishart_{heads m}(d - m)`);
- the MLP block (post-norm): after the attention sub-step, pre-activations `u G_1^T` with `G_1 =
  W_1 B` (`m_hidden x m`, standard normal), and, given `H = phi(u G_1^T)`, the block output
  `s C_H Z` (`C_H C_H^T = H H^T`, `Z` `n x d` standard normal), whose frame and out-of-frame parts
  are `s C_H [G; T]^T` with `G` `m x n` standard normal and `T` the Bartlett factor of
  `Wishart_n(d - m)` (`frame_mlp_layer`). In the SDE (one step with both noises) the block's
  kernel noise `mlp_sigma C_K Z` shares the out-of-frame directions of the attention noise
  (`sde_block`).

pre- and peri-norm (docs/variants.md §4) are rotation equivariant as well, so the Gram matrix of the
residual stream `h` (radii included) is Markov: `h` is kept in the frame unnormalised
(`recompress_stream` keeps the row norms), attention and the MLP block see `u = N(h)`, and
peri-norm normalises each branch output with its full length, in-frame and out-of-frame
coordinates together, before the recompression (`frame_norm_layer`, `frame_mlp_layer`). The
peri-norm SDE's kernel noise `C Z` (`norm_sde._peri_factor`) is framed as the MLP block's.
"""

from __future__ import annotations

import numpy as np
import torch

from ..model.params import ModelParams, ParameterError, TimeGrid
from ..model.qk import QKLaw
from .layers import (
    _mlp_input,
    _normalize_,
    _normalize_branch,
    _tangent,
    normalize,
    weights_from_logits,
)
from .loop import _DecidedStop, _march, _Progress, _Recorder
from .norm_sde import _check_peri_sde, _peri_drift, _peri_factor
from .rng import RunStreams
from .samplers import _gram_factor, _mlp_scale, _psd_factor, _scheme_params, _sym_root, _well_pivoted
from .sde import ito_correction

__all__ = [
    "frame_coordinates", "frame_layer", "frame_mlp_layer", "frame_norm_layer", "noise_factor",
    "recompress", "recompress_stream", "run_batch_gram", "sde_block", "uniform_frame",
]


def _iso_scales(p: ModelParams) -> tuple[float, float]:
    """`(a, c)` with `M = a I` (a = 0 for no mean part) and `Q^T K = c I`."""
    a = p.mean_trace
    qk = p.qk_matrix()
    c = 1.0 if qk is None else float(np.trace(qk)) / p.d
    return a, c


def frame_coordinates(z: torch.Tensor) -> torch.Tensor:
    """Rows of `z` `(runs, n, c)`, `c > n`, in n coordinates with the same Gram matrix, chosen
    continuously in `z` and commuting with row scaling (`F(D z) = D F(z)`, so a recompressed frame
    recompresses to itself, normalised or not).

    Runs whose every row lies outside the pivot margin (`samplers._well_pivoted`) take `R^T` of the
    Householder QR `z^T = Q R`, the signs of R's rows set so that its diagonal is non-negative (then
    unique; distances keep full precision). The others (merged or antipodal tokens) take
    `D (N(z) N(z)^T)^(1/2)`, `D` the row norms and `N(z)` the normalised rows (`samplers._sym_root`).
    No branch on a rounding-level quantity: a seed gives the same run on any CPU up to rounding.
    """
    n = z.shape[-2]
    a, _ = torch.geqrf(z.transpose(-1, -2))  # R is the upper triangle (faster than linalg.qr)
    # a is column-major, so a^T is row-major and so is its lower triangle R^T
    r_t = a.transpose(-1, -2)[..., :n].tril()
    diag = r_t.diagonal(dim1=-2, dim2=-1)
    r_t.mul_(torch.where(diag < 0, -1.0, 1.0).to(r_t.dtype).unsqueeze(-2))
    bad = ~_well_pivoted(diag, z.square().sum(-1))
    if bool(bad.any()):
        zb = z[bad]
        norms = torch.linalg.vector_norm(zb, dim=-1, keepdim=True)
        r_t[bad] = norms * _sym_root(zb / torch.where(norms > 0, norms, 1.0))
    return r_t


def recompress(z: torch.Tensor) -> torch.Tensor:
    """Rows of `z` `(runs, n, c)` as unit vectors in `min(n, c)` coordinates: `u = N(C)` with
    `C C^T = z z^T` (`frame_coordinates`)."""
    n, c = z.shape[-2:]
    return normalize(z) if c <= n else _normalize_(frame_coordinates(z))


def recompress_stream(z: torch.Tensor) -> torch.Tensor:
    """`recompress` without the normalisation: rows of `z` `(runs, n, c)` in `min(n, c)`
    coordinates with the same Gram matrix, norms included (the residual stream of pre/peri-norm)."""
    n, c = z.shape[-2:]
    return z if c <= n else frame_coordinates(z)


def _pad(u: torch.Tensor, width: int) -> torch.Tensor:
    """Append zero coordinates so that `u` has `width` columns (same Gram matrix)."""
    extra = width - u.shape[-1]
    return u if extra <= 0 else torch.nn.functional.pad(u, (0, extra))


def _chi(rs: RunStreams, dof: torch.Tensor) -> torch.Tensor:
    """Chi variates `(runs, len(dof))`, entry `i` with `dof[i]` degrees of freedom:
    `sqrt(2 Gamma(dof/2))`, one generator per run block."""
    return (2.0 * rs.standard_gamma(0.5 * dof)).sqrt()


def noise_factor(rs: RunStreams, lead: int, dof: int, cols: int,
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """`(runs, lead + k, cols)`: `lead` rows of standard normals on top of the Bartlett factor `T`
    `(k, cols)`, `k = min(dof, cols)`, of a `Wishart_cols(dof, I)` (`T^T T` has that law).

    `T` is upper trapezoidal with `T_ii ~ chi_{dof - i}` and `T_ij ~ N(0, 1)` for `j > i`.
    All normals come from one draw.
    """
    k = min(dof, cols)
    iu = torch.triu_indices(k, cols, offset=1, device=rs.device)
    upper = (lead + iu[0]) * cols + iu[1]
    diag = torch.arange(k, device=rs.device)
    z = rs.normal(lead * cols + upper.numel(), dtype=dtype)
    h = torch.zeros(rs.runs, (lead + k) * cols, dtype=dtype, device=rs.device)
    h[:, : lead * cols] = z[:, : lead * cols]
    h.index_copy_(1, upper, z[:, lead * cols:])
    h.index_copy_(1, (lead + diag) * (cols + 1) - lead, _chi(rs, (dof - diag).to(dtype)))
    return h.view(rs.runs, lead + k, cols)


def _bartlett(rs: RunStreams, dof: int, cols: int, dtype: torch.dtype = torch.float64
             ) -> torch.Tensor:
    """Bartlett factor `T` `(runs, min(dof, cols), cols)` with `T^T T ~ Wishart_cols(dof, I)`."""
    return noise_factor(rs, 0, dof, cols, dtype)


def uniform_frame(rs: RunStreams, n: int, d: int, dtype: torch.dtype = torch.float64
                  ) -> torch.Tensor:
    """`n` tokens uniform on the sphere of R^d, in an isometric frame of `min(n, d)` coordinates,
    `(runs, n, min(n, d))`: Gaussian tokens `Z` `(n, d)` have `Z Z^T ~ Wishart_n(d, I) = T^T T`
    (Bartlett), so the rows of `T^T` are `Z` in a frame; nothing of size d is drawn."""
    return _normalize_(_bartlett(rs, d, n, dtype).transpose(-1, -2).contiguous())


def _frame_weights(u: torch.Tensor, p: ModelParams, c: float) -> torch.Tensor:
    """Attention weights from frame coordinates: logits `beta c <u_i, u_j>` (spec §1)."""
    bc = p.beta * c
    # unit tokens: for c > 0 each row's largest logit is its own, beta c |u_i|^2 = beta c
    return weights_from_logits(bc * (u @ u.transpose(-1, -2)), p, top=bc if bc > 0 else None)


def _frame_attention(u: torch.Tensor, p: ModelParams, c: float,
                    forms: torch.Tensor | None = None) -> torch.Tensor:
    """Attention outputs in frame coordinates: `(runs, n, m)` for the shared form `c I`; with
    drawn forms in the frame (`FrameForms.next`), `beta <u_i, A u_j>`, `(runs, n, m)` for one form
    per run `(runs, m, m)` or `(runs, heads, n, m)` for one per head `(runs, heads, m, m)`."""
    if forms is None:
        return _frame_weights(u, p, c) @ u
    us = u if forms.dim() == 3 else u.unsqueeze(-3)
    return weights_from_logits(p.beta * (us @ forms @ us.transpose(-1, -2)), p) @ us


def _advance_(x: torch.Tensor, y: torch.Tensor, ybar: torch.Tensor, dn: torch.Tensor,
             p: ModelParams, dt: float, a: float, scheme: str) -> None:
    """Overwrite the noise increment `dn = sqrt(dt) xi` with the un-normalised next tokens, as
    `layers.network_step` / `sde.sde_step` with `M = a I`: `x + dt a ybar + dn`, or
    `x + dt (ito + a P_x ybar) + P_x dn`; `y` the outputs (per head with `heads > 1`), `ybar`
    their heads' mean."""
    if scheme == "sde":
        drift = ito_correction(x, y, p)
        if a != 0.0:
            drift = drift + a * _tangent(x, ybar)
        dn.copy_(x + dt * drift + _tangent(x, dn))
        return
    dn.add_(x)
    if a != 0.0:
        dn.add_(ybar, alpha=dt * a)


def frame_layer(u: torch.Tensor, p: ModelParams, dt: float, scheme: str,
                h: torch.Tensor | None, scales: tuple[float, float] | None = None,
                forms: torch.Tensor | None = None,
                block: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """One layer in frame coordinates, `(runs, n, m) -> (runs, n, min(n, m + k))`.

    `h` `(runs, m + k, c)` is the unit-variance noise factor: the in-frame block `G` on top of the
    Bartlett factor `T` (None: no noise). Token `i` gets the noise `sigma h w_i`, whose last `k`
    coordinates lie outside the frame; tokens and attention outputs have no component there, so
    the step acts on the first m coordinates and the rest is `sqrt(dt) sigma T w_i`. With one form
    per head (`forms` `(runs, heads, m, m)`, `p.heads` heads) `w_i` is the stacked
    `[w^1_i; ...; w^H_i] / sqrt(heads)` and `c = heads m`; otherwise `c = m`.
    `scales` is `_iso_scales(p)`, passed in to skip recomputing it. `block` `(C, h_b)`: a further
    noise `C h_b^T` `(runs, n, rows)` (`sde_block`) whose first `m + k` coordinates are those of
    the noise above and whose others lie outside both.
    """
    a, c = _iso_scales(p) if scales is None else scales
    w = _frame_attention(u, p, c, forms)
    m = u.shape[-1]
    if h is None:
        z = torch.zeros_like(u)
    else:  # z = sqrt(dt) sigma (w h^T): the noise increment, in and out of the frame
        coef = w if w.dim() == 3 else w.transpose(-3, -2).flatten(-2).mul(p.heads ** -0.5)
        z = (dt**0.5 * p.sigma * coef) @ h.transpose(-1, -2)
    if block is not None:
        z = _pad(z, block[1].shape[-2]).add_(block[0] @ block[1].transpose(-1, -2))
    _advance_(u, w, w if w.dim() == 3 else w.mean(-3), z[..., :m], p, dt, a, scheme)
    return recompress(z)


def frame_norm_layer(hs: torch.Tensor, p: ModelParams, dt: float, scheme: str,
                     h: torch.Tensor | None, scales: tuple[float, float] | None = None,
                     forms: torch.Tensor | None = None,
                     block: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """One pre- or peri-norm layer (`p.norm`, docs/variants.md §4) on the residual stream `hs`
    `(runs, n, m)` in frame coordinates, not normalised, `-> (runs, n, min(n, m + k))`.

    Attention sees `u = N(hs)`. `h` and `block` are as in `frame_layer` (pre: `hs + dt a ybar +
    sqrt(dt) xi`, the network layer and its SDE's Euler step alike). peri, network: `hs +
    sqrt(dt) N(xi + sqrt(dt) a ybar)`, each branch output normalised with its full length (in-
    and out-of-frame coordinates) before the recompression. peri, SDE (`norm_sde`): the
    kernel noise `sqrt(dt) C h^T`, `C C^T = phi_d(r) / d`, with `h` `(runs, m + k, n)` the unit
    noise factor of `n` columns (`noise_factor(rs, m, d - m, n)`), plus the drift `dt
    peri_drift`.
    """
    a, c = _iso_scales(p) if scales is None else scales
    w = _frame_attention(normalize(hs), p, c, forms)
    m = hs.shape[-1]
    ybar = w if w.dim() == 3 else w.mean(-3)
    if p.norm == "peri" and scheme == "sde":
        if h is None:
            raise ParameterError("scheme='sde' with norm='peri' needs sigma > 0")
        z = (dt**0.5 * _peri_factor(w, p)) @ h.transpose(-1, -2)
        if a != 0.0:
            z[..., :m].add_(_peri_drift(w, a * ybar, p), alpha=dt)
        z[..., :m].add_(hs)
        return recompress_stream(z)
    if h is None:
        z = torch.zeros_like(hs)
    else:  # the unit-time noise xi = sigma (w h^T), in and out of the frame
        coef = w if w.dim() == 3 else w.transpose(-3, -2).flatten(-2).mul(p.heads ** -0.5)
        z = (p.sigma * coef) @ h.transpose(-1, -2)
    if p.norm == "peri":
        if block is not None:
            raise ParameterError("norm='peri' has no SDE with the MLP block (docs/variants.md §5)")
        if a != 0.0:
            z[..., :m].add_(ybar, alpha=dt**0.5 * a)
        z = _normalize_branch(z).mul_(dt**0.5)
    else:
        z.mul_(dt**0.5)
        if block is not None:
            z = _pad(z, block[1].shape[-2]).add_(block[0] @ block[1].transpose(-1, -2))
        if a != 0.0:
            z[..., :m].add_(ybar, alpha=dt * a)
    z[..., :m].add_(hs)
    return recompress_stream(z)


def frame_mlp_layer(u: torch.Tensor, p: ModelParams, dt: float, g1: torch.Tensor,
                    h: torch.Tensor) -> torch.Tensor:
    """The post-norm MLP sublayer `N(x + sqrt(dt) W_2 phi(W_1 x))` in frame coordinates,
    `(runs, n, m) -> (runs, n, min(n, m + k))`.

    `g1` `(runs, m_hidden, m)` is `W_1 B` (standard normal); given the hidden units
    `H = phi(u g1^T)`, the block output has the law of `s C_H Z` (`C_H C_H^T = H H^T`, `Z` `n x d`
    standard normal, `s = samplers._mlp_scale(p)`), whose frame and out-of-frame coordinates are
    `s C_H h^T` with `h` `(runs, m + k, n)` the unit noise factor `[G; T]` of `n` columns
    (`noise_factor(rs, m, d - m, n)`).

    pre/peri-norm: `u` is the residual stream `h`, the block sees `N(h)`, and the sublayer is
    `h + sqrt(dt) xi` (pre) or `h + sqrt(dt) N(xi)` (peri, `xi` normalised with its full length,
    `N(0) = 0`: `layers._normalize_branch`),
    recompressed with the norms kept (`recompress_stream`).
    """
    m = u.shape[-1]
    hidden = p.mlp_block(_mlp_input(u, p) @ g1.transpose(-1, -2))
    if p.norm != "post":
        z = _gram_factor(hidden).mul_(_mlp_scale(p)) @ h.transpose(-1, -2)
        z = (_normalize_branch(z) if p.norm == "peri" else z).mul_(dt**0.5)
        z[..., :m].add_(u)
        return recompress_stream(z)
    z = _gram_factor(hidden).mul_(dt**0.5 * _mlp_scale(p)) @ h.transpose(-1, -2)
    z[..., :m].add_(u)
    return recompress(z)


def sde_block(u: torch.Tensor, p: ModelParams, dt: float, rs: RunStreams, shared: int,
              dof_shift: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The SDE's MLP kernel noise `sqrt(dt) mlp_sigma C_K Z` (`C_K C_K^T = khat(U U^T)`, `Z`
    `n x d`) in frame coordinates, as `(C, h)` for `frame_layer(block=...)`, where the attention
    noise of the step has `shared` out-of-frame coordinates.

    Both noises act on one `(d - m)`-dimensional complement of the frame, so their out-of-frame
    parts must be drawn jointly: for the stacked Gaussian matrix `[Xi_a, Xi_b]` whose Bartlett
    factor is `[[T_a, G_ab], [0, T_b]]`, `T_a` (the attention's, `shared` rows) is already drawn;
    `G_ab` is `shared x n` standard normal and `T_b` the Bartlett factor of
    `Wishart_n(d - m - shared)`. `h` stacks the block's in-frame `m x n` normals, `G_ab` and `T_b`:
    `noise_factor(rs, m + shared, d - m - shared, n)`.
    """
    m = u.shape[-1]
    c = _psd_factor(p.mlp_block.kernel_t(u @ u.transpose(-1, -2))).mul_(dt**0.5 * p.mlp_sigma)
    return c, noise_factor(rs, m + shared, p.d - m - shared + dof_shift, p.n, u.dtype)


class _FrameForms:
    """The random query/key forms of one batch of runs in frame coordinates, drawn afresh at every
    call of `next(m)` (qk_redraw='layer', a rotation-invariant law): `heads` per run, from their
    own streams `rs` (`QKLaw.frame_draw`)."""

    def __init__(self, law: QKLaw, heads: int, rs: RunStreams, dtype: torch.dtype) -> None:
        self.law, self.heads, self.rs, self.dtype = law, heads, rs, dtype

    def next(self, m: int) -> torch.Tensor:
        """The forms of the next layer in an m-dimensional frame, `(runs, m, m)` or
        `(runs, heads, m, m)`."""
        return self.law.frame_draw(self.rs, self.heads, m, self.dtype)

    def retain(self, mask: torch.Tensor) -> None:
        """Keep only the runs where `mask` `(runs,)` is True (runs decided early)."""
        self.rs.retain(mask)


def _gram_params(p: ModelParams, scheme: str) -> ModelParams:
    """The parameters the Gram sampler steps: with random forms those of `scheme`
    (`samplers._scheme_params`: the SDE of forms redrawn every layer steps `heads * qk_samples`
    heads); with one form shared by `heads > 1` heads, one head (they have one output `y`, and
    `sum_h V_h y` with entry variances `sigma^2/heads` has the law of one `V y`: same law, fewer
    draws)."""
    if p.qk_law.random:
        return _scheme_params(p, scheme)
    return p.with_(heads=1) if p.heads > 1 else p


def _frame_forms(p: ModelParams, scheme: str, rs: RunStreams, dtype: torch.dtype
                ) -> _FrameForms | None:
    """The forms of a random qk law in frame coordinates (None for qk='identity'), from the
    streams `rs` (the model passes `rs.derived(QK_STREAM)`, as for the other samplers)."""
    if not p.qk_law.random:
        return None
    q = _scheme_params(p, scheme)
    return _FrameForms(q.qk_law, q.heads, rs, dtype)


def run_batch_gram(
    x: torch.Tensor,
    p: ModelParams,
    grid: TimeGrid,
    rs: RunStreams,
    scheme: str,
    recorder: _Recorder | None = None,
    progress: _Progress | None = None,
    *,
    stop_test: _DecidedStop | None = None,
    forms: _FrameForms | None = None,
    mlp_rs: RunStreams | None = None,
    _dof_shift: int = 0,
) -> torch.Tensor:
    """Advance one batch through `grid.steps` layers in Gram space, handing `recorder`
    (`loop._Recorder`) the state `xc` `(runs, n, n)` at its layers, in an isometric frame (`xc
    xc^T` = Gram matrix); return the final tokens in that frame. With norm='pre'/'peri' `xc` is the residual
    stream `h`, radii included (its directions' Gram matrix is what `simulate` records).

    `x` is `(runs, n, d)` in R^d, or `(runs, n, w)` coordinates in any isometric frame, w <= d (a
    previous result's tokens). `forms`: the random query/key forms (`frame_forms`), needed when
    `p.qk` is a random law; `mlp_rs`: the streams of the MLP blocks, needed when `p.mlp` is not
    'none'. `_dof_shift` adds to the Wishart degrees of freedom `d - m` of the value noise and of
    the MLP block's noise (tests only: a wrong count must show).
    """
    n, d = p.n, p.d
    if x.shape[-1] > d:
        raise ParameterError(f"tokens must have at most d = {d} coordinates; got {x.shape[-1]}")
    if p.qk_law.random and forms is None:
        raise ParameterError(f"qk={p.qk!r} draws query/key forms: pass them (gram._frame_forms)")
    if p.mlp_block.active and mlp_rs is None:
        raise ParameterError(f"mlp={p.mlp!r} draws MLP weights: pass their streams (mlp_rs)")
    q = _gram_params(p, scheme)
    if forms is not None and forms.heads != q.heads:
        raise ParameterError(f"forms drawn for {forms.heads} heads, but scheme={scheme!r} steps "
                             f"{q.heads}: draw them with gram._frame_forms(p, {scheme!r}, ...)")
    post = p.norm == "post"
    if not post and scheme == "sde" and p.norm == "peri":
        _check_peri_sde(p)
    # pre/peri: the residual stream h, radii kept (docs/variants.md §4)
    u = recompress(x) if post else recompress_stream(x)
    silent = p.sigma == 0.0
    scales = _iso_scales(q)
    per_head = 1 if forms is None else q.heads  # noise-factor columns per frame axis
    step = frame_layer if post else frame_norm_layer
    kernel = p.norm == "peri" and scheme == "sde"  # the peri limit's noise: n columns

    def layer(uk: torch.Tensor) -> torch.Tensor:
        m = uk.shape[-1]
        fk = None if forms is None else forms.next(m)
        cols = n if kernel else per_head * m
        h = None if silent else noise_factor(rs, m, d - m + _dof_shift, cols, uk.dtype)
        if not q.mlp_block.active or mlp_rs is None:
            return step(uk, q, grid.dt, scheme, h, scales, fk)
        if scheme == "sde":  # the limit: one step with both noises (docs/variants.md §5)
            shared = 0 if h is None else h.shape[-2] - m
            block = sde_block(_mlp_input(uk, q), q, grid.dt, mlp_rs, shared, _dof_shift)
            return step(uk, q, grid.dt, scheme, h, scales, fk, block)
        uk = step(uk, q, grid.dt, scheme, h, scales, fk)
        m = uk.shape[-1]
        g1 = mlp_rs.normal(q.mlp_hidden, m, dtype=uk.dtype)
        hb = noise_factor(mlp_rs, m, d - m + _dof_shift, n, uk.dtype)
        return frame_mlp_layer(uk, q, grid.dt, g1, hb)

    u = _march(u, grid.steps, layer, recorder, progress, view=lambda t: _pad(t, n), stop_test=stop_test)
    return _pad(u, n)
