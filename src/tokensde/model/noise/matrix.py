"""`noise='matrix'` (the main model, spec §2): `V` with i.i.d. entries of variance sigma^2,
Gaussian or uniform `U(-a, a)`, `a = sigma sqrt(3)`; `Sigma(y) = sigma^2 |y|^2 I`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import NOISE_LAWS, NoiseLaw, Streams
from .entries import ENTRY_LAWS

if TYPE_CHECKING:
    import torch


@NOISE_LAWS.register
class _MatrixNoise(NoiseLaw):
    """I.i.d. entries; Gaussian entries allow the exact 'fast' and 'gram' samplers (spec §4)."""

    name = "matrix"
    laws = ("gaussian", "uniform")

    @property
    def samplers(self) -> tuple[str, ...]:
        """'fast', 'full' and 'gram' for Gaussian entries, else 'full'."""
        return ("fast", "full", "gram") if self.law == "gaussian" else ("full",)

    def matrices(self, rs: Streams, dtype: torch.dtype) -> torch.Tensor:
        """`V` `(runs, d, d)` with i.i.d. entries of the law `law`, variance sigma^2."""
        return ENTRY_LAWS[self.law](rs, (self.d, self.d), self.scale, dtype)

    def covariance(self, y: torch.Tensor) -> torch.Tensor:
        """`Sigma(y) = sigma^2 |y|^2 I`."""
        y2 = (y * y).sum(-1)[..., None, None]
        return self.scale**2 * y2 * y.new_ones(self.d).diag()

    def ito(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`-(d - 1)/2 sigma^2 |y|^2 x`."""
        s2 = self.scale**2
        y2 = (y * y).sum(-1, keepdim=True)
        return -0.5 * (self.d - 1) * s2 * y2 * x
