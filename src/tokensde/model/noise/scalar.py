"""`noise='scalar'` (spec §2, §6): `V = eps xi I`, `xi` a centred unit-variance scalar (Gaussian or
+-1), one per layer; `Sigma(y) = eps^2 y y^T`. `eps` defaults to `sigma`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import NOISE_LAWS, NoiseLaw, Streams, _projected
from .entries import ENTRY_LAWS

if TYPE_CHECKING:
    import torch


@NOISE_LAWS.register
class _ScalarNoise(NoiseLaw):
    """A random multiple of the identity: the noise of token i is `eps xi y_i`."""

    name = "scalar"
    laws = ("gaussian", "rademacher")
    uses_eps = True

    @property
    def scale(self) -> float:
        """`eps`, or `sigma` when eps is not given."""
        return self.sigma if self.eps is None else self.eps

    def _xi(self, rs: Streams, dtype: torch.dtype) -> torch.Tensor:
        """`eps xi` per run, `(runs,)`."""
        return ENTRY_LAWS[self.law](rs, (), self.scale, dtype)

    def matrices(self, rs: Streams, dtype: torch.dtype) -> torch.Tensor:
        """`V = eps xi I` `(runs, d, d)`."""
        e = self._xi(rs, dtype)
        return e[:, None, None] * e.new_ones(self.d).diag()

    def draw(self, y: torch.Tensor, rs: Streams) -> torch.Tensor:
        """`eps xi y_i` (one scalar per run instead of d^2 entries)."""
        return self._xi(rs, y.dtype)[:, None, None] * y

    def covariance(self, y: torch.Tensor) -> torch.Tensor:
        """`Sigma(y) = eps^2 y y^T`."""
        return self.scale**2 * (y[..., :, None] * y[..., None, :])

    def ito(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`-eps^2 <x, y> P_x y - eps^2 |P_x y|^2 x / 2`."""
        s2 = self.scale**2
        xy, py, py2 = _projected(x, y)
        return -s2 * xy * py - 0.5 * s2 * py2 * x
