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
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .layers import normalize, normalize_, tangent, weights_from_logits
from .loop import Progress, Stop, march
from .params import ModelParams, ParameterError, TimeGrid
from .rng import RunStreams
from .sde import ito_correction


def iso_scales(p: ModelParams) -> tuple[float, float]:
    """`(a, c)` with `M = a I` (a = 0 for no mean part) and `Q^T K = c I`."""
    a = 0.0 if p.M is None else float(np.trace(p.M)) / p.d
    qk = p.qk_matrix()
    c = 1.0 if qk is None else float(np.trace(qk)) / p.d
    return a, c


def recompress(z: torch.Tensor) -> torch.Tensor:
    """Rows of `z` `(runs, n, c)` as unit vectors in `min(n, c)` coordinates: `u = N(R^T)` with
    `z^T = Q R` (Householder QR, so rank-deficient `z` is fine and distances keep full precision)."""
    n, c = z.shape[-2:]
    if c <= n:
        return normalize(z)
    a, _ = torch.geqrf(z.transpose(-1, -2))  # R is the upper triangle (faster than linalg.qr)
    # a is column-major, so a^T is row-major and so is its lower triangle R^T
    return normalize_(a.transpose(-1, -2)[..., :n].tril())


def pad(u: torch.Tensor, width: int) -> torch.Tensor:
    """Append zero coordinates so that `u` has `width` columns (same Gram matrix)."""
    extra = width - u.shape[-1]
    return u if extra <= 0 else torch.nn.functional.pad(u, (0, extra))


def chi(rs: RunStreams, dof: torch.Tensor) -> torch.Tensor:
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
    h.index_copy_(1, (lead + diag) * (cols + 1) - lead, chi(rs, (dof - diag).to(dtype)))
    return h.view(rs.runs, lead + k, cols)


def bartlett(rs: RunStreams, dof: int, cols: int, dtype: torch.dtype = torch.float64
             ) -> torch.Tensor:
    """Bartlett factor `T` `(runs, min(dof, cols), cols)` with `T^T T ~ Wishart_cols(dof, I)`."""
    return noise_factor(rs, 0, dof, cols, dtype)


def uniform_frame(rs: RunStreams, n: int, d: int, dtype: torch.dtype = torch.float64
                  ) -> torch.Tensor:
    """`n` tokens uniform on the sphere of R^d, in an isometric frame of `min(n, d)` coordinates,
    `(runs, n, min(n, d))`: Gaussian tokens `Z` `(n, d)` have `Z Z^T ~ Wishart_n(d, I) = T^T T`
    (Bartlett), so the rows of `T^T` are `Z` in a frame; nothing of size d is drawn."""
    return normalize_(bartlett(rs, d, n, dtype).transpose(-1, -2).contiguous())


def frame_weights(u: torch.Tensor, p: ModelParams, c: float) -> torch.Tensor:
    """Attention weights from frame coordinates: logits `beta c <u_i, u_j>` (spec §1)."""
    bc = p.beta * c
    # unit tokens: for c > 0 each row's largest logit is its own, beta c |u_i|^2 = beta c
    return weights_from_logits(bc * (u @ u.transpose(-1, -2)), p, top=bc if bc > 0 else None)


def advance_(x: torch.Tensor, y: torch.Tensor, dn: torch.Tensor, p: ModelParams, dt: float,
             a: float, scheme: str) -> None:
    """Overwrite the noise increment `dn = sqrt(dt) xi` with the un-normalised next tokens, as
    `layers.network_step` / `sde.sde_step` with `M = a I`: `x + dt a y + dn`, or
    `x + dt (ito + a P_x y) + P_x dn`."""
    if scheme == "sde":
        drift = ito_correction(x, y, p)
        if a != 0.0:
            drift = drift + a * tangent(x, y)
        dn.copy_(x + dt * drift + tangent(x, dn))
        return
    dn.add_(x)
    if a != 0.0:
        dn.add_(y, alpha=dt * a)


def frame_layer(u: torch.Tensor, p: ModelParams, dt: float, scheme: str,
                h: torch.Tensor | None, scales: tuple[float, float] | None = None
                ) -> torch.Tensor:
    """One layer in frame coordinates, `(runs, n, m) -> (runs, n, min(n, m + k))`.

    `h` `(runs, m + k, m)` is the unit-variance noise factor: the in-frame block `G` on top of the
    Bartlett factor `T` (None: no noise). Token `i` gets the noise `sigma h w_i`, whose last `k`
    coordinates lie outside the frame; tokens and attention outputs have no component there, so
    the step acts on the first m coordinates and the rest is `sqrt(dt) sigma T w_i`.
    `scales` is `iso_scales(p)`, passed in to skip recomputing it.
    """
    a, c = iso_scales(p) if scales is None else scales
    w = frame_weights(u, p, c) @ u
    m = u.shape[-1]
    # z = sqrt(dt) sigma (w h^T): the noise increment, in and out of the frame
    z = torch.zeros_like(u) if h is None else (dt**0.5 * p.sigma * w) @ h.transpose(-1, -2)
    advance_(u, w, z[..., :m], p, dt, a, scheme)
    return recompress(z)


def run_batch_gram(
    x: torch.Tensor,
    p: ModelParams,
    grid: TimeGrid,
    rs: RunStreams,
    scheme: str,
    checkpoints: np.ndarray,
    record: Callable[[int, torch.Tensor], None],
    progress: Progress | None = None,
    *,
    stop: Stop | None = None,
    _dof_shift: int = 0,
) -> torch.Tensor:
    """Advance one batch through `grid.steps` layers in Gram space, calling `record(c, xc)` at
    checkpoint number `c` with `xc` `(runs, n, n)` in an isometric frame (`xc xc^T` = Gram
    matrix); return the final tokens in that frame.

    `x` is `(runs, n, d)` in R^d, or `(runs, n, w)` coordinates in any isometric frame, w <= d (a
    previous result's tokens). `_dof_shift` adds to the Wishart degrees of freedom `d - m` (tests
    only: a wrong count must show).
    """
    n, d = p.n, p.d
    if x.shape[-1] > d:
        raise ParameterError(f"tokens must have at most d = {d} coordinates; got {x.shape[-1]}")
    u = recompress(x)
    silent = p.sigma == 0.0
    scales = iso_scales(p)

    def layer(uk: torch.Tensor) -> torch.Tensor:
        m = uk.shape[-1]
        h = None if silent else noise_factor(rs, m, d - m + _dof_shift, m, uk.dtype)
        return frame_layer(uk, p, grid.dt, scheme, h, scales)

    u = march(u, grid.steps, layer, checkpoints, record, progress, view=lambda t: pad(t, n),
              stop=stop)
    return pad(u, n)
