"""The depth limit: the Ito SDE of tokens on the sphere driven by one common matrix Brownian motion.

    dx_i = P_{x_i} M y_i dt + P_{x_i} dW_t y_i - P_x Sigma(y_i) x_i dt - tr(P_x Sigma(y_i)) x_i dt / 2

(spec §3). `sde_step` is Euler-Maruyama followed by projection onto the sphere; it takes the noise
as an explicit increment so that a network and its SDE can share one Brownian path
(`tokensde.sim.coupled`: `coupled_paths`, `coupled_states`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from ..model.params import ModelParams
from .layers import _mean_part, _mlp_input, _normalize_, _tangent

__all__ = ["ito_correction", "sde_step"]


def ito_correction(x: torch.Tensor, y: torch.Tensor, p: ModelParams) -> torch.Tensor:
    """Drift `-P_x Sigma(y) x - tr(P_x Sigma(y)) x / 2` that keeps `|x| = 1` (spec §3), `Sigma` the
    covariance of the noise law `p.noise_law`; with per-head outputs `y` `(runs, heads, n, d)`,
    `Sigma = (1/heads) sum_h Sigma(y^h)` and the drift, linear in `Sigma`, is the heads' mean.
    An MLP block adds `-(d-1)/2 mlp_sigma^2 x` (its noise has covariance `mlp_sigma^2 I` at `x`),
    independent token noise `-(d-1)/2 token_noise^2 x` (docs/token-noise.md)."""
    ito = p.noise_law.ito(x.unsqueeze(-3), y).mean(-3) if p.heads > 1 else p.noise_law.ito(x, y)
    if p.mlp_block.active:
        ito = ito - 0.5 * (p.d - 1) * p.mlp_sigma**2 * x
    if p.token_noise > 0:
        ito = ito - 0.5 * (p.d - 1) * p.token_noise**2 * x
    return ito


# k = sigma^2 (d - 1) dt: the Ito drift scales a token by about 1 - k/2 per step. At STEP_MAX that
# factor reaches 0 and the projected Euler step reverses the token (more noise gives less
# motion); above STEP_WARN the step is visibly biased. Both are warned about.
_STEP_MAX = 2.0
_STEP_WARN = 0.2


def _check_sde_step(p: ModelParams, dt: float) -> float:
    """`k = (sigma^2 + mlp_sigma^2 + token_noise^2) (d - 1) dt` of the Euler step of the SDE
    (noise scale sigma, MLP block scale mlp_sigma, independent token noise), with a
    RuntimeWarning naming k above STEP_WARN (biased) and above STEP_MAX (the step reverses the
    token). Returns k. A warning, not a refusal: the Gram sampler is also run at huge d for what
    it holds, not for accuracy."""
    scale2 = (p.noise_scale**2 + (p.mlp_sigma**2 if p.mlp_block.active else 0.0)
              + p.token_noise**2)
    k = scale2 * (p.d - 1) * dt
    if k > _STEP_WARN:
        harm = ("reverses the token (the Ito drift of one step, about -k/2 x, passes through "
                "0)" if k > _STEP_MAX else "is biased (too little motion)")
        warnings.warn(f"scheme='sde' with sigma^2 (d - 1) dt = {k:.3g} (noise scale^2 "
                      f"{scale2:g}, d = {p.d}, dt = {dt:g}) > {_STEP_WARN:g}: the Euler step "
                      f"{harm}; choose dt <= {_STEP_WARN / scale2 / (p.d - 1):.3g} (--dt: more "
                      "layers for the same depth time)",
                      RuntimeWarning, stacklevel=3)
    return k


def sde_step(
    x: torch.Tensor, y: torch.Tensor, xi: torch.Tensor, p: ModelParams, dt: float
) -> torch.Tensor:
    """Euler-Maruyama step of the Ito SDE (spec §3) followed by projection onto the sphere.

    `x <- N(x + dt [P_x M y + ito(x, y)] + sqrt(dt) P_x xi)`, where `sqrt(dt) xi = dW y`.
    """
    drift = ito_correction(x, y, p)
    my = _mean_part(y, p)
    if my is not None:
        drift = drift + _tangent(x, my)
    return _normalize_(x + dt * drift + dt**0.5 * _tangent(x, xi))


def _sde_layer(x: torch.Tensor, y: torch.Tensor, xi: torch.Tensor, p: ModelParams, dt: float,
              mlp: Callable[[torch.Tensor], torch.Tensor] | None = None,
              step: Callable[..., torch.Tensor] = sde_step) -> torch.Tensor:
    """One step of the depth limit with both noises in it (docs/variants.md §5):
    `step(x, y, xi + mlp(mlp_input(x)), p, dt)`, `mlp(u)` the MLP block's kernel noise at `u`
    (`xi` is added to in place)."""
    return step(x, y, xi if mlp is None else xi.add_(mlp(_mlp_input(x, p))), p, dt)
