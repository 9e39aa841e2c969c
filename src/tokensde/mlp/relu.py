"""`mlp='relu'`: `phi(z) = max(z, 0)`, whose dual kernel is the arc-cosine kernel of order 1,

    khat(rho) = (sqrt(1 - rho^2) + (pi - arccos rho) rho) / pi,   kappa(1) = 1/2.

`khat(-1) = 0`: the block gives antipodal tokens uncorrelated noise (docs/variants.md §5).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .base import MLPS, Activation

if TYPE_CHECKING:
    import torch


@MLPS.register
class ReLU(Activation):
    """Rectified linear unit."""

    name = "relu"
    second_moment = 0.5

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """`max(z, 0)`."""
        return z.clamp(min=0.0)

    def kernel(self, rho: np.ndarray) -> np.ndarray:
        """The closed form above."""
        r = np.clip(np.asarray(rho, dtype=float), -1.0, 1.0)
        return (np.sqrt(1.0 - r * r) + (math.pi - np.arccos(r)) * r) / math.pi

    def kernel_t(self, rho: torch.Tensor) -> torch.Tensor:
        """The closed form on a tensor."""
        r = rho.clamp(-1.0, 1.0)
        return ((1.0 - r * r).clamp(min=0.0).sqrt() + (math.pi - r.acos()) * r) / math.pi
