"""Two tokens with GOE query/key forms redrawn every layer (docs/variants.md §3): exact theory.

With forms `A = I + s R` drawn afresh every layer from the GOE, the depth limit averages the
attention over the law (docs/variants.md §3), and since the GOE is rotation invariant the averaged
coefficients depend on the pair only through `rho = <x_1, x_2>`: `rho` is an autonomous diffusion
again. Token 1 puts the weight `p = logistic(D_1)` on itself and token 2 `p' = logistic(D_2)`, with
`D_i = beta (<x_i, A x_i> - <x_1, A x_2>)`. For the GOE (`Cov(<a,Rb>, <c,Re>) = <a,c><b,e> +
<a,e><b,c>`) these are jointly Gaussian, and with `w = 1 - rho`, `v = 1 + rho`, `U, E` independent
standard normals,

    D_1, D_2 = m +- delta,   m = beta w (1 + s sqrt(2) U),   delta = beta s sqrt(w v) E.

In `z = artanh rho`, with `P = E[p p' + q q']`, `pq = E[p q]` (`q = 1 - p`) and
`V = E[(p - p')^2] / v = (beta s)^2 w E[E^2 (sinh(delta)/delta)^2 / (cosh m + cosh delta)^2]`,

    dz = sigma^2 [(d - 3)(V + 2 pq) + 1 - w P] dt + sigma sqrt(2 (P + V)) dB.

(`c_11 = sigma^2 (1 - 2 w pq)` and `c_12 = sigma^2 (1 - w P)` are the averaged `|y_1|^2` and
`<y_1, y_2>`; `E[(p - q)(p - p')] = E[(p - p')^2]` by the symmetry `E -> -E`, which removes the
cancellations at both ends.) At `s = 0` this is the spec model's `dz = sigma^2 ((d - 2) m +
s rho) dt + sigma sqrt(2 s) dB` (tested). Expectations by a trapezoid rule in `U` (fine
enough for the logistic's step) and Gauss-Hermite in `E`, on a coarse grid in `z`, interpolated.
numpy and scipy only.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special
from scipy.interpolate import CubicSpline

from ..model.checks import check_real
from .decision_time import check_first_passage, first_passage

NODES = 40  # Gauss-Hermite nodes in E (delta has a spread of at most beta s)
U_SPAN = 9.5  # the U integral is a trapezoid rule on [-U_SPAN, U_SPAN] (Gaussian weight)
U_STEP = 0.2  # ... with m moving by at most this much between nodes (the logistic's scale is 1)
COARSE = 401  # z nodes where the coefficients are computed (then interpolated, cubic)
CHUNK = 64  # z values per block of the quadrature
_X, _W = np.polynomial.hermite_e.hermegauss(NODES)
_W = _W / _W.sum()


def _u_rule(beta: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Trapezoid nodes and weights for `E f(U)`, fine enough for `m = beta w (1 + s sqrt 2 U)`,
    `w <= 2`: a logistic of m is a near-step in U when `beta s` is large, which Gauss-Hermite
    resolves badly."""
    slope = 2.0 * beta * scale * math.sqrt(2.0)
    n = int(min(4001, max(129, math.ceil(2 * U_SPAN * slope / U_STEP) + 1)))
    u = np.linspace(-U_SPAN, U_SPAN, n)
    w = np.exp(-0.5 * u * u)
    return u, w / w.sum()


def forms_z_coefficients(z: np.ndarray, beta: float, d: float, scale: float, sigma: float = 1.0
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Drift and noise of `dz`, `z = artanh rho`, for GOE forms of scale `scale` redrawn every
    layer (the formula of the module docstring)."""
    z = np.asarray(z, dtype=float)
    a, b = np.empty_like(z), np.empty_like(z)
    un, uw = _u_rule(beta, scale)
    u, e = un[:, None], _X[None, :]
    ww = uw[:, None] * _W[None, :]
    for lo in range(0, z.size, CHUNK):
        zz = z.ravel()[lo:lo + CHUNK, None, None]
        w = 2.0 / (1.0 + np.exp(np.minimum(2.0 * zz, 700.0)))  # 1 - rho, exact near rho = 1
        v = 2.0 / (1.0 + np.exp(np.minimum(-2.0 * zz, 700.0)))  # 1 + rho, exact near rho = -1
        m = beta * w * (1.0 + scale * math.sqrt(2.0) * u)
        delta = beta * scale * np.sqrt(w * v) * e
        p, q = special.expit(m + delta), special.expit(-m - delta)
        pp, qq = special.expit(m - delta), special.expit(delta - m)
        big_p = ((p * pp + q * qq) * ww).sum((-2, -1))
        pq = ((p * q) * ww).sum((-2, -1))
        sinhc = np.where(delta == 0.0, 1.0, np.sinh(delta) / np.where(delta == 0.0, 1.0, delta))
        ratio = sinhc / (np.cosh(np.minimum(np.abs(m), 700.0)) + np.cosh(delta))
        var = (beta * scale) ** 2 * w[..., 0, 0] * ((e * e * ratio * ratio) * ww).sum((-2, -1))
        k = slice(lo, lo + zz.shape[0])
        a.ravel()[k] = sigma**2 * ((d - 3.0) * (var + 2.0 * pq) + 1.0 - w[..., 0, 0] * big_p)
        b.ravel()[k] = sigma * np.sqrt(2.0 * (big_p + var))
    return a, b


def p_first_forms(beta: float, d: float, rho0: float | str, tol: float, scale: float,
                  sigma: float = 1.0, nodes: int | None = None) -> float:
    """`P(rho reaches -1 + tol before 1 - tol)` for GOE forms of scale `scale` redrawn every
    layer, from `rho0` or a uniform pair (`absorption.first_passage`)."""
    b, dd, t, sg = check_first_passage(beta, d, tol, sigma)
    s = check_real("qk_scale", scale, 0.0)
    return first_passage(lambda z: _interpolated(z, b, dd, s, sg), dd, rho0, t, nodes)


def _interpolated(z: np.ndarray, beta: float, d: float, scale: float, sigma: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The coefficients on `COARSE` nodes spanning `z`, interpolated by cubic splines (they are
    smooth and bounded in z, and constant far from 0)."""
    grid = np.linspace(float(z.min()), float(z.max()), COARSE)
    a, b = forms_z_coefficients(grid, beta, d, scale, sigma)
    return CubicSpline(grid, a)(z), CubicSpline(grid, b)(z)
