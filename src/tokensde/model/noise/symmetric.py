"""`noise='symmetric'` (spec §2): `V = (G + G^T)/2`, `G` Gaussian with entry variance sigma^2;
`Sigma(y) = (sigma^2/2)(|y|^2 I + y y^T)`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import NOISE_LAWS, NoiseLaw, Streams, _projected
from .entries import ENTRY_LAWS

if TYPE_CHECKING:
    import torch


@NOISE_LAWS.register
class _SymmetricNoise(NoiseLaw):
    """The symmetric part of a Gaussian matrix."""

    name = "symmetric"
    laws = ("gaussian",)

    def matrices(self, rs: Streams, dtype: torch.dtype) -> torch.Tensor:
        """`(G + G^T)/2` `(runs, d, d)`."""
        g = ENTRY_LAWS[self.law](rs, (self.d, self.d), self.scale, dtype)
        return 0.5 * (g + g.transpose(-1, -2))

    def covariance(self, y: torch.Tensor) -> torch.Tensor:
        """`Sigma(y) = (sigma^2/2)(|y|^2 I + y y^T)`."""
        y2 = (y * y).sum(-1)[..., None, None]
        return 0.5 * self.scale**2 * (y2 * y.new_ones(self.d).diag() + y[..., :, None] * y[..., None, :])

    def ito(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`-(sigma^2/2) <x, y> P_x y - (sigma^2/4) ((d - 1) |y|^2 + |P_x y|^2) x`."""
        s2 = self.scale**2
        y2 = (y * y).sum(-1, keepdim=True)
        xy, py, py2 = _projected(x, y)
        return -0.5 * s2 * xy * py - 0.25 * s2 * ((self.d - 1) * y2 + py2) * x
