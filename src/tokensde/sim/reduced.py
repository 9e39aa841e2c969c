"""The reduced two-token diffusion simulated on its own: Euler-Maruyama paths of `z = artanh rho`.

The coefficients are the theory's (`theory.coefficients.RhoDiffusion.z_coefficients`); the paths
are stepped by the one layer loop `loop._march` (a state of one `z` per run) and recorded at the
run's checkpoints (`options._resolve_checkpoints`). All runs draw from one numpy stream
(`SeedSequence([seed, 3])`), not from `rng.RunStreams`: the paths do not depend on a batch, so
there is no batch driver here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..model.params import TimeGrid, _check_int
from ..theory.coefficients import RhoDiffusion
from ..theory.first_passage import RhoPaths, check_start, initial_rho
from ..theory.two_tokens import reduced_model
from .loop import OnLayers, _march
from .options import _resolve_checkpoints


def z_paths(model: RhoDiffusion, rho0: Any, *, T: float, dt: float, runs: int, seed: int = 0,
            checkpoints: int | Sequence[int] | None = None) -> RhoPaths:
    """Euler-Maruyama paths of `dz = A dt + B dB`, `z = artanh rho` (coefficients bounded for
    every variant but the MLP block; `rho` never leaves (-1, 1)), through `loop._march`.

    Args:
        model: the `rho` diffusion (its `z_coefficients`).
        rho0: the start, a number in [-1, 1] or 'uniform' (a uniform pair in R^d).
        T: the horizon, a whole number of steps `dt`.
        dt: the step.
        runs: independent paths.
        seed: the root seed.
        checkpoints: the recorded steps, as `Recording.checkpoints`: None (start and end), a
            count C >= 2 evenly spaced (ends included) or step indices.

    Returns:
        `RhoPaths`: `z` `(runs, C)` at `times` `(C,)`.
    """
    grid = TimeGrid.make(T=T, dt=dt)
    runs, seed = _check_int("runs", runs, 1), _check_int("seed", seed, 0)
    start = check_start(rho0)
    keep = _resolve_checkpoints(checkpoints, grid.steps)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 3]))
    with np.errstate(divide="ignore"):
        z0 = np.arctanh(initial_rho(start, model.d, runs, rng))
    root = math.sqrt(grid.dt)

    def step(z: np.ndarray) -> np.ndarray:
        drift, noise = model.z_coefficients(z)
        return z + drift * grid.dt + noise * root * rng.standard_normal(runs)

    out: list[np.ndarray] = []
    _march(z0, grid.steps, step, OnLayers(keep, lambda k, z, rows: out.append(z)))
    return RhoPaths(np.stack(out, axis=1), keep * grid.dt)


def reduced_diffusion(beta: float, d: float, rho0: float | str, *, T: float, dt: float,
                      runs: int, seed: int = 0, sigma: float = 1.0, eps: float | None = None,
                      checkpoints: int | Sequence[int] | None = None) -> RhoPaths:
    """Euler-Maruyama paths of the 1-D `rho` diffusion of two tokens (spec §5; the §6 hybrid
    when `eps` is given), stepped in `z = artanh(rho)` (`z_paths`).

    Args:
        beta: Attention strength.
        d: Dimension.
        rho0: Initial inner product, or 'uniform' (a uniform random pair in R^d).
        T: Depth time of the horizon.
        dt: Time step.
        runs: Number of independent paths.
        seed: Root seed.
        sigma: Scale of the value noise.
        eps: Scale of the scalar noise of the hybrid model, or None for §5.
        checkpoints: Recording times, as `z_paths`, or None (start and end).

    Returns:
        `RhoPaths`: `z = artanh(rho)` `(runs, C)` at `times` `(C,)`.
    """
    return z_paths(reduced_model(beta, d, sigma, eps), rho0, T=T, dt=dt, runs=runs, seed=seed,
                   checkpoints=checkpoints)


__all__ = ["reduced_diffusion", "z_paths"]
