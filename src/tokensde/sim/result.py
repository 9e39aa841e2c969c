"""`SimResult`: what `simulate` returns and `store.load_result` reads back.

Its own module, so that storing and loading results does not import the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._version import __version__
from ..model.params import ModelParams, TimeGrid


@dataclass
class SimResult:
    """Output of `simulate`.

    `gram` is `(runs, K, n, n)` at layer indices `checkpoints` `(K,)`; `tokens` `(runs, K, n, d)` when
    recorded (the Gram sampler stores tokens in an n-dimensional isometric frame); `x` is the final
    state `(runs, n, d)`. With norm 'pre' or 'peri' (docs/variants.md §4) `x` and `tokens` are the
    residual stream, whose norms are the radii, and `gram` is that of its directions `x_i / |x_i|`.
    All tensors live on the CPU.
    """

    params: ModelParams
    grid: TimeGrid
    runs: int
    seed: int
    sampler: str
    scheme: str
    init: str
    checkpoints: np.ndarray
    x: torch.Tensor
    gram: torch.Tensor | None = None
    tokens: torch.Tensor | None = None
    dtype: str = "float64"
    device: str = "cpu"
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    decided_at: np.ndarray | None = None

    @property
    def times(self) -> np.ndarray:
        """Depth times `t = k dt` of the checkpoints."""
        return self.checkpoints * self.grid.dt

    def rho(self, i: int = 0, j: int = 1) -> torch.Tensor:
        """Inner products `<x_i, x_j>` at the checkpoints, `(runs, K)`."""
        if self.gram is None:
            raise ValueError("this result did not record 'gram'")
        return self.gram[:, :, i, j]

    def decision_times(self) -> np.ndarray:
        """Depth time at which each run was decided (`until='decided'`), nan where it was still
        undecided at the horizon, `(runs,)`."""
        if self.decided_at is None:
            raise ValueError("this result was not run with until='decided'")
        return np.where(self.decided_at >= 0, self.decided_at * self.grid.dt, np.nan)

    def final_gram(self) -> torch.Tensor:
        """Gram matrices `X X^T` of the final state, `(runs, n, n)`; of its directions
        `x_i / |x_i|` with norm 'pre' or 'peri' (the state is the residual stream)."""
        u = self.x if self.params.norm == "post" else torch.nn.functional.normalize(self.x, dim=-1)
        return u @ u.transpose(-1, -2)

    def metadata(self) -> dict[str, Any]:
        """Everything needed to reproduce this result (JSON-ready)."""
        return {
            "package": "tokensde",
            "version": __version__,
            "params": self.params.to_dict(),
            "steps": self.grid.steps,
            "dt": self.grid.dt,
            "alpha": self.grid.alpha,
            "T": self.grid.T,
            "runs": self.runs,
            "seed": self.seed,
            "sampler": self.sampler,
            "scheme": self.scheme,
            "init": self.init,
            "dtype": self.dtype,
            "device": self.device,
            "checkpoints": self.checkpoints.tolist(),
            "wall_s": self.wall_s,
            "until": "horizon" if self.decided_at is None else "decided",
            **self.extra,
        }
