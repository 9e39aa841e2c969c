"""`qk='gaussian'` (docs/variants.md §3): a product of Gaussians, `R = G_Q^T G_K / sqrt(d)`.

`A = I + s R` is `Q^T K` for a query and a key that are the token itself next to a random Gaussian
projection of it, `Q = [I; sqrt(s) d^(1/4) W_Q]`, `K = [I; sqrt(s) d^(1/4) W_K]`, with `W_Q`, `W_K`
independent d x d of entry variance 1/d (the standard initialisation): `sqrt(d) <W_Q u, W_K v>` is
the scaled dot-product logit of unit tokens at RMS radius sqrt(d).

Its compression to an orthonormal d x m frame `B` (m <= d) is `(G_Q B)^T (G_K B) / sqrt(d)`, with
`P = G_Q B` and `G_K B` independent d x m standard Gaussian matrices. Given `P`, the columns of
`P^T (G_K B)` are independent `N(0, P^T P)` vectors, and `P^T P ~ Wishart_m(d, I)` is `T^T T` with
`T` its Bartlett factor (upper triangular, `T_ii ~ chi_{d-i}`, standard normals above): so
`B^T R B` has the law of `T^T Z / sqrt(d)`, `Z` an m x m standard Gaussian matrix, drawn with
`2 m^2` numbers whatever d.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..noise import Streams
from .base import QK_LAWS, QKLaw, _FrameStreams

if TYPE_CHECKING:
    import torch


@QK_LAWS.register
class _GaussianQK(QKLaw):
    """Product of two independent standard Gaussian matrices over sqrt(d); rotation invariant."""

    name = "gaussian"
    rotation_invariant = True

    def fluctuation(self, rs: Streams, lead: tuple[int, ...], dtype: torch.dtype
                    ) -> torch.Tensor:
        """`G_Q^T G_K / sqrt(d)` `(runs, *lead, d, d)`, `G` standard normal."""
        g = rs.normal(*lead, 2, self.d, self.d, dtype=dtype)
        return (g[..., 0, :, :].transpose(-1, -2) @ g[..., 1, :, :]).div_(math.sqrt(self.d))

    def frame_fluctuation(self, rs: _FrameStreams, lead: tuple[int, ...], m: int,
                          dtype: torch.dtype) -> torch.Tensor:
        """`T^T Z / sqrt(d)` `(runs, *lead, m, m)` (module docstring): the law of `B^T R B`."""
        g = rs.normal(*lead, 2, m, m, dtype=dtype)
        count = math.prod(lead)
        half_dof = g.new_tensor([0.5 * (self.d - i) for i in range(m)] * count)
        chi = (2.0 * rs.standard_gamma(half_dof)).sqrt().view(g.shape[0], *lead, m)
        t = g[..., 0, :, :].triu(1)
        t.diagonal(dim1=-2, dim2=-1).copy_(chi)
        return (t.transpose(-1, -2) @ g[..., 1, :, :]).div_(math.sqrt(self.d))
