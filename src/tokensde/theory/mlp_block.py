"""Two tokens with the random MLP block: the exact 1-D diffusion of `rho = <x_1, x_2>`.

Softmax attention with `Q^T K = I`, no mean part, matrix value noise (cross-covariance
`sigma^2 <y_i, y_j> I`) and, independent of it, the MLP block of `tokensde.model.mlp` (cross-covariance
`mlp_sigma^2 khat(<x_i, x_j>) I`). For isotropic noise with cross-covariances `c_ij I` the pair
`rho` is an autonomous diffusion (derivation in docs/mlp_theory.md):

    b(rho) = c_12 (d - 2 + rho^2) - (d - 1) (c_11 + c_22) rho / 2
    a(rho) = (1 - rho^2) (c_11 + c_22 - 2 rho c_12)

with `c_11 = c_22 = sigma^2 |y_1|^2 + mlp_sigma^2` and `c_12 = sigma^2 <y_1, y_2> + mlp_sigma^2
khat(rho)`. With `mlp='none'` this is spec §5 (`tokensde.theory.two_tokens`).

This module gives `coefficients` (b, a), `p_first` (probability of reaching `-1 + tol` before
`1 - tol`), the boundary classification (`boundaries`, `antipodal_reachable`, the power of `tol`
at which `p_first` vanishes) and `monte_carlo_first` (Euler paths of the angle `arccos rho`, for
checks): each asks the coefficient object `coefficients._MLPPair` and the first-passage engine
`tokensde.theory.first_passage`. numpy and scipy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model.checks import _real_array, _require
from . import first_passage as fp
from .coefficients import Boundaries, _complement_kernel, _MLPPair, kernel_constants
from .first_passage import TOL_MIN, FirstExit

_ArrayLike = float | np.ndarray
__all__ = ["TOL_MIN", "Boundaries", "FirstExit", "antipodal_reachable", "boundaries",
           "coefficients", "kernel_constants", "log_p_first", "monte_carlo_first", "p_first",
           "p_first_from", "p_first_limit"]


def coefficients(rho: _ArrayLike, beta: float, d: float, sigma: float = 1.0, mlp: str = "none",
                 mlp_sigma: float = 1.0) -> tuple[Any, Any]:
    """Drift `b = c12 (d-2+rho^2) - (d-1) c11 rho` and `a = (1-rho^2)(2 c11 - 2 rho c12)` of rho."""
    m = _MLPPair(beta, d, sigma, mlp, mlp_sigma)
    r = _real_array("rho", rho)
    _require(bool(np.all(np.isfinite(r) & (np.abs(r) <= 1))), "rho", "numbers in [-1, 1]", rho)
    flat = np.atleast_1d(r).ravel()
    v, w = 1.0 + flat, 1.0 - flat
    k = _complement_kernel(m.mlp, v, w) if m.mu2 > 0 else None
    b1, b0, d1, d0 = m.pieces(v, w, k)
    vw = v * w
    b, a = vw * b1 + b0, vw * (vw * d1 + d0)
    if r.ndim == 0:
        return float(b[0]), float(a[0])
    return b.reshape(r.shape), a.reshape(r.shape)


def boundaries(beta: float, d: float, sigma: float = 1.0, mlp: str = "none",
               mlp_sigma: float = 1.0) -> Boundaries:
    """Exponents `alpha_-+` of `S'` at the endpoints and the resulting `tol` rate of `p_first`
    (`MLPPair.boundaries`)."""
    return _MLPPair(beta, d, sigma, mlp, mlp_sigma).boundaries()


def antipodal_reachable(d: float, mlp: str = "none", mlp_sigma: float = 1.0) -> bool:
    """`rho = -1` is hit in finite time with positive probability: MLP noise and `d < 3`."""
    return boundaries(0.0, d, 1.0, mlp, mlp_sigma).antipodal_reachable


def log_p_first(beta: _ArrayLike, d: _ArrayLike, rho0: _ArrayLike, tol: _ArrayLike,
                sigma: float = 1.0, mlp: str = "none", mlp_sigma: float = 1.0) -> Any:
    """`log P(rho hits -1+tol before 1-tol | rho0)` (exact to ~1e-9 even when P underflows)."""
    shaped = np.broadcast_arrays(*(_real_array(k, x) for k, x in
                                   (("beta", beta), ("d", d), ("rho0", rho0), ("tol", tol))))
    shape = shaped[0].shape
    out = np.empty(shape)
    for i in np.ndindex(shape):
        b, dd, r, t = (float(x[i]) for x in shaped)
        m = _MLPPair(b, dd, sigma, mlp, mlp_sigma)
        _require(TOL_MIN <= t < 1.0, "tol", f"a number in [{TOL_MIN:g}, 1)", t)
        _require(-1.0 <= r <= 1.0, "rho0", "a number in [-1, 1]", r)
        out[i] = fp.log_hitting_probability(m, r, t)
    return out.item() if out.ndim == 0 else out


def p_first(beta: _ArrayLike, d: _ArrayLike, rho0: _ArrayLike, tol: _ArrayLike, sigma: float = 1.0,
            mlp: str = "none", mlp_sigma: float = 1.0) -> Any:
    """`P = (S(1-tol) - S(rho0)) / (S(1-tol) - S(-1+tol))`, `S' = exp(-int_0 2b/a)`; broadcasts."""
    out = np.exp(np.asarray(log_p_first(beta, d, rho0, tol, sigma, mlp, mlp_sigma)))
    return out.item() if out.ndim == 0 else out


def monte_carlo_first(beta: float, d: float, rho0: float, tol: float, *, sigma: float = 1.0,
                      mlp: str = "none", mlp_sigma: float = 1.0, runs: int = 4000,
                      dt: float = 1e-3, t_max: float = 50.0, seed: int = 0,
                      kappa: float = 0.05) -> FirstExit:
    """Euler paths of `theta = arccos rho` until a barrier (`first_passage.angle_first_exit`)."""
    return fp.angle_first_exit(_MLPPair(beta, d, sigma, mlp, mlp_sigma), rho0, tol, runs=runs,
                               dt=dt, t_max=t_max, seed=seed, kappa=kappa)


def p_first_from(beta: float, d: float, rho0: float | str, tol: float, mlp: str = "none",
                 mlp_sigma: float = 1.0, sigma: float = 1.0) -> float:
    """`p_first` from `rho0`, or for a uniform pair (`rho0 = 'uniform'`)."""
    _require(TOL_MIN <= tol < 1.0, "tol", f"a number in [{TOL_MIN:g}, 1)", tol)
    return fp.hitting_probability(_MLPPair(beta, d, sigma, mlp, mlp_sigma), rho0, tol)


def p_first_limit(beta: float, d: float, rho0: float | str, mlp: str = "none",
                  mlp_sigma: float = 1.0, sigma: float = 1.0) -> float:
    """`lim_{tol -> 0} p_first`: `two_tokens.p_anti` without a block; with one, 0 for `d >= 3`
    (`-1` is never reached)."""
    return fp.hitting_probability(_MLPPair(beta, d, sigma, mlp, mlp_sigma), rho0, 0.0)
