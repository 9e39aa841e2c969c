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
`1 - tol`, scale-function quadrature in log-distance variables), the boundary classification
(`boundaries`, `antipodal_reachable`, the power of `tol` at which `p_first` vanishes) and
`monte_carlo_first` (Euler paths of the angle `arccos rho`, for checks). numpy and scipy only.

Quadrature. With `f = 2b/a`, `S' = exp(L)`, `L(rho) = -int_0^rho f`. Each half of [-1, 1] is
mapped to `t = log e`, `e` the distance to its endpoint, over `[log tol, 0]`; there `dL/dt` is
bounded (it tends to the endpoint exponent) and smooth. `dL/dt` is interpolated on Chebyshev
panels and integrated exactly, so `L` is a polynomial on each panel; `exp(L + t)` is then summed
by Gauss rules on sub-panels as narrow as `1/|d(L + t)/dt|`, only where it is within `e^-60` of
its maximum. All sums are kept in logarithms, so `tol` down to 1e-300, large `beta` and large `d`
neither overflow nor lose the relative accuracy of a tiny probability.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np
from numpy.polynomial import chebyshev as cheb
from scipy import special

from ..model.checks import check_real, require
from ..model.mlp import MLPS

ArrayLike = float | np.ndarray

TOL_MIN = 1e-300  # smallest tol: distances to the endpoints stay normal floats

# ---------------------------------------------------------------------------------------------
# The kernel of the MLP noise
# ---------------------------------------------------------------------------------------------

def _one_minus_khat_near_one(mlp: str, w: np.ndarray) -> np.ndarray:
    """`1 - khat(1 - w)`, accurate for small `w` (`Activation.complement`)."""
    return MLPS.get(mlp)().complement(np.asarray(w, dtype=float))


@cache
def kernel_constants(mlp: str) -> tuple[float, float]:
    """`(khat(-1), khat'(1))` of the activation `mlp` (`khat'(1) = E phi'^2 / E phi^2`)."""
    MLPS.check(mlp)
    act = MLPS.get(mlp)()
    if not act.active:
        return 0.0, 0.0
    return float(act.kernel(np.array(-1.0))), act.slope_at_one()


# ---------------------------------------------------------------------------------------------
# Coefficients
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Model:
    """Checked scalars: `beta`, `d`, `sigma^2`, `mlp_sigma^2` (0 when there is no block), `mlp`."""

    beta: float
    d: float
    s2: float
    m2: float
    mlp: str

    @classmethod
    def make(cls, beta: float, d: float, sigma: float, mlp: str, mlp_sigma: float) -> _Model:
        mlp = MLPS.check(mlp)
        sigma = check_real("sigma", sigma)
        mlp_sigma = check_real("mlp_sigma", mlp_sigma)
        active = MLPS.get(mlp).active and mlp_sigma > 0
        m2 = mlp_sigma**2 if active else 0.0
        require(sigma > 0 or m2 > 0, "sigma", "> 0 when there is no MLP noise", sigma)
        require(m2 == 0 or kernel_constants(mlp)[0] > -1.0, "mlp",
                "an activation with khat(-1) > -1 (not odd)", mlp)
        return cls(check_real("beta", beta), check_real("d", d, 2.0), sigma**2, m2, mlp)


def _pieces(m: _Model, v: np.ndarray, w: np.ndarray, khat_c: np.ndarray | None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`(b1, b0, D1, D0)` with `b = v w b1 + b0`, `a = v w (v w D1 + D0)`, `v = 1+rho, w = 1-rho`.

    Attention: `b1 = sigma^2 ((d-3) m + (w - (1 - sech)) s)`, `D1 = 2 sigma^2 s` (`s = 1/(1 +
    sech)`, `m = s sech`, `sech = sech(beta w)`). MLP: `b0 = mu^2 (w (d-3+w) - K (d-1-vw))`,
    `D0 = 2 mu^2 (w + (1-w) K)` with `K = 1 - khat(rho)` (`khat_c`).
    """
    ex = np.exp(-m.beta * w)
    den = 1.0 + ex * ex
    sech = 2.0 * ex / den
    one_minus_sech = np.expm1(-m.beta * w) ** 2 / den
    s = 1.0 / (1.0 + sech)
    b1 = m.s2 * ((m.d - 3.0) * sech * s + (w - one_minus_sech) * s)
    d1 = 2.0 * m.s2 * s
    if khat_c is None or m.m2 == 0:
        zero = np.zeros_like(b1)
        return b1, zero, d1, zero
    b0 = m.m2 * (w * (m.d - 3.0 + w) - khat_c * (m.d - 1.0 - v * w))
    d0 = 2.0 * m.m2 * (w + (1.0 - w) * khat_c)
    return b1, b0, d1, d0


def _complement_kernel(mlp: str, rho: np.ndarray) -> np.ndarray:
    """`1 - khat(rho)`, accurate near rho = 1."""
    out = 1.0 - MLPS.get(mlp)().kernel(rho)
    right = rho > 0.5
    out[right] = _one_minus_khat_near_one(mlp, 1.0 - rho[right])
    return out


def coefficients(rho: ArrayLike, beta: float, d: float, sigma: float = 1.0, mlp: str = "none",
                 mlp_sigma: float = 1.0) -> tuple[Any, Any]:
    """Drift `b = c12 (d-2+rho^2) - (d-1) c11 rho` and `a = (1-rho^2)(2 c11 - 2 rho c12)` of rho."""
    m = _Model.make(beta, d, sigma, mlp, mlp_sigma)
    r = np.asarray(rho, dtype=float)
    require(bool(np.all(np.isfinite(r) & (np.abs(r) <= 1))), "rho", "numbers in [-1, 1]", rho)
    flat = np.atleast_1d(r).ravel()
    v, w = 1.0 + flat, 1.0 - flat
    k = _complement_kernel(m.mlp, flat) if m.m2 > 0 else None
    b1, b0, d1, d0 = _pieces(m, v, w, k)
    vw = v * w
    b, a = vw * b1 + b0, vw * (vw * d1 + d0)
    if r.ndim == 0:
        return float(b[0]), float(a[0])
    return b.reshape(r.shape), a.reshape(r.shape)


# ---------------------------------------------------------------------------------------------
# Boundary classification
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Boundaries:
    """Feller classification of `rho = -1` (antipodal) and `rho = +1` (merged).

    `S' ~ (1 + rho)^(-alpha_minus)` at -1 and `(1 - rho)^(-alpha_plus)` at +1. An endpoint with
    `alpha < 1` is one that `p_first` keeps a positive share of as `tol -> 0`: it attracts with
    positive probability. `-1` is *reached* in finite time (a regular boundary, Bessel-squared of
    dimension `d - 1`) only with MLP noise and `d < 3`; otherwise both endpoints are natural or
    entrance boundaries. `tol_power`: `p_first ~ tol^tol_power` as `tol -> 0` (0: a positive
    limit, or a `1/log(1/tol)` decay when `log_rate`).
    """

    alpha_minus: float
    alpha_plus: float
    antipodal_reachable: bool
    tol_power: float
    log_rate: bool

    @property
    def antipodal_attracts(self) -> bool:
        """`S'` integrable at -1 (`alpha_- < 1`): `lim_{tol->0} p_first > 0` from every start."""
        return self.alpha_minus < 1.0

    @property
    def merged_attracts(self) -> bool:
        """`log(1 - rho)` has a negative exponent at `rho = 1` (`alpha_+ < 1`)."""
        return self.alpha_plus < 1.0

    @property
    def limit_positive(self) -> bool:
        """`lim_{tol->0} p_first > 0` (also when both ends repel and -1 repels less)."""
        return self.tol_power == 0 and not self.log_rate


def boundaries(beta: float, d: float, sigma: float = 1.0, mlp: str = "none",
               mlp_sigma: float = 1.0) -> Boundaries:
    """Exponents `alpha_-+` of `S'` at the endpoints and the resulting `tol` rate of `p_first`.

    MLP: `alpha_- = (d-1)/2` (b -> mu^2 (d-1)(1+khat(-1)), a ~ 4 mu^2 (1+khat(-1)) u);
    none: `1/2 + (d-2)/(2 cosh 2beta)`. `alpha_+ = -2 B / A` with `b ~ B (1-rho)`,
    `a ~ A (1-rho)^2`: `B = sigma^2 (d-3) + mu^2 ((d-3) - k1 (d-1))`, `A = 4 sigma^2 + 4 mu^2
    (1 + k1)`, `k1 = khat'(1)`.
    """
    m = _Model.make(beta, d, sigma, mlp, mlp_sigma)
    k1 = kernel_constants(m.mlp)[1] if m.m2 > 0 else 0.0
    spec = 0.5 + 0.5 * (m.d - 2.0) / math.cosh(min(2.0 * m.beta, 700.0))
    alpha_m = 0.5 * (m.d - 1.0) if m.m2 > 0 else spec
    big_b = m.s2 * (m.d - 3.0) + m.m2 * ((m.d - 3.0) - k1 * (m.d - 1.0))
    alpha_p = -2.0 * big_b / (4.0 * m.s2 + 4.0 * m.m2 * (1.0 + k1))
    # the mass of S' within tol of an endpoint diverges like tol^(1 - alpha) when alpha > 1
    grow_m, grow_p = max(alpha_m - 1.0, 0.0), max(alpha_p - 1.0, 0.0)
    power = max(grow_m - grow_p, 0.0)
    log_rate = alpha_m == 1.0 and alpha_p < 1.0
    return Boundaries(alpha_m, alpha_p, bool(m.m2 > 0 and m.d < 3.0), power, log_rate)


def antipodal_reachable(d: float, mlp: str = "none", mlp_sigma: float = 1.0) -> bool:
    """`rho = -1` is hit in finite time with positive probability: MLP noise and `d < 3`."""
    return boundaries(0.0, d, 1.0, mlp, mlp_sigma).antipodal_reachable


# ---------------------------------------------------------------------------------------------
# p_first: scale-function quadrature in t = log(distance to the endpoint)
# ---------------------------------------------------------------------------------------------

_N = 16  # Chebyshev-Lobatto degree on each panel
PANEL = 0.5  # panel width in t
_X = -np.cos(np.pi * np.arange(_N + 1) / _N)  # ascending on [-1, 1]
_TO_COEF = np.linalg.inv(cheb.chebvander(_X, _N))
_ANTI = np.stack([cheb.chebint(col, lbnd=-1) for col in np.eye(_N + 1)], axis=1)
_VALUES_TO_ANTI = _ANTI @ _TO_COEF  # node values -> coefficients of int_{-1}^x
_AT_NODES = cheb.chebvander(_X, _N + 1)
_GX, _GW = np.polynomial.legendre.leggauss(10)
_LOG_GW = np.log(_GW)
MARGIN = 60.0  # panels whose log-integrand stays this far below the maximum are left out


@dataclass(frozen=True)
class _Side:
    """Panels over `t in [log tol, 0]` on one half; `split`: first panel after `t0` (or P)."""

    edges: np.ndarray
    split: int
    e: np.ndarray  # (P, N+1) distances to the endpoint at the nodes

    @property
    def half(self) -> np.ndarray:
        return 0.5 * np.diff(self.edges)

    @property
    def mid(self) -> np.ndarray:
        return 0.5 * (self.edges[1:] + self.edges[:-1])


def _side(log_tol: float, t0: float | None) -> _Side:
    n = max(1, math.ceil(-log_tol / PANEL))
    edges = np.linspace(log_tol, 0.0, n + 1)
    split = n
    if t0 is not None:
        edges = np.unique(np.append(edges, t0))
        split = int(np.searchsorted(edges, t0))
    half, mid = 0.5 * np.diff(edges), 0.5 * (edges[1:] + edges[:-1])
    return _Side(edges, split, np.exp(mid[:, None] + half[:, None] * _X))


@lru_cache(maxsize=64)
def _grid(tol: float, rho0: float) -> tuple[_Side, _Side]:
    """The two halves; `rho0` is a panel edge on its half (left for rho0 <= 0)."""
    log_tol = math.log(tol)
    if rho0 <= 0:
        return _side(log_tol, math.log1p(rho0)), _side(log_tol, None)
    return _side(log_tol, None), _side(log_tol, math.log1p(-rho0))


@lru_cache(maxsize=64)
def _grid_kernel(tol: float, rho0: float, mlp: str) -> tuple[np.ndarray, np.ndarray]:
    """`1 - khat` at the nodes of both halves."""
    left, right = _grid(tol, rho0)
    k_left = 1.0 - MLPS.get(mlp)().kernel(-1.0 + left.e)
    return k_left, _one_minus_khat_near_one(mlp, right.e)


def _clenshaw(c: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Chebyshev series with coefficients `c` `(S, K)` at points `x` `(S, g)`."""
    b1 = np.zeros_like(x)
    b2 = np.zeros_like(x)
    for k in range(c.shape[1] - 1, 0, -1):
        b1, b2 = c[:, k, None] + 2.0 * x * b1 - b2, b1
    return c[:, 0, None] + x * b1 - b2


def _log_halves(side: _Side, grad: np.ndarray) -> tuple[float, float]:
    """`log int exp(L + t) dt` below and above `t0`, given `grad = -dL/dt` at the nodes."""
    half, mid = side.half, side.mid
    anti = (grad @ _VALUES_TO_ANTI.T) * half[:, None]
    total = anti.sum(axis=1)
    after = np.cumsum(total[::-1])[::-1] - total  # L at each panel's right edge
    c = -anti
    c[:, 0] += after + total + mid
    c[:, 1] += half
    phi = c @ _AT_NODES.T
    slope = np.abs(1.0 - grad).max(axis=1)
    out = []
    for lo, hi in ((0, side.split), (side.split, len(half))):
        if lo == hi:
            out.append(-math.inf)
            continue
        top = phi[lo:hi].max()
        reach = phi[lo:hi].max(axis=1) + slope[lo:hi] * half[lo:hi] * (math.pi / _N)
        act = lo + np.nonzero(reach > top - MARGIN)[0]
        pieces = np.maximum(1, np.ceil(2.0 * half[act] * slope[act])).astype(int)
        idx = np.repeat(act, pieces)
        count = np.repeat(pieces, pieces)
        sub = np.arange(idx.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        x = -1.0 + (2.0 * sub[:, None] + 1.0 + _GX) / count[:, None]
        vals = _clenshaw(c[idx], x) + _LOG_GW + np.log(half[idx] / count)[:, None]
        out.append(float(special.logsumexp(vals)))
    return out[0], out[1]


def _grads(m: _Model, left: _Side, right: _Side, kern: tuple[np.ndarray, np.ndarray] | None
           ) -> tuple[np.ndarray, np.ndarray]:
    """`-dL/dt` at the nodes: `f v` on the left half, `-f w` on the right (`f = 2b/a`)."""
    out = []
    for side, sign, k in ((left, 1.0, None if kern is None else kern[0]),
                          (right, -1.0, None if kern is None else kern[1])):
        e, other = side.e, 2.0 - side.e
        v, w = (e, other) if sign > 0 else (other, e)
        b1, b0, d1, d0 = _pieces(m, v, w, k)
        if k is None:
            g = 2.0 * b1 / (other * d1)  # the factor v w cancels exactly
        else:
            vw = v * w
            g = 2.0 * (vw * b1 + b0) / (other * (vw * d1 + d0))
        out.append(sign * g)
    return out[0], out[1]


def _log_p_point(m: _Model, rho0: float, tol: float) -> float:
    left, right = _grid(tol, rho0)
    kern = _grid_kernel(tol, rho0, m.mlp) if m.m2 > 0 else None
    gl, gr = _grads(m, left, right, kern)
    l_lo, l_hi = _log_halves(left, gl)
    r_lo, r_hi = _log_halves(right, gr)
    if rho0 <= 0:  # numerator: [rho0, 0] and the whole right half
        num = np.logaddexp(l_hi, r_lo)
        z = np.logaddexp(l_lo, num)
    else:  # numerator: [rho0, 1 - tol]
        num = r_lo
        z = np.logaddexp(np.logaddexp(l_lo, l_hi), np.logaddexp(r_lo, r_hi))
    return float(num - z)


def log_p_first(beta: ArrayLike, d: ArrayLike, rho0: ArrayLike, tol: ArrayLike,
                sigma: float = 1.0, mlp: str = "none", mlp_sigma: float = 1.0) -> Any:
    """`log P(rho hits -1+tol before 1-tol | rho0)` (exact to ~1e-9 even when P underflows)."""
    shaped = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (beta, d, rho0, tol)))
    shape = shaped[0].shape
    out = np.empty(shape)
    for i in np.ndindex(shape):
        b, dd, r, t = (float(x[i]) for x in shaped)
        m = _Model.make(b, dd, sigma, mlp, mlp_sigma)
        require(TOL_MIN <= t < 1.0, "tol", f"a number in [{TOL_MIN:g}, 1)", t)
        require(-1.0 <= r <= 1.0, "rho0", "a number in [-1, 1]", r)
        plus, minus = 1.0 + r, 1.0 - r  # distances to the endpoints
        if plus <= t:
            out[i] = 0.0
        elif minus <= t:
            out[i] = -math.inf
        else:
            out[i] = _log_p_point(m, r, t)
    return out.item() if out.ndim == 0 else out


def p_first(beta: ArrayLike, d: ArrayLike, rho0: ArrayLike, tol: ArrayLike, sigma: float = 1.0,
            mlp: str = "none", mlp_sigma: float = 1.0) -> Any:
    """`P = (S(1-tol) - S(rho0)) / (S(1-tol) - S(-1+tol))`, `S' = exp(-int_0 2b/a)`; broadcasts."""
    out = np.exp(np.asarray(log_p_first(beta, d, rho0, tol, sigma, mlp, mlp_sigma)))
    return out.item() if out.ndim == 0 else out


# ---------------------------------------------------------------------------------------------
# Monte Carlo of the 1-D diffusion, in the angle theta = arccos(rho)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstExit:
    """Monte Carlo outcome: fractions of paths first at `-1 + tol`, at `1 - tol`, and neither."""

    antipodal: float
    merged: float
    undecided: float
    runs: int


def monte_carlo_first(beta: float, d: float, rho0: float, tol: float, *, sigma: float = 1.0,
                      mlp: str = "none", mlp_sigma: float = 1.0, runs: int = 4000,
                      dt: float = 1e-3, t_max: float = 50.0, seed: int = 0,
                      kappa: float = 0.05) -> FirstExit:
    """Euler paths of `theta = arccos rho`: `dtheta = -(b/sin + cos a/(2 sin^3)) dt - sqrt(a)/sin dB`.

    The noise `sqrt(a)/sin(theta) = sqrt(c_11 + c_22 - 2 rho c_12)` is bounded. Each path steps by
    `h = min(dt, kappa g^2 / noise^2)`, `g = min(theta, pi - theta)`, so that the Bessel-like drift
    `~ 1/(pi - theta)` of the MLP noise near `rho = -1` is resolved. A crossing of either barrier
    between two steps is drawn with the Brownian-bridge probability `exp(-2 g_0 g_1 / (noise^2 h))`
    (`g_0, g_1` the distances to the barrier), which removes the `sqrt(h)` bias of watching the
    barriers only at the steps. `khat` is tabulated; paths still inside at `t_max` are undecided.
    """
    m = _Model.make(beta, d, sigma, mlp, mlp_sigma)
    require(0.0 < tol < 1.0, "tol", "a number in (0, 1)", tol)
    require(-1.0 < rho0 < 1.0, "rho0", "a number in (-1, 1)", rho0)
    grid = np.linspace(-1.0, 1.0, 8193)
    table = 1.0 - MLPS.get(m.mlp)().kernel(grid)
    low = 2.0 * math.asin(math.sqrt(0.5 * tol))  # theta of rho = 1 - tol
    high = math.pi - low  # theta of rho = -1 + tol
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
    theta = np.full(runs, math.acos(rho0))
    clock = np.zeros(runs)
    anti = merged = 0
    while theta.size:
        half = 0.5 * theta
        v, w = 2.0 * np.cos(half) ** 2, 2.0 * np.sin(half) ** 2
        rho, sin = np.cos(theta), np.sin(theta)
        k = np.interp(rho, grid, table) if m.m2 > 0 else None
        b1, b0, d1, d0 = _pieces(m, v, w, k)
        var = v * w * d1 + d0  # a / sin^2, the squared noise of theta
        drift = -(v * w * b1 + b0) / sin - 0.5 * rho * var / sin
        h = np.minimum(dt, kappa * np.minimum(theta, math.pi - theta) ** 2 / var)
        new = theta + drift * h + np.sqrt(var * h) * rng.standard_normal(theta.size)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            cross_hi = np.exp(-2.0 * (high - theta) * np.maximum(high - new, 0.0) / (var * h))
            cross_lo = np.exp(-2.0 * (theta - low) * np.maximum(new - low, 0.0) / (var * h))
        u = rng.random((2, theta.size))
        hit_hi = u[0] < cross_hi
        hit_lo = ~hit_hi & (u[1] < cross_lo)
        anti += int(hit_hi.sum())
        merged += int(hit_lo.sum())
        clock = clock + h
        keep = ~(hit_hi | hit_lo) & (clock < t_max)
        theta, clock = new[keep], clock[keep]
    undecided = runs - anti - merged
    return FirstExit(anti / runs, merged / runs, undecided / runs, runs)


# ---------------------------------------------------------------------------------------------
# Starts: a fixed rho0 or a uniformly random pair
# ---------------------------------------------------------------------------------------------

UNIFORM_NODES = 48  # Gauss-Jacobi nodes for the law of rho0 of a uniform pair


def _uniform_average(f: Callable[[np.ndarray], np.ndarray], d: float) -> float:
    """`E f(rho0)` for `rho0 = <x_1, x_2>` of a uniform pair: density `~ (1 - r^2)^((d-3)/2)`."""
    a = 0.5 * (d - 3.0)
    r, w = special.roots_jacobi(UNIFORM_NODES, a, a)
    return float(np.dot(w, f(r)) / w.sum())


def p_first_from(beta: float, d: float, rho0: float | str, tol: float, mlp: str = "none",
                 mlp_sigma: float = 1.0, sigma: float = 1.0) -> float:
    """`p_first` from `rho0`, or averaged over a uniform pair (`rho0 = 'uniform'`)."""
    if isinstance(rho0, str):
        return _uniform_average(lambda r: p_first(beta, d, r, tol, sigma, mlp, mlp_sigma), d)
    return float(p_first(beta, d, rho0, tol, sigma, mlp, mlp_sigma))


def p_first_limit(beta: float, d: float, rho0: float | str, mlp: str = "none",
                  mlp_sigma: float = 1.0, sigma: float = 1.0) -> float:
    """`lim_{tol -> 0} p_first`: the absorbing `two_tokens.p_anti` without a block; with one, 0
    for `d >= 3` (`-1` is never reached), else `p_first` at the smallest tolerance."""
    bd = boundaries(beta, d, sigma, mlp, mlp_sigma)
    if _Model.make(beta, d, sigma, mlp, mlp_sigma).m2 == 0:
        from .two_tokens import p_anti, p_anti_uniform

        return float(p_anti_uniform(beta, d) if isinstance(rho0, str) else p_anti(beta, d, rho0))
    if not bd.limit_positive:
        return 0.0
    return p_first_from(beta, d, rho0, TOL_MIN, mlp, mlp_sigma, sigma)
