"""The first-passage engine of the two-token `rho` diffusion: solvers that take any variant.

Every function here takes a coefficient object of `tokensde.theory.coefficients` (`SpecPair`,
`HybridPair`, `RedrawnForms`, `MLPPair`, or any `RhoDiffusion`):

- `hitting_probability(model, rho0, tol)`: `P(rho reaches -1 + tol before 1 - tol)`, from `rho0`
  or a uniformly random pair; `tol = 0` is the limit `tol -> 0` (the spec's `P_anti`);
  `log_hitting_probability` keeps its relative accuracy where it underflows;
- `RhoPaths`, `initial_rho`: the paths of `z = artanh rho` and their start (the 1-D Monte Carlo,
  `tokensde.sim.reduced.z_paths`, steps them through the run core);
- `angle_first_exit`: Euler paths of the angle `arccos rho` until one barrier, with
  Brownian-bridge crossings (for variants whose `z` noise is unbounded, as with the MLP block).

The decision-time law (`P(tau > t)`, its rate) is in `tokensde.theory.decision_time`, on the
same objects. numpy and scipy only.

Quadrature. The hitting probability is a ratio of integrals of the scale density `S' = exp(L)`,
`L(rho) = -int_0^rho 2b/a`. Each half of [-1, 1] is mapped to `t = log e`, `e` the distance to
its endpoint, over `[log tol, 0]`; there `dL/dt` (`scale_slope`) is bounded (it tends to the
endpoint's power `alpha`) and smooth. It is interpolated on Chebyshev panels of width `_PANEL` and
integrated exactly, so `L` is a polynomial on each panel; `exp(L + t)` (times a weight: the
distribution function of `rho_0` for a uniform start) is then summed by Gauss rules on sub-panels
as narrow as `1/|d(L + t)/dt|`, only where it is within `e^-MARGIN` of its maximum. For
`tol = 0` the panels stop at `E_LIMIT` and the rest of each end is the exact integral of
`e^{(1 - alpha) t}`. All sums are kept in logarithms, so tiny tolerances, large `beta` and large
`d` neither overflow nor lose the relative accuracy of a tiny probability.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.polynomial import chebyshev as cheb
from scipy import special

from ..model.checks import ParameterError, _check_real
from .coefficients import RhoDiffusion, _complement_kernel, _MLPPair

PAIR_TOL = 1e-8  # default tolerance at which a pair counts as decided (1 - |rho| < tol)
TOL_MIN = 1e-300  # smallest tol > 0: distances to the endpoints stay normal floats
E_LIMIT = 1e-16  # tol = 0: panels down to this distance, the rest of each end in closed form
D_MAX = 1e9  # largest d of the quadrature: rounding in L grows like d (relative error ~ d 1e-15)

_N = 16  # Chebyshev-Lobatto degree on each panel
_PANEL = 0.5  # panel width in t
_X = -np.cos(np.pi * np.arange(_N + 1) / _N)  # ascending on [-1, 1]
_TO_COEF = np.linalg.inv(cheb.chebvander(_X, _N))
_ANTI = np.stack([cheb.chebint(col, lbnd=-1) for col in np.eye(_N + 1)], axis=1)
_VALUES_TO_ANTI = _ANTI @ _TO_COEF  # node values -> coefficients of int_{-1}^x
_AT_NODES = cheb.chebvander(_X, _N + 1)
_GX, _GW = np.polynomial.legendre.leggauss(10)
_LOG_GW = np.log(_GW)
_MARGIN = 60.0  # panels whose log-integrand stays this far below the maximum are left out
_CAP = 256  # most sub-panels on one panel; a steeper panel is cut to its window (`_window`)
_WINDOW_POINTS = 1025  # samples of a steep panel per refinement of its window

_LogWeight = Callable[[np.ndarray], np.ndarray]


def check_start(rho0: Any) -> float | str:
    """`rho0` as a float in [-1, 1], or the string 'uniform' (a uniform random pair)."""
    if isinstance(rho0, str) and rho0.strip().lower() == "uniform":
        return "uniform"
    try:
        r = float(rho0)
    except (TypeError, ValueError):
        r = math.nan
    if not -1.0 <= r <= 1.0:
        raise ParameterError(f"rho0 must be a number in [-1, 1] or 'uniform'; got {rho0!r}")
    return r


def check_hitting_tol(tol: Any) -> float:
    """`tol` of a hitting probability: 0 (the limit) or a number in [TOL_MIN, 1)."""
    t = _check_real("tol", tol)
    if t != 0.0 and not TOL_MIN <= t < 1.0:
        raise ParameterError(f"tol must be 0 (the limit) or a number in [{TOL_MIN:g}, 1); "
                             f"got {tol!r}")
    return t


# ---------------------------------------------------------------------------------------------
# Panels over t = log(distance to the endpoint)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Side:
    """Panels over `t in [log_lo, 0]` on one half; `split`: first panel after `t0` (or P)."""

    edges: np.ndarray
    split: int
    e: np.ndarray  # (P, N+1) distances to the endpoint at the nodes

    @property
    def half(self) -> np.ndarray:
        return 0.5 * np.diff(self.edges)

    @property
    def mid(self) -> np.ndarray:
        return 0.5 * (self.edges[1:] + self.edges[:-1])


def _side(log_lo: float, t0: float | None) -> _Side:
    n = max(1, math.ceil(-log_lo / _PANEL))
    edges = np.linspace(log_lo, 0.0, n + 1)
    split = n
    if t0 is not None:
        edges = np.unique(np.append(edges, t0))
        split = int(np.searchsorted(edges, t0))
    half, mid = 0.5 * np.diff(edges), 0.5 * (edges[1:] + edges[:-1])
    return _Side(edges, split, np.exp(mid[:, None] + half[:, None] * _X))


@lru_cache(maxsize=64)
def _grid(log_lo: float, rho0: float | None) -> tuple[_Side, _Side]:
    """The two halves; `rho0` is a panel edge on its half (left for rho0 <= 0)."""
    if rho0 is None:
        return _side(log_lo, None), _side(log_lo, None)
    if rho0 <= 0:
        return _side(log_lo, math.log1p(rho0)), _side(log_lo, None)
    return _side(log_lo, None), _side(log_lo, math.log1p(-rho0))


def _clenshaw(c: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Chebyshev series with coefficients `c` `(S, K)` at points `x` `(S, g)`."""
    b1 = np.zeros_like(x)
    b2 = np.zeros_like(x)
    for k in range(c.shape[1] - 1, 0, -1):
        b1, b2 = c[:, k, None] + 2.0 * x * b1 - b2, b1
    return c[:, 0, None] + x * b1 - b2


def _log_pieces(side: _Side, grad: np.ndarray, log_w: _LogWeight | None = None,
                tail: float | None = None) -> tuple[float, float]:
    """`log int exp(L + t) W dt` below and above `t0`, given `grad = -dL/dt` at the nodes.

    `tail`: None, or the power `k` of the weight at the endpoint (`W ~ e^k`; 0 without a
    weight): the part below `log_lo` is then added, `exp(phi(log_lo)) / (1 - alpha + k)`.
    """
    half, mid = side.half, side.mid
    anti = (grad @ _VALUES_TO_ANTI.T) * half[:, None]
    total = anti.sum(axis=1)
    after = np.cumsum(total[::-1])[::-1] - total  # L at each panel's right edge
    c = -anti
    c[:, 0] += after + total + mid
    c[:, 1] += half
    phi = c @ _AT_NODES.T
    slope = np.abs(1.0 - grad).max(axis=1)
    lw_nodes = None
    if log_w is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            lw_nodes = log_w(side.e)
            t_nodes = mid[:, None] + half[:, None] * _X
            dlw = np.abs(np.diff(lw_nodes, axis=1) / np.diff(t_nodes, axis=1))
        slope = slope + np.nan_to_num(dlw, nan=0.0, posinf=0.0).max(axis=1)
        phi = phi + lw_nodes
    slope = np.where(np.isfinite(slope), slope, 0.0)
    out = []
    for lo, hi in ((0, side.split), (side.split, len(half))):
        if lo == hi:
            out.append(-math.inf)
            continue
        top = phi[lo:hi].max()
        if not np.isfinite(top):
            out.append(-math.inf)
            continue
        reach = phi[lo:hi].max(axis=1) + slope[lo:hi] * half[lo:hi] * (math.pi / _N)
        act = lo + np.nonzero(reach > top - _MARGIN)[0]
        xa, xb = np.full(act.size, -1.0), np.ones(act.size)
        for k in np.nonzero(2.0 * half[act] * slope[act] > _CAP)[0]:
            xa[k], xb[k] = _window(c[act[k]], mid[act[k]], half[act[k]], slope[act[k]], log_w)
        pieces = np.maximum(1, np.ceil((xb - xa) * half[act] * slope[act])).astype(int)
        idx = np.repeat(np.arange(act.size), pieces)
        sub = np.arange(idx.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        width = ((xb - xa) / pieces)[idx]
        x = xa[idx, None] + width[:, None] * (sub[:, None] + 0.5 * (1.0 + _GX))
        panel = act[idx]
        vals = _clenshaw(c[panel], x) + _LOG_GW + np.log(0.5 * half[panel] * width)[:, None]
        if log_w is not None:
            with np.errstate(divide="ignore"):
                vals = vals + log_w(np.exp(mid[panel, None] + half[panel, None] * x))
        out.append(float(special.logsumexp(vals)))
    if tail is not None and side.split > 0:
        rate = 1.0 - grad[0, 0] + tail
        if rate <= 0:
            return math.inf, out[1]
        out[0] = float(np.logaddexp(out[0], phi[0, 0] - math.log(rate)))
    return out[0], out[1]


def _window(c: np.ndarray, mid: float, half: float, slope: float, log_w: _LogWeight | None
            ) -> tuple[float, float]:
    """The part `[xa, xb]` of a steep panel where `phi` is within `_MARGIN` of its maximum: the
    polynomial is sampled on `_WINDOW_POINTS` points, cut to the samples above the margin (and
    one more on each side), and sampled again until the window needs at most `_CAP` sub-panels
    (large `d` puts the whole mass in a layer of width `~1/d` next to a panel edge)."""
    xa, xb = -1.0, 1.0
    for _ in range(12):
        if (xb - xa) * half * slope <= _CAP:
            break
        x = np.linspace(xa, xb, _WINDOW_POINTS)
        ph = _clenshaw(c[None], x[None])[0]
        if log_w is not None:
            with np.errstate(divide="ignore"):
                ph = ph + log_w(np.exp(mid + half * x))
        keep = np.nonzero(ph > ph.max() - _MARGIN)[0]
        xa, xb = x[max(keep[0] - 1, 0)], x[min(keep[-1] + 1, _WINDOW_POINTS - 1)]
    return float(xa), float(xb)


def _uniform_weights(d: float) -> tuple[_LogWeight, _LogWeight, float]:
    """Log of the distribution function `F` of `rho_0` for a uniform pair, at the distance `e`
    from -1 (`I_{e/2}(a, a)`) and from +1 (`I_{1-e/2}(a, a)`), `a = (d-1)/2`; `F ~ e^a` at -1."""
    a = 0.5 * (d - 1.0)

    def left(e: np.ndarray) -> np.ndarray:
        return np.log(special.betainc(a, a, 0.5 * e))

    def right(e: np.ndarray) -> np.ndarray:
        return np.log(special.betainc(a, a, 1.0 - 0.5 * e))

    return left, right, a


def _log_p_core(model: RhoDiffusion, rho0: float | str, tol: float) -> float:
    """`log P` for a start strictly inside, at `tol > 0` or (tol = 0) with both ends
    integrable."""
    if model.d > D_MAX:
        raise ParameterError(f"d must be at most {D_MAX:g} for a hitting probability that is "
                             f"not 0 or 1 (the quadrature loses ~d 1e-15 of relative accuracy);"
                             f" got d={model.d:g}")
    limit = tol == 0.0
    log_lo = math.log(E_LIMIT) if limit else math.log(tol)
    point = None if rho0 == "uniform" else float(rho0)
    if limit and point is not None:  # the panels reach below the start
        log_lo = min(log_lo, math.log(max(1.0 - abs(point), TOL_MIN)) - 4.0)
    left, right = _grid(log_lo, point)
    gl, gr = model.scale_slope(left.e, -1), model.scale_slope(right.e, +1)
    tail = 0.0 if limit else None
    l_lo, l_hi = _log_pieces(left, gl, tail=tail)
    r_lo, r_hi = _log_pieces(right, gr, tail=tail)
    if point is None:
        wl, wr, power = _uniform_weights(model.d)
        num_l, _ = _log_pieces(left, gl, wl, None if tail is None else power)
        num_r, _ = _log_pieces(right, gr, wr, tail)
        return float(np.logaddexp(num_l, num_r) - np.logaddexp(l_lo, r_lo))
    if point <= 0:  # numerator: [rho0, 0] and the whole right half
        num = np.logaddexp(l_hi, r_lo)
        z = np.logaddexp(l_lo, num)
    else:  # numerator: [rho0, 1 - tol]
        num = r_lo
        z = np.logaddexp(np.logaddexp(l_lo, l_hi), np.logaddexp(r_lo, r_hi))
    return float(num - z)


def log_hitting_probability(model: RhoDiffusion, rho0: Any, tol: float = 0.0) -> float:
    """`log P(rho reaches -1 + tol before 1 - tol | rho0)` (`rho0` a number or 'uniform');
    `tol = 0`: the limit. Exact to ~1e-9 relative even where `P` underflows."""
    start = check_start(rho0)
    t = check_hitting_tol(tol)
    if start != "uniform":
        r = float(start)
        if 1.0 + r <= t or r == -1.0:
            return 0.0
        if 1.0 - r <= t or r == 1.0:
            return -math.inf
    if model.noiseless:
        return -math.inf
    if t > 0.0:
        return _log_p_core(model, start, t)
    bd = model.boundaries()
    left_int, right_int = bd.alpha_minus < 1.0, bd.alpha_plus < 1.0
    if left_int and right_int:
        return _log_p_core(model, start, 0.0)
    if left_int != right_int:  # the mass of S' sits at the end that is not integrable
        return 0.0 if right_int is False else -math.inf
    if bd.alpha_minus != bd.alpha_plus:
        return 0.0 if bd.alpha_plus > bd.alpha_minus else -math.inf
    return _log_p_core(model, start, TOL_MIN)


def hitting_probability(model: RhoDiffusion, rho0: Any, tol: float = 0.0) -> float:
    """`P(rho reaches -1 + tol before 1 - tol | rho0) = int_{rho0}^{1-tol} S' /
    int_{-1+tol}^{1-tol} S'` (for a uniform pair `int S' F / int S'`, `F` the law of `rho0`);
    `tol = 0`: the limit `tol -> 0` (spec §5's `P_anti` for `SpecPair`)."""
    return float(np.exp(log_hitting_probability(model, rho0, tol)))


def spec_reference(beta: float, d: float, rho0: float) -> float:
    """Reference `P_anti(beta, d, rho0)` of spec §5 by nested adaptive quadrature (slow).

    Nested scipy `quad` with algebraic endpoint weights, on the plain spec integrand
    `1/((1 - r^2) cosh(beta (1 - r)))` minus its poles; for tests and benchmarks at moderate
    `beta` (<~ 10). Independent of the engine.

    Args:
        beta: The inverse temperature.
        d: The dimension.
        rho0: The initial inner product of the pair, in [-1, 1].

    Returns:
        The probability that the pair ends antipodal.
    """
    from scipy import integrate  # here: scipy.integrate alone takes ~0.3 s to import

    c = math.cosh(2 * beta)
    if not c > d - 2:
        return 1.0 if rho0 == -1 else 0.0
    a_m, a_p = -0.5 - (d - 2) / (2 * c), (d - 3) / 2

    def h(r: float) -> float:
        return (1 / ((1 - r * r) * math.cosh(beta * (1 - r))) - 1 / (2 * c * (1 + r))
                - 1 / (2 * (1 - r)))

    def g(rho: float) -> float:
        return math.exp(-(d - 2) * integrate.quad(h, 0.0, rho, epsabs=1e-14, epsrel=1e-12)[0])

    def integral(lo: float, hi: float) -> float:
        if lo >= hi:
            return 0.0
        wl, wr = (a_m if lo == -1 else 0.0), (a_p if hi == 1 else 0.0)

        def f(rho: float) -> float:
            return g(rho) * (1 + rho) ** (a_m - wl) * (1 - rho) ** (a_p - wr)

        return integrate.quad(f, lo, hi, weight="alg", wvar=(wl, wr), epsabs=0, epsrel=1e-11,
                              limit=200)[0]

    z = integral(-1.0, 0.0) + integral(0.0, 1.0)
    if rho0 <= 0:
        return 1.0 - integral(-1.0, rho0) / z
    return integral(rho0, 1.0) / z


# ---------------------------------------------------------------------------------------------
# One-dimensional paths
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RhoPaths:
    """`z = artanh(rho)` of `runs` reduced paths at `times` `(K,)`: `z` is `(runs, K)`."""

    z: np.ndarray
    times: np.ndarray

    @property
    def rho(self) -> np.ndarray:
        """`rho = tanh z` (rounds to +-1 long before the pair is decided; see `log_gaps`)."""
        return np.tanh(self.z)

    def log_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """`(log(1 + rho), log(1 - rho))`, exact even where `rho` rounds to +-1."""
        log2 = math.log(2.0)
        return log2 - np.logaddexp(0.0, -2.0 * self.z), log2 - np.logaddexp(0.0, 2.0 * self.z)


def initial_rho(rho0: float | str, d: float, runs: int, rng: np.random.Generator) -> np.ndarray:
    """`runs` draws of `rho_0`: the point `rho0`, or `<x_1, x_2>` of a uniform pair in R^d."""
    if rho0 == "uniform":
        a = 0.5 * (d - 1.0)
        return 2.0 * rng.beta(a, a, size=runs) - 1.0
    return np.full(runs, rho0)


@dataclass(frozen=True)
class FirstExit:
    """Monte Carlo outcome: fractions of paths first at `-1 + tol`, at `1 - tol`, and neither."""

    antipodal: float
    merged: float
    undecided: float
    runs: int


class _Tabulated(_MLPPair):
    """`MLPPair` with `1 - khat` interpolated from a table (the inner loop of the paths)."""

    def rho_coefficients(self, v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = None
        if self.mu2 > 0:
            k = np.interp(0.5 * (v - w), _KHAT_GRID, _khat_table(self.mlp))
        b1, b0, d1, d0 = self.pieces(v, w, k)
        vw = v * w
        return vw * b1 + b0, vw * d1 + d0


_KHAT_GRID = np.linspace(-1.0, 1.0, 8193)


@lru_cache(maxsize=8)
def _khat_table(mlp: str) -> np.ndarray:
    return _complement_kernel(mlp, 1.0 + _KHAT_GRID, 1.0 - _KHAT_GRID)


def angle_first_exit(model: RhoDiffusion, rho0: float, tol: float, *, runs: int = 4000,
                     dt: float = 1e-3, t_max: float = 50.0, seed: int = 0,
                     kappa: float = 0.05) -> FirstExit:
    """Euler paths of `theta = arccos rho`: `dtheta = -(b + rho c/2)/sin dt - sqrt(c) dB`.

    The noise `sqrt(c) = sqrt(a)/sin(theta)` is bounded. Each path steps by `h = min(dt,
    kappa g^2 / c)`, `g = min(theta, pi - theta)`, so that a Bessel-like drift `~ 1/(pi - theta)`
    near `rho = -1` is resolved. A crossing of either barrier between two steps is drawn with the
    Brownian-bridge probability `exp(-2 g_0 g_1 / (c h))` (`g_0, g_1` the distances to the
    barrier), which removes the `sqrt(h)` bias of watching the barriers only at the steps. Paths
    still inside at `t_max` are undecided.
    """
    if not 0.0 < tol < 1.0:
        raise ParameterError(f"tol must be a number in (0, 1); got {tol!r}")
    if not -1.0 < rho0 < 1.0:
        raise ParameterError(f"rho0 must be a number in (-1, 1); got {rho0!r}")
    if isinstance(model, _MLPPair):
        model = _Tabulated(model.beta, model.d, model.sigma, model.mlp, model.mlp_sigma)
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
        b, var = model.rho_coefficients(v, w)  # var = a / sin^2, the squared noise of theta
        drift = -b / sin - 0.5 * rho * var / sin
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


__all__ = ["D_MAX", "E_LIMIT", "PAIR_TOL", "TOL_MIN", "FirstExit", "RhoPaths", "angle_first_exit",
           "check_hitting_tol", "check_start", "hitting_probability", "initial_rho",
           "log_hitting_probability", "spec_reference"]
