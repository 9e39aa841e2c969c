"""`SimResult`: what `simulate` returns and `store.load_result` reads back.

Its own module, so that storing and loading results does not import the simulator (nor torch:
the arrays are numpy arrays).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._version import __version__
from ..model.params import ModelParams, ParameterError, TimeGrid

_TIDY_COLUMNS: tuple[str, ...] = ("run", "layer", "t", "i", "j", "value")


@dataclass
class SimResult:
    """Output of `simulate`: numpy arrays, on the CPU.

    `gram` is `(runs, C, n, n)` at layer indices `checkpoints` `(C,)`; `tokens` `(runs, C, n, d)` when
    recorded; `x` is the final state `(runs, n, d)`. `x` and `tokens` are always coordinates in
    R^d: the Gram sampler, which holds the tokens only up to a rotation, records no tokens, and
    its `x` raises (docs/gram.md); `state` is the final state as the sampler holds it, `(runs, n,
    d)` or, for the Gram sampler, `(runs, n, w)` in an isometric frame of the tokens' span (its
    inner products, hence `final_gram()`, are those of the tokens; its coordinates are not).
    With norm 'pre' or 'peri' (docs/variants.md §4) `x`, `state` and `tokens` are the residual
    stream, whose norms are the radii, and `gram` is that of its directions `x_i / |x_i|`.
    Every array is a `numpy.ndarray` of the run's dtype (float64 unless asked otherwise).
    `observed` maps the name of each observer given to
    `simulate(..., recording=Recording(observe=...))` to its outputs `(runs, C, ...)` at the
    checkpoints, or at the observer's own (`observed_layers(name)`; `extra['observed_at']`
    lists those that differ), in the observer's dtype.
    """

    params: ModelParams
    grid: TimeGrid
    runs: int
    seed: int
    sampler: str
    scheme: str
    init: str
    checkpoints: np.ndarray
    state: np.ndarray
    gram: np.ndarray | None = None
    tokens: np.ndarray | None = None
    dtype: str = "float64"
    device: str = "cpu"
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    decided_at: np.ndarray | None = None
    observed: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def coordinates(self) -> bool:
        """Whether `state` holds coordinates in R^d (every sampler but 'gram')."""
        return self.sampler != "gram"

    @property
    def x(self) -> np.ndarray:
        """The final tokens in R^d, `(runs, n, d)`; ParameterError for a run of the Gram sampler,
        which holds them only up to a rotation (use `final_gram()` or `state`)."""
        if not self.coordinates:
            raise ParameterError(
                "x: this result ran sampler='gram', which holds the tokens only up to a rotation "
                "(in a frame of their span), so it has no coordinates in R^d. Use final_gram() "
                "(or state, whose inner products are those of the tokens), or run with "
                "Execution(sampler='fast') or 'full' for coordinates (docs/gram.md)")
        return self.state

    @property
    def times(self) -> np.ndarray:
        """Depth times `t = k dt` of the checkpoints."""
        return self.checkpoints * self.grid.dt

    def observed_layers(self, name: str) -> np.ndarray:
        """The layers of the outputs `observed[name]`: the observer's own checkpoints, or
        `checkpoints`; KeyError for a name not observed."""
        if name not in self.observed:
            raise KeyError(f"no observer {name!r} in this result; observed: "
                           f"{', '.join(map(repr, self.observed)) or 'none'}")
        own = self.extra.get("observed_at", {}).get(name)
        return self.checkpoints if own is None else np.asarray(own, dtype=np.int64)

    def _recorded_gram(self) -> np.ndarray:
        if self.gram is None:
            raise ValueError("this result did not record 'gram' (simulate(..., record=('gram',)))")
        return self.gram

    def rho(self, i: int = 0, j: int = 1) -> np.ndarray:
        """Inner products `<x_i, x_j>` at the checkpoints, `(runs, C)`."""
        return self._recorded_gram()[:, :, i, j]

    def decision_times(self) -> np.ndarray:
        """Depth time at which each run was decided (`until='decided'`), nan where it was still
        undecided at the horizon, `(runs,)`."""
        if self.decided_at is None:
            raise ValueError("this result was not run with until='decided'")
        return np.where(self.decided_at >= 0, self.decided_at * self.grid.dt, np.nan)

    def final_gram(self) -> np.ndarray:
        """Gram matrices `X X^T` of the final state, `(runs, n, n)`; of its directions
        `x_i / |x_i|` with norm 'pre' or 'peri' (the state is the residual stream).

        Computed as the simulator records a checkpoint (torch, imported here), so a run stopped
        at its decision gives, bit for bit, the Gram matrix recorded at that layer."""
        import torch

        x = torch.from_numpy(self.state)
        u = x if self.params.norm == "post" else torch.nn.functional.normalize(x, dim=-1)
        return (u @ u.transpose(-1, -2)).numpy()

    def to_pandas(self, pairs: bool = True) -> Any:
        """The recorded Gram entries as a tidy pandas DataFrame with columns `run, layer, t, i, j,
        value`: one row per run, checkpoint (`layer`, depth time `t`) and pair `i < j` (the
        diagonal is 1 and `G` is symmetric); `pairs=False` gives every entry `(i, j)`."""
        import pandas as pd

        if not isinstance(pairs, bool | np.bool_):
            raise ParameterError(f"pairs must be True or False; got {pairs!r}")
        g = self._recorded_gram()
        runs, k, n, _ = g.shape
        i, j = np.triu_indices(n, 1) if pairs else (np.repeat(np.arange(n), n),
                                                     np.tile(np.arange(n), n))
        m = len(i)
        values = g[:, :, i, j]  # (runs, C, m)
        return pd.DataFrame({
            "run": np.repeat(np.arange(runs), k * m),
            "layer": np.tile(np.repeat(self.checkpoints.astype(np.int64), m), runs),
            "t": np.tile(np.repeat(self.times.astype(np.float64), m), runs),
            "i": np.tile(i, runs * k),
            "j": np.tile(j, runs * k),
            "value": values.reshape(-1),
        }, columns=list(_TIDY_COLUMNS))

    def to_xarray(self) -> Any:
        """The recorded Gram matrices as an `xarray.DataArray` named 'gram' with dims `(run,
        layer, i, j)`, coordinate `t` on `layer` and the scalar settings as attributes. Needs
        xarray (`pip install xarray`), which tokensde does not require."""
        try:
            import xarray as xr
        except ImportError as err:
            raise ImportError("SimResult.to_xarray needs xarray, which is not installed: "
                              "`pip install xarray`, or use to_pandas()") from err
        g = self._recorded_gram()
        runs, _, n, _ = g.shape
        attrs = {k: v for k, v in self.metadata().items() if isinstance(v, str | int | float)}
        return xr.DataArray(
            g, dims=("run", "layer", "i", "j"), name="gram", attrs=attrs,
            coords={"run": np.arange(runs), "layer": self.checkpoints.astype(np.int64),
                    "t": ("layer", self.times.astype(np.float64)), "i": np.arange(n),
                    "j": np.arange(n)})

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
