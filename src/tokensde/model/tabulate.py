"""Functions of a correlation in [-1, 1], tabulated once with numpy and read on tensors by linear
interpolation (the MLP block's dual kernels, the peri-norm noise correlation). torch-free at
import: only the methods of the tensors given are used."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

_POINTS = 4097  # linear interpolation error <= h^2 max|f''| / 8, h = 2/4096: ~1e-8 for smooth f


class Table:
    """`f` on a uniform grid of `points` nodes over [-1, 1], read on tensors by interpolation."""

    def __init__(self, f: Callable[[np.ndarray], np.ndarray], points: int = _POINTS) -> None:
        self.grid = np.linspace(-1.0, 1.0, points)
        self.values = np.asarray(f(self.grid), dtype=float)

    def __call__(self, r: torch.Tensor) -> torch.Tensor:
        """`f(r)` by linear interpolation (`r` clamped to [-1, 1])."""
        n = len(self.grid)
        pos = (r.clamp(-1.0, 1.0) + 1.0) * ((n - 1) / 2.0)
        lo = pos.floor().clamp(max=n - 2)
        t = r.new_tensor(self.values)
        i = lo.long()
        w = pos - lo
        return t[i] * (1.0 - w) + t[i + 1] * w
