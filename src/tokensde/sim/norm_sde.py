"""The depth limits of pre- and peri-norm (docs/variants.md §4) as SDE schemes.

pre: `dh_i = M y_i(u) dt + dW y_i(u)`, `u = N(h)`: nothing is projected, so there is no Ito term,
and its Euler-Maruyama step is the residual update `layers._residual_step` itself.

peri: the branch output is normalised, so its noise no longer depends on `sigma` or on `|y_i|`,
only on the correlations `r_ij = c_ij / sqrt(c_ii c_jj)` of the value noise (`c_ij =
<y_i, y_j>`, averaged over heads), and the mean part enters divided by the noise size:

    dh_i = (1 - 1/d) c_d M ybar_i / (sigma sqrt(c_ii)) dt + dN_i,
    d<N_i^a, N_j^b> = phi_d(r_ij) / d delta_ab dt,

`c_d = E 1/|g|` and `phi_d(r) = E <N(g_1), N(g_2)>` for standard Gaussian `g_1, g_2` in R^d with
coordinate correlation `r`.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from scipy import special

from ..model.params import ModelParams, ParameterError
from ..model.tabulate import Table
from .layers import _mean_part
from .rng import RunStreams
from .samplers import _psd_factor


def _inverse_norm_mean(d: int) -> float:
    """`c_d = E 1/|g| = Gamma((d-1)/2) / (sqrt(2) Gamma(d/2))`, `g` standard Gaussian in R^d."""
    return math.exp(math.lgamma((d - 1) / 2) - math.lgamma(d / 2)) / math.sqrt(2.0)


def _direction_correlation(r: np.ndarray, d: int) -> np.ndarray:
    """`phi_d(r) = (2/d) (Gamma((d+1)/2) / Gamma(d/2))^2 r 2F1(1/2, 1/2; d/2 + 1; r^2)`
    (`phi_d(+-1) = +-1`)."""
    rr = np.clip(np.asarray(r, dtype=float), -1.0, 1.0)
    c = math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2))
    out = 2.0 / d * c * c * rr * special.hyp2f1(0.5, 0.5, d / 2 + 1, rr * rr)
    bad = ~np.isfinite(out)
    if np.any(bad):  # scipy's 2F1 is nan near |r| = 1 for large d (d >~ 1000): sum its series
        out[bad] = 2.0 / d * c * c * rr[bad] * _hyp2f1_series(d / 2 + 1, rr[bad] ** 2)
    return out


def _hyp2f1_series(c: float, z: np.ndarray, terms: int = 400) -> np.ndarray:
    """`2F1(1/2, 1/2; c; z)` for `0 <= z <= 1` by its series (term ratio `(k + 1/2)^2 z / ((c +
    k)(k + 1))`), for large `c` only, where the terms vanish long before `terms`."""
    total, term = np.ones_like(z), np.ones_like(z)
    for k in range(terms):
        term = term * ((k + 0.5) ** 2 / ((c + k) * (k + 1))) * z
        total = total + term
    return total


@lru_cache(maxsize=32)
def _phi_table(d: int) -> Table:
    return Table(lambda r: _direction_correlation(r, d))


def _output_gram(y: torch.Tensor) -> torch.Tensor:
    """`c_ij = <y_i, y_j>`, the heads' mean for per-head outputs `(runs, heads, n, d)`."""
    c = y @ y.transpose(-1, -2)
    return c.mean(-3) if c.dim() == 4 else c


def _check_peri_sde(p: ModelParams) -> None:
    """The peri-norm limit above needs Gaussian-like matrix noise of positive scale, no MLP."""
    if p.noise != "matrix" or p.noise_scale == 0.0 or p.mlp_block.active:
        raise ParameterError(
            f"scheme='sde' with norm='peri' needs noise='matrix' with sigma > 0 and mlp='none' "
            f"(its limit, docs/variants.md §4); got noise={p.noise!r}, sigma={p.noise_scale!r}, "
            f"mlp={p.mlp!r} (use scheme='network')")


def _peri_factor(y: torch.Tensor, p: ModelParams) -> torch.Tensor:
    """`C` `(runs, n, n)` with `C C^T = phi_d(r) / d`, `r` the correlations of the outputs `y`
    (any coordinates: only their Gram matrix enters; the Gram sampler passes frame ones)."""
    c = _output_gram(y)
    s = c.diagonal(dim1=-2, dim2=-1).clamp(min=1e-300).sqrt()
    r = c / (s.unsqueeze(-1) * s.unsqueeze(-2))
    return _psd_factor(_phi_table(p.d)(r) / p.d)


def _peri_drift(y: torch.Tensor, my: torch.Tensor, p: ModelParams) -> torch.Tensor:
    """The peri-norm limit's drift `(1 - 1/d) c_d M ybar / (sigma |y|)` from the mean part
    `my = M ybar` (`|y|^2` the heads' mean of `|y^h_i|^2`)."""
    size = _output_gram(y).diagonal(dim1=-2, dim2=-1).clamp(min=1e-300).sqrt()
    scale = (1.0 - 1.0 / p.d) * _inverse_norm_mean(p.d) / p.noise_scale
    return scale * my / size.unsqueeze(-1)


def _peri_noise(y: torch.Tensor, p: ModelParams, rs: RunStreams) -> torch.Tensor:
    """Unit-time noise of the peri-norm limit: `C Z` with `C C^T = phi_d(r) / d`, `Z` `(n, d)`."""
    return _peri_factor(y, p) @ rs.normal(p.n, p.d, dtype=y.dtype)


def _peri_sde_step(h: torch.Tensor, y: torch.Tensor, xi: torch.Tensor, p: ModelParams,
                  dt: float) -> torch.Tensor:
    """Euler-Maruyama step `h + dt (1 - 1/d) c_d M ybar / (sigma |y|) + sqrt(dt) xi`."""
    out = h + dt**0.5 * xi
    my = _mean_part(y, p)
    if my is not None:
        size = _output_gram(y).diagonal(dim1=-2, dim2=-1).clamp(min=1e-300).sqrt()
        scale = (1.0 - 1.0 / p.d) * _inverse_norm_mean(p.d) / p.noise_scale
        out = out + (dt * scale) * my / size.unsqueeze(-1)
    return out
