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


def _theta_minus_sin(th: np.ndarray) -> np.ndarray:
    """`theta - sin(theta)` without cancellation (series below 1)."""
    small = th < 1.0
    out = th - np.sin(th)
    ts = th[small]
    term, acc = ts**3 / 6.0, np.zeros_like(ts)
    for k in range(12):  # theta^(2k+3) / (2k+3)! with alternating signs
        acc += term
        term = -term * ts * ts / ((2 * k + 4) * (2 * k + 5))
    out[small] = acc
    return out


@MLPS.register
class _ReLU(Activation):
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

    def complement(self, w: np.ndarray) -> np.ndarray:
        """`1 - khat(1 - w) = (pi w - w theta + theta - sin theta) / pi`, `theta = arccos(1 - w)`,
        with `theta - sin theta` by its series below 1 (no cancellation)."""
        w = np.asarray(w, dtype=float)
        th = 2.0 * np.arcsin(np.sqrt(0.5 * w))
        return (math.pi * w - w * th + _theta_minus_sin(th)) / math.pi

    def slope_at_one(self) -> float:
        """`khat'(rho) = (pi - arccos rho) / pi`, 1 at `rho = 1`."""
        return 1.0

    def kernel_t(self, rho: torch.Tensor) -> torch.Tensor:
        """The closed form on a tensor."""
        r = rho.clamp(-1.0, 1.0)
        return ((1.0 - r * r).clamp(min=0.0).sqrt() + (math.pi - r.acos()) * r) / math.pi
