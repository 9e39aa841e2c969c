"""`qk='gaussian'` (docs/variants.md §3): a product of Gaussians, `R = G_Q^T G_K / sqrt(d)`.

`A = I + s R` is `Q^T K` for a query and a key that are the token itself next to a random Gaussian
projection of it, `Q = [I; sqrt(s) d^(1/4) W_Q]`, `K = [I; sqrt(s) d^(1/4) W_K]`, with `W_Q`, `W_K`
independent d x d of entry variance 1/d (the standard initialisation): `sqrt(d) <W_Q u, W_K v>` is
the scaled dot-product logit of unit tokens at RMS radius sqrt(d).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..noise import Streams
from .base import QK_LAWS, QKLaw

if TYPE_CHECKING:
    import torch


@QK_LAWS.register
class GaussianQK(QKLaw):
    """Product of two independent standard Gaussian matrices over sqrt(d); rotation invariant."""

    name = "gaussian"
    rotation_invariant = True

    def fluctuation(self, rs: Streams, lead: tuple[int, ...], dtype: torch.dtype
                    ) -> torch.Tensor:
        """`G_Q^T G_K / sqrt(d)` `(runs, *lead, d, d)`, `G` standard normal."""
        g = rs.normal(*lead, 2, self.d, self.d, dtype=dtype)
        return (g[..., 0, :, :].transpose(-1, -2) @ g[..., 1, :, :]).div_(math.sqrt(self.d))
