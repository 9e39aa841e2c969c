"""Two tokens (spec §5-§6): exact antipodal probabilities, the phase boundary, reduced diffusion.

For softmax attention with `Q^T K = I` and matrix noise, `rho = <x_1, x_2>` is an autonomous
diffusion on [-1, 1]. `rho = 1` (merged) always attracts; `rho = -1` (antipodal) attracts with
positive probability iff `cosh 2beta > d - 2`. This module gives

- theory: `beta_c`, the Lyapunov exponents at `rho = +-1`, `p_anti` (scale-function quadrature,
  vectorised), `p_anti_uniform` (uniformly random initial pair), the hybrid threshold of §6;
- `reduced_model`: the 1-D `rho` diffusion (simulated on its own, in `z = artanh(rho)`, by
  `tokensde.sim.reduced.reduced_diffusion`);
- `classify_pair` (outcome masks at a tolerance) and `default_dt` (the Monte Carlo layer step).

It needs numpy and scipy only. The Monte Carlo of the full d-dimensional network (`monte_carlo`,
`hybrid_monte_carlo`, `PairOutcome`) is in `tokensde.analysis.pair_monte_carlo`, which needs the simulator.

The hitting probabilities are computed by the first-passage engine
(`tokensde.theory.first_passage`) on the coefficient objects of `tokensde.theory.coefficients`
(`SpecPair` for §5, `HybridPair` for §6); the functions here check their arguments, broadcast, and
keep the names that callers use.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from ..model.params import ParameterError, _check_int, _check_real
from . import first_passage as fp
from .coefficients import RhoDiffusion, _beta_critical, _HybridPair, _sech, _SpecPair, _supercritical
from .first_passage import RhoPaths, check_start

_ArrayLike = float | np.ndarray
_LOG2 = math.log(2.0)
__all__ = ["RhoPaths", "antipodal_attracts", "beta_c", "check_rho0", "classify_pair", "default_dt",
           "hybrid_drift_diffusion", "hybrid_eps2_c", "hybrid_lyapunov", "hybrid_p_anti",
           "lyapunov_antipodal", "lyapunov_merged", "p_anti", "p_anti_reference",
           "p_anti_uniform", "reduced_model", "rho_drift_diffusion", "uniform_pair_density",
           "z_coefficients"]


# ---------------------------------------------------------------------------------------------
# Theory of spec §5
# ---------------------------------------------------------------------------------------------


def _as_floats(name: str, value: _ArrayLike) -> np.ndarray:
    """`value` as a float array, or ParameterError naming `name` (a string, a ragged list)."""
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"{name} must be a number or an array of numbers; got "
                             f"{value!r}") from err


def _check_beta_d(beta: _ArrayLike, d: _ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    b = _as_floats("beta", beta)
    dd = _as_floats("d", d)
    if not np.all(np.isfinite(b) & (b >= 0)):
        raise ParameterError(f"beta must be finite numbers >= 0; got {beta!r}")
    if not np.all(np.isfinite(dd) & (dd >= 2)):
        raise ParameterError(f"d must be finite numbers >= 2; got {d!r}")
    return b, dd


def _check_rho(name: str, rho: _ArrayLike) -> np.ndarray:
    r = _as_floats(name, rho)
    if not np.all(np.isfinite(r) & (r >= -1) & (r <= 1)):
        raise ParameterError(f"{name} must be numbers in [-1, 1]; got {rho!r}")
    return r


def _check_scale(name: str, value: _ArrayLike, strict: bool = True) -> np.ndarray:
    """`value` as finite numbers > 0 (>= 0 unless `strict`), or ParameterError naming `name`."""
    v = _as_floats(name, value)
    if not np.all(np.isfinite(v) & ((v > 0) if strict else (v >= 0))):
        raise ParameterError(f"{name} must be finite numbers {'>' if strict else '>='} 0; got "
                             f"{value!r}")
    return v


def _unwrap(out: np.ndarray) -> Any:
    return out.item() if out.ndim == 0 else out


def beta_c(d: _ArrayLike) -> _ArrayLike:
    """Critical interaction `beta_c(d) = arccosh(d - 2) / 2` (0 for `d <= 3`).

    Args:
        d: Dimension (a number or an array).

    Returns:
        `beta_c(d)`, of the shape of `d`.

    Examples:
        >>> from tokensde.theory import beta_c
        >>> round(float(beta_c(10)), 6)  # cosh(2 beta) = 8
        1.38433
        >>> float(beta_c(3))
        0.0
    """
    _, dd = _check_beta_d(0.0, d)
    return _unwrap(_beta_critical(dd))


def antipodal_attracts(beta: _ArrayLike, d: _ArrayLike) -> Any:
    """True where antipodal pairs attract with positive probability: `cosh(2 beta) > d - 2`.

    Args:
        beta: Attention strength (broadcast with `d`).
        d: Dimension.

    Returns:
        A boolean (array) of the broadcast shape.
    """
    return _unwrap(_supercritical(*_check_beta_d(beta, d)))


def lyapunov_merged(d: _ArrayLike, sigma: float = 1.0) -> _ArrayLike:
    """Exponent of `log(1 - rho)` at `rho = 1`: `-sigma^2 (d - 1)` (always attracting).

    Args:
        d: Dimension.
        sigma: Scale of the value noise.

    Returns:
        The exponent `-sigma^2 (d - 1)`.
    """
    _, dd = _check_beta_d(0.0, d)
    sigma = float(_check_scale("sigma", sigma))
    return _unwrap(-(sigma**2) * (dd - 1.0))


def lyapunov_antipodal(beta: _ArrayLike, d: _ArrayLike, sigma: float = 1.0) -> _ArrayLike:
    """Exponent of `log(1 + rho)` at `rho = -1`: `sigma^2 (d - 2 - cosh 2beta) / cosh^2 beta`.

    Args:
        beta: Attention strength (broadcast with `d`).
        d: Dimension.
        sigma: Scale of the value noise.

    Returns:
        The exponent (negative: antipodal pairs attract).
    """
    b, dd = _check_beta_d(beta, d)
    s2 = _sech(b) ** 2  # cosh(2b)/cosh(b)^2 = 2 - sech(b)^2, so large beta cannot overflow
    sigma = float(_check_scale("sigma", sigma))
    return _unwrap(sigma**2 * ((dd - 2.0) * s2 - (2.0 - s2)))


def _points(*arrays: np.ndarray) -> tuple[tuple[int, ...], list[np.ndarray]]:
    shaped = np.broadcast_arrays(*arrays)
    return shaped[0].shape, [np.ravel(a).astype(float) for a in shaped]


def p_anti(beta: _ArrayLike, d: _ArrayLike, rho0: _ArrayLike) -> _ArrayLike:
    """`P(rho -> -1 | rho_0) = int_{rho_0}^1 S' / int_{-1}^1 S'` if `cosh 2beta > d-2`, else 0.

    Broadcasts `beta`, `d` (any real >= 2) and `rho0`. `rho0 = -1` is a fixed point of the
    dynamics and gives 1; `rho0 = 1` gives 0. Independent of `sigma`.

    Args:
        beta: Attention strength.
        d: Dimension (any real >= 2).
        rho0: Initial inner product in [-1, 1].

    Returns:
        The probability that the pair ends antipodal, of the broadcast shape.

    Examples:
        >>> from tokensde.theory import p_anti
        >>> round(float(p_anti(1.0, 3, 0.0)), 4)  # `tokensde two-token prob --beta 1 --d 3`
        0.2224
        >>> float(p_anti(0.5, 10, 0.0))  # below beta_c(10) = 1.38: the pair always merges
        0.0
    """
    b, dd = _check_beta_d(beta, d)
    shape, (b, dd, r) = _points(b, dd, _check_rho("rho0", rho0))
    out = np.array([fp.hitting_probability(_SpecPair(*pt), r0)
                    for *pt, r0 in zip(b.tolist(), dd.tolist(), r.tolist(), strict=True)])
    return _unwrap(out.reshape(shape))


def uniform_pair_density(rho: _ArrayLike, d: _ArrayLike) -> _ArrayLike:
    """Density of `<x_1, x_2>` for independent uniform unit vectors: `∝ (1 - rho^2)^((d-3)/2)`.

    At the ends `rho = +-1` it is the limit: 0 for d > 3, 1/2 for d = 3 (the uniform law on
    [-1, 1]) and +inf for d < 3 (an integrable singularity; 1/(pi sqrt(1 - rho^2)) at d = 2).

    Args:
        rho: Inner products in [-1, 1].
        d: Dimension (>= 2).

    Returns:
        The normalised density at `rho`.
    """
    _, dd = _check_beta_d(0.0, d)
    r = _check_rho("rho", rho)
    a = 0.5 * (dd - 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # (a - 1) log(1 - rho^2) is 0 * -inf at d = 3, rho = +-1: its limit there is 0
        power = np.where(a == 1.0, 0.0, (a - 1.0) * np.log1p(-r * r))
        log_dens = -special.betaln(a, a) - (2 * a - 1) * _LOG2 + power
    return _unwrap(np.exp(log_dens))


def p_anti_uniform(beta: _ArrayLike, d: _ArrayLike) -> _ArrayLike:
    """`P_anti` for a uniformly random initial pair: `int S'(rho) F(rho) drho / int S'`.

    `F` is the distribution function of `rho_0` (a regularised incomplete beta function), since
    `E P_anti(rho_0) = E int_{rho_0}^1 S' / Z = int S'(rho) P(rho_0 < rho) drho / Z`.

    Args:
        beta: Attention strength (broadcast with `d`).
        d: Dimension.

    Returns:
        The probability that a uniform random pair ends antipodal.
    """
    b, dd = _check_beta_d(beta, d)
    shape, (b, dd) = _points(b, dd)
    out = np.array([fp.hitting_probability(_SpecPair(*pt), "uniform")
                    for pt in zip(b.tolist(), dd.tolist(), strict=True)])
    return _unwrap(out.reshape(shape))


def p_anti_reference(beta: float, d: float, rho0: float) -> float:
    """Reference `P_anti(beta, d, rho0)` of spec §5 by nested adaptive quadrature (slow; for
    tests and benchmarks at moderate `beta`, <~ 10), independent of the engine of `p_anti`.

    Args:
        beta: The inverse temperature (>= 0).
        d: The dimension (>= 2).
        rho0: The initial inner product of the pair, in [-1, 1].

    Returns:
        The probability that the pair ends antipodal.
    """
    b, dd = _check_beta_d(beta, d)
    r = _check_rho("rho0", rho0)
    if b.ndim or dd.ndim or r.ndim:
        raise ParameterError("p_anti_reference takes numbers, not arrays; use p_anti for arrays")
    return fp.spec_reference(float(b), float(dd), float(r))


def rho_drift_diffusion(rho: _ArrayLike, beta: float, d: float, sigma: float = 1.0) -> tuple[
        _ArrayLike, _ArrayLike]:
    """Spec §5: drift `sigma^2 (1-rho^2)((d-2) m - s rho)` and squared diffusion `2 s sigma^2
    (1-rho^2)^2` of `rho`, with `m/s = sech(beta (1 - rho))`, `m + s = 1`.

    Args:
        rho: Inner products in [-1, 1] (array).
        beta: Attention strength.
        d: Dimension.
        sigma: Scale of the value noise.

    Returns:
        `(drift, diffusion_squared)`, each of the shape of `rho`.
    """
    b, dd = _check_beta_d(beta, d)
    r = _check_rho("rho", rho)
    sigma = float(_check_scale("sigma", sigma))
    s = 1.0 / (1.0 + _sech(b * (1.0 - r)))
    one = 1.0 - r * r
    return (_unwrap(sigma**2 * one * ((dd - 2.0) * (1.0 - s) - s * r)),
            _unwrap(2.0 * s * sigma**2 * one**2))


# ---------------------------------------------------------------------------------------------
# Theory of spec §6 (hybrid: USA with 1/n, M = I, scalar noise eps)
# ---------------------------------------------------------------------------------------------


def hybrid_eps2_c(beta: _ArrayLike) -> _ArrayLike:
    """Threshold of the hybrid model: antipodal iff `eps^2 > 2 e^{-beta}`, merged iff below.

    Args:
        beta: Attention strength (a number or an array).

    Returns:
        The threshold `2 e^{-beta}` of `eps^2`.
    """
    b, _ = _check_beta_d(beta, 2.0)
    return _unwrap(2.0 * np.exp(-b))


def hybrid_lyapunov(beta: _ArrayLike, eps: _ArrayLike) -> tuple[_ArrayLike, _ArrayLike]:
    """Exponents `(of log(1+rho) at -1, of log(1-rho) at +1)`: `(2e^-b - eps^2, e^2b (eps^2 -
    2e^-b))`. They always have opposite signs, so the pair ends on one side almost surely.

    Args:
        beta: Attention strength (broadcast with `eps`).
        eps: Scale of the scalar noise.

    Returns:
        `(at_antipodal, at_merged)`: the two exponents.
    """
    b, _ = _check_beta_d(beta, 2.0)
    e2 = _check_scale("eps", eps, strict=False) ** 2
    gap = 2.0 * np.exp(-b) - e2
    return _unwrap(gap), _unwrap(-np.exp(2.0 * b) * gap)


def hybrid_drift_diffusion(rho: _ArrayLike, beta: float, eps: float) -> tuple[_ArrayLike,
                                                                             _ArrayLike]:
    """§6 `rho` diffusion: drift `(1-rho^2) e^{beta rho} (1 - eps^2 e^beta/2 - eps^2 rho
    e^{beta rho})` and squared diffusion `eps^2 e^{2 beta rho} (1-rho^2)^2` (Ito, from spec §3)."""
    b, _ = _check_beta_d(beta, 2.0)
    e = _check_real("eps", eps)
    r = _check_rho("rho", rho)
    w, one = np.exp(b * r), 1.0 - r * r
    drift = one * w * (1.0 - 0.5 * e * e * np.exp(b) - e * e * r * w)
    return _unwrap(drift), _unwrap(e * e * w * w * one * one)


def hybrid_p_anti(beta: float, eps: float, rho0: float = 0.0) -> float:
    """1 above the threshold, 0 below (and for `rho0 = 1`), nan exactly at it; `rho0 = -1`: 1.

    Args:
        beta: Attention strength.
        eps: Scale of the scalar noise.
        rho0: Initial inner product.

    Returns:
        The probability that the pair ends antipodal: 1, 0 or nan.
    """
    b = _check_real("beta", beta)
    e = _check_real("eps", eps)
    r = float(_check_rho("rho0", rho0))
    if r in (-1.0, 1.0):
        return 1.0 if r == -1.0 else 0.0
    gap = e * e - 2.0 * math.exp(-b)
    return 1.0 if gap > 0 else 0.0 if gap < 0 else math.nan


# ---------------------------------------------------------------------------------------------
# The reduced one-dimensional diffusion, in z = artanh(rho)
# ---------------------------------------------------------------------------------------------


def z_coefficients(z: np.ndarray, beta: float, d: float, sigma: float, eps: float | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Drift and noise of `dz`, `z = artanh rho`.

    §5: `dz = sigma^2 ((d-2) m + s rho) dt + sigma sqrt(2s) dB`. §6 (eps given):
    `dz = e^{beta rho} (1 - eps^2 e^beta / 2) dt + eps e^{beta rho} dB`.
    """
    model = _SpecPair(beta, d, sigma) if eps is None else _HybridPair(beta, eps, d)
    return model.z_coefficients(z)


check_rho0 = check_start


def reduced_model(beta: float, d: float, sigma: float = 1.0, eps: float | None = None
                  ) -> RhoDiffusion:
    """The `rho` diffusion of two tokens, its arguments checked: `SpecPair` (§5), or
    `HybridPair` (§6) when `eps` is given (its paths: `tokensde.sim.reduced`)."""
    _check_beta_d(beta, d)
    sigma = _check_real("sigma", sigma, 0.0, strict=True)
    eps = None if eps is None else _check_real("eps", eps)
    return _SpecPair(beta, d, sigma) if eps is None else _HybridPair(beta, eps, d)


# ---------------------------------------------------------------------------------------------
# Outcomes at a tolerance, and the Monte Carlo layer step (see tokensde.analysis.pair_monte_carlo)
# ---------------------------------------------------------------------------------------------


def classify_pair(log_plus: np.ndarray, log_minus: np.ndarray, tol: float) -> tuple[
        np.ndarray, np.ndarray]:
    """Masks `(antipodal, merged)`: `1 + rho < tol` and `1 - rho < tol` (spec §7)."""
    lt = math.log(tol)
    return log_plus < lt, log_minus < lt


def default_dt(d: int) -> float:
    """Layer step for two-token Monte Carlo: `0.05 / d`.

    The network's error per layer in `P_anti` grows like `d^2 dt^2` (the noise `sqrt(dt) V y`
    has norm `~ sqrt(d dt)`); with this step the bias of `P_anti` stays below ~0.01 up to
    d = 10 (measured in docs/two-tokens.md).

    Args:
        d: Dimension.

    Returns:
        The layer step `0.05 / d`.
    """
    return 0.05 / _check_int("d", d, 2)
