"""Two tokens (spec §5-§6): exact antipodal probabilities, the phase boundary, reduced diffusion.

For softmax attention with `Q^T K = I` and matrix noise, `rho = <x_1, x_2>` is an autonomous
diffusion on [-1, 1]. `rho = 1` (merged) always attracts; `rho = -1` (antipodal) attracts with
positive probability iff `cosh 2beta > d - 2`. This module gives

- theory: `beta_c`, the Lyapunov exponents at `rho = +-1`, `p_anti` (scale-function quadrature,
  vectorised), `p_anti_uniform` (uniformly random initial pair), the hybrid threshold of §6;
- `reduced_diffusion`: the 1-D `rho` diffusion simulated on its own, in `z = artanh(rho)`;
- `classify` (outcome masks at a tolerance) and `default_dt` (the Monte Carlo layer step).

It needs numpy and scipy only. The Monte Carlo of the full d-dimensional network (`monte_carlo`,
`hybrid_monte_carlo`, `PairOutcome`) is in `tokensde.analysis.pair_monte_carlo`, which needs the simulator.

Quadrature of `p_anti`. With `a_- = -1/2 - (d-2)/(2 cosh 2beta)` and `a_+ = (d-3)/2`,

    S'(rho) = (1 + rho)^{a_-} (1 - rho)^{a_+} exp(-(d-2) R(rho)),   R(rho) = int_0^rho h,

where `h` is `1/((1 - r^2) cosh(beta (1 - r)))` minus its two poles, bounded on [-1, 1]; in
closed form `d log S'/d rho = rho/(1 - rho^2) - (d-2) sech(beta (1 - rho))/(1 - rho^2)`. An
endpoint integral `int_0^{e0} e^a g(e) de` (`e` = distance to the endpoint) is cut at `c = e0/4`.
On `[0, c]`, for `a < 0`, it is split into the exact `g(0) c^{1+a}/(1+a)` plus
`int e^a (g(e) - g(0))`, Gauss-Legendre in `t` with `e = c t^4`. On `[c, e0]`, Gauss panels in
`s = log(e0/e)`: equal ones, and ones placed where the integrand has fallen by `e^-1/2, e^-1,
..., e^-32` from the end it decays from (judged by its log-slope there, and for a weight by its
curvature too). They matter at large `d`: `S'` then falls like `(1 - rho)^{(d-3)/2}` towards
`rho = 1`, so `int_{rho0}^1 S'` sits in a layer of width `~ (1 - rho0)/d` next to `rho0`. `R` is
accumulated gap by gap between all nodes. Everything is carried in logarithms (the power `e^a`
included, as its range alone overflows at large `d`), so neither large `beta` nor large `d`
overflows, and `1+a -> 0` (the critical line) is exact. `P_anti` is `int_{rho0}^1 S' / Z` itself
unless `rho0 <= -3/4` (there `1 - int_{-1}^{rho0} S' / Z`, and `P_anti` is not small), so a tiny
`P_anti` keeps its relative accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import integrate, special

from ..model.params import ParameterError, TimeGrid, check_int, check_real

ArrayLike = float | np.ndarray
Weight = Callable[[np.ndarray], np.ndarray]

GRADE = 4  # e = e0 t^GRADE / 4 next to the endpoint: grades the nodes towards it
SPAN = math.log(4.0)  # the rest, [e0/4, e0], in s = log(e0/e) over [0, SPAN]


def _gauss01(n: int) -> tuple[np.ndarray, np.ndarray]:
    t, w = np.polynomial.legendre.leggauss(n)
    return (t + 1) / 2, w / 2


_T, _W = _gauss01(40)  # rule in t next to the endpoint
_PX, _PW = _gauss01(8)  # rule on each panel of s
_UNIFORM = np.linspace(0.0, SPAN, 6)  # five equal panels in s ...
_GEO = 2.0 ** np.arange(-1, 6)  # ... and edges where it has fallen by e^-1/2, ..., e^-32
_GT, _GW = _gauss01(5)  # rule on each gap between nodes, for R
LOG2 = math.log(2.0)


# ---------------------------------------------------------------------------------------------
# Theory of spec §5
# ---------------------------------------------------------------------------------------------


def _sech(x: np.ndarray) -> np.ndarray:
    """`1/cosh(x)` for `x >= 0`, without overflow."""
    e = np.exp(-x)
    return 2 * e / (1 + e * e)


def _check_beta_d(beta: ArrayLike, d: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    b = np.asarray(beta, dtype=float)
    dd = np.asarray(d, dtype=float)
    if not np.all(np.isfinite(b) & (b >= 0)):
        raise ParameterError(f"beta must be finite numbers >= 0; got {beta!r}")
    if not np.all(np.isfinite(dd) & (dd >= 2)):
        raise ParameterError(f"d must be finite numbers >= 2; got {d!r}")
    return b, dd


def _check_rho(name: str, rho: ArrayLike) -> np.ndarray:
    r = np.asarray(rho, dtype=float)
    if not np.all(np.isfinite(r) & (r >= -1) & (r <= 1)):
        raise ParameterError(f"{name} must be numbers in [-1, 1]; got {rho!r}")
    return r


def _unwrap(out: np.ndarray) -> Any:
    return out.item() if out.ndim == 0 else out


def beta_c(d: ArrayLike) -> ArrayLike:
    """Critical interaction `beta_c(d) = arccosh(d - 2) / 2` (0 for `d <= 3`)."""
    _, dd = _check_beta_d(0.0, d)
    return _unwrap(_beta_c(dd))


def _beta_c(dd: np.ndarray) -> np.ndarray:
    return 0.5 * np.arccosh(np.maximum(dd - 2.0, 1.0))


def _supercritical(b: np.ndarray, dd: np.ndarray) -> np.ndarray:
    # `cosh 2b > d - 2`, decided against `beta_c` itself so that beta = beta_c(d) is never
    # supercritical, whatever the rounding of arccosh on this platform
    return (dd <= 2.0) | (b > _beta_c(dd))


def _live(b: np.ndarray, dd: np.ndarray) -> np.ndarray:
    # supercritical, and the exponent a_- of S' at -1 above -1 in floating point too: within an
    # ulp or so of beta_c it rounds to -1, S' is then not integrable and P_anti is 0 to rounding
    return _supercritical(b, dd) & (0.5 + 0.5 * (dd - 2.0) * _sech(2.0 * b) < 1.0)


def antipodal_attracts(beta: ArrayLike, d: ArrayLike) -> Any:
    """True where antipodal pairs attract with positive probability: `cosh(2 beta) > d - 2`."""
    return _unwrap(_supercritical(*_check_beta_d(beta, d)))


def lyapunov_merged(d: ArrayLike, sigma: float = 1.0) -> ArrayLike:
    """Exponent of `log(1 - rho)` at `rho = 1`: `-sigma^2 (d - 1)` (always attracting)."""
    _, dd = _check_beta_d(0.0, d)
    return _unwrap(-(sigma**2) * (dd - 1.0))


def lyapunov_antipodal(beta: ArrayLike, d: ArrayLike, sigma: float = 1.0) -> ArrayLike:
    """Exponent of `log(1 + rho)` at `rho = -1`: `sigma^2 (d - 2 - cosh 2beta) / cosh^2 beta`."""
    b, dd = _check_beta_d(beta, d)
    s2 = _sech(b) ** 2  # cosh(2b)/cosh(b)^2 = 2 - sech(b)^2, so large beta cannot overflow
    return _unwrap(sigma**2 * ((dd - 2.0) * s2 - (2.0 - s2)))


def _h(beta: np.ndarray, v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """`h(r) = 1/((1-r^2) cosh(beta u)) - sech(2 beta)/(2v) - 1/(2u)`, `v = 1+r`, `u = 1-r`.

    Written as `(sech(beta u) - sech(2 beta))/(2v) + (sech(beta u) - 1)/(2u)`, each difference
    with `expm1` so that nothing cancels near the endpoints.
    """
    # sech(A) - sech(B) = -2 e^-A expm1(A-B) (1 - e^-(A+B)) / ((1+e^-2A)(1+e^-2B)), A=beta u, B=2beta;
    # sech(A) - 1 = -expm1(-A)^2 / (1+e^-2A). In place: this is the inner loop of the quadrature.
    x = np.multiply(beta, u)
    np.negative(x, out=x)
    eu = np.exp(x)
    near_plus = np.expm1(x, out=x)
    near_plus *= near_plus
    near_plus /= u
    near_plus *= 0.5
    near_minus = np.multiply(beta, v)
    np.negative(near_minus, out=near_minus)
    np.expm1(near_minus, out=near_minus)
    near_minus *= eu
    near_minus *= 1.0 - eu * np.exp(-2.0 * beta)
    near_minus /= v
    near_minus /= 1.0 + np.exp(-4.0 * beta)
    near_minus += near_plus
    eu *= eu
    eu += 1.0
    near_minus /= eu
    return np.negative(near_minus, out=near_minus)


def _cumulative_h(beta: np.ndarray, e: np.ndarray, e0: np.ndarray, side: int) -> tuple[
        np.ndarray, np.ndarray]:
    """`H(e) = int_0^e h` along the distance `e` to the endpoint `side` (-1 or +1).

    `beta` and `e0` are `(P, 1)`, the nodes `e` `(P, N)` ascending. Returns `H` at the nodes and
    `H(e0)` `(P,)`; each gap between consecutive nodes gets its own Gauss rule.
    """
    edges = np.concatenate([np.zeros_like(e0), e, e0], axis=1)
    width = np.diff(edges, axis=1)
    pts = edges[:, :-1, None] + width[..., None] * _GT  # (P, N+1, m)
    v, u = (pts, 2.0 - pts) if side < 0 else (2.0 - pts, pts)
    H = np.cumsum(width * (_h(beta[..., None], v, u) @ _GW), axis=1)
    return H[:, :-1], H[:, -1]


@dataclass(frozen=True)
class _Density:
    """`S'` for flat `(P,)` arrays of supercritical points: endpoint exponents and `d - 2`."""

    beta: np.ndarray
    dm2: np.ndarray
    a_minus: np.ndarray
    a_plus: np.ndarray

    @classmethod
    def of(cls, beta: np.ndarray, d: np.ndarray) -> _Density:
        dm2 = d - 2.0
        return cls(beta, dm2, -0.5 - 0.5 * dm2 * _sech(2.0 * beta), 0.5 * (d - 3.0))

    def take(self, mask: np.ndarray) -> _Density:
        """The points selected by `mask`."""
        return _Density(self.beta[mask], self.dm2[mask], self.a_minus[mask], self.a_plus[mask])

    def log_integral(self, e0: np.ndarray, side: int, anchor: np.ndarray | None = None,
                     weight: Weight | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`log int S' w` over the stretch of length `e0` next to the endpoint `side`.

        `R = H - H(1)` on side -1 and `H(1) - H` on side +1; `anchor` is that side's
        `(d-2) H(1)`, or None when `e0 = 1` (the integral then supplies it). `weight(e)` takes
        `(P, k)` distances; it may vanish at `e = 0` but must be positive inside. Returns
        `(log integral, (d-2) H(e0))`.

        Two pieces. `[0, c]`, `c = e0/4`: Gauss in `t`, `e = c t^GRADE`, with `g(0) int_0^c e^a`
        split off exactly where `e^a` is singular. `e^a` is carried in the exponent with the rest
        (with large `d`, `e^a` and `g` each span more than the float range; their product does
        not).
        `[c, e0]`: Gauss panels in `s = log(e0/e)` (see `_edges`), which resolve the layer that
        large `d` puts next to `e0` (the whole mass of `int_{rho0}^1 S'`, as thin as `e0/d`) and
        a uniform-start weight puts next to `rho = 0` (width `1/sqrt(d)`).
        """
        a, b = (self.a_minus, self.a_plus) if side < 0 else (self.a_plus, self.a_minus)
        a1 = (1.0 + a)[:, None]
        e0c = np.where(e0 > 0, e0, 1.0)[:, None]
        c = math.exp(-SPAN) * e0c
        ea = c * _T**GRADE  # [0, c], ascending
        edges = self._edges(e0c, side, weight)  # [c, e0], in s
        width = np.diff(edges, axis=1)
        sb = (edges[:, :-1, None] + width[..., None] * _PX).reshape(len(e0c), -1)
        eb = e0c * np.exp(-sb)  # descending
        e = np.concatenate([ea, eb[:, ::-1]], axis=1)
        H, H_end = _cumulative_h(self.beta[:, None], e, e0c, side)
        sign = -1.0 if side < 0 else 1.0
        lg = b[:, None] * np.log(2.0 - e) + sign * self.dm2[:, None] * H
        lg0 = b[:, None] * LOG2
        if weight is not None:
            with np.errstate(divide="ignore"):  # a weight may vanish at the endpoint
                lg = lg + np.log(weight(e))
                lg0 = lg0 + np.log(weight(np.zeros_like(e0c)))
        n = _T.size
        lga, lgb = lg[:, :n], lg[:, n:][:, ::-1]
        # subtract g(0) only where e^a is singular: for a >= 0 the far end can carry
        # g(e) << g(0), and the subtraction would cancel catastrophically
        lg0 = np.where(a[:, None] < 0, lg0, -np.inf)
        # log of weight x jacobian x e^a on [0, c], and the exact g(0) int_0^c e^a
        scale_a = np.log(GRADE * _W) + a1 * np.log(c) + (GRADE * a1 - 1.0) * np.log(_T)
        exact = a1 * np.log(c) + lg0 - np.log(a1)
        with np.errstate(divide="ignore"):  # panels of zero width
            terms_b = (np.log((width[..., None] * _PW).reshape(len(e0c), -1)) + a1 * np.log(eb)
                       + lgb)
        top = np.maximum(np.maximum((scale_a + lga).max(axis=1), exact[:, 0]),
                         terms_b.max(axis=1))[:, None]
        with np.errstate(over="ignore", invalid="ignore"):
            # e^a (g - g0), with expm1 where g is close to g0
            near = np.exp(scale_a + lg0 - top) * np.expm1(lga - lg0)
            far = np.exp(scale_a + lga - top) - np.exp(scale_a + lg0 - top)
            piece_a = np.where(np.abs(lga - lg0) < 1.0, near, far).sum(axis=1)
        total = piece_a + np.exp(exact - top)[:, 0] + np.exp(terms_b - top).sum(axis=1)
        ref = self.dm2 * H_end if anchor is None else anchor
        with np.errstate(divide="ignore"):  # an integral below the float range is exp(-inf)
            log_int = top[:, 0] + np.log(total) - sign * ref
        return np.where(e0 > 0, log_int, -np.inf), self.dm2 * H_end

    def _edges(self, e0: np.ndarray, side: int, weight: Weight | None) -> np.ndarray:
        """Panel edges `(P, K)` in `s = log(e0/e)` over `[0, SPAN]` (see `log_integral`).

        Besides the equal panels: from the end that the integrand (in `s`) falls off from, with
        log-slope `lam`, edges where `lam w + kap w^2/2` reaches `k = 1/2, 1, 2, ..., 32`. That
        is an exponential layer (`kap = 0`; a decay that slows down, as next to a power law, is
        caught by the first edge, `1/(2 lam)`) or, where a weight falls off from that end, the
        Gaussian layer that the distribution of a uniform `rho_0` makes (`kap` its curvature).
        """
        delta = 1e-3
        shift = np.array([0.0, delta, SPAN, SPAN - delta])
        at = e0 * np.exp(-shift)  # e0, just inside it, e0 e^-SPAN, just inside that
        fall = at * self.slope(at, side) + 1.0  # -d/ds log(S' e): the fall-off towards larger s
        dlw = np.zeros_like(at)
        if weight is not None:
            h = 1e-4
            with np.errstate(divide="ignore", invalid="ignore"):
                lw = np.log(weight(at)) - np.log(weight(at * math.exp(-h)))
            dlw = np.nan_to_num(lw / h, nan=0.0, posinf=0.0, neginf=0.0)
            fall = fall + dlw
        # a step in the weight next to e0 (a uniform rho_0 near rho = 0) is resolved even where
        # S' rises across it
        lam_in = np.maximum(np.maximum(fall[:, :1], np.abs(dlw[:, :1])), 0.0)
        lam_out = np.maximum(-fall[:, 2:3], 0.0)
        inward = lam_in >= lam_out
        lam = np.where(inward, lam_in, lam_out)
        kap = np.where(inward & (dlw[:, :1] > 0), (fall[:, 1:2] - fall[:, :1]) / delta, 0.0)
        kap = np.where(~inward & (dlw[:, 2:3] < 0), (fall[:, 2:3] - fall[:, 3:]) / delta, kap)
        kap = np.maximum(kap, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            w = 2.0 * _GEO / (lam + np.sqrt(lam * lam + 2.0 * kap * _GEO))
        w = np.nan_to_num(w, nan=SPAN, posinf=SPAN)
        geo = np.clip(np.where(inward, w, SPAN - w), 0.0, SPAN)
        uniform = np.broadcast_to(_UNIFORM, (len(e0), _UNIFORM.size))
        return np.sort(np.concatenate([uniform, geo], axis=1), axis=1)

    def slope(self, e: np.ndarray, side: int) -> np.ndarray:
        """`d log S' / de` at the distance `e` `(P, k)` from the endpoint `side`.

        `d log S'/d rho = (1/u - 1/v)/2 - (d-2) sech(beta u)/(u v)`, `v = 1+rho`, `u = 1-rho`.
        """
        beta, dm2 = self.beta[:, None], self.dm2[:, None]
        v, u = (e, 2.0 - e) if side < 0 else (2.0 - e, e)
        drho = 0.5 * (1.0 / u - 1.0 / v) - dm2 * _sech(beta * u) / (u * v)
        return np.asarray(drho if side < 0 else -drho)

    def halves(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Logs of `int_{-1}^0 S'` and `int_0^1 S'`, and the anchors `(d-2) H_-+(1)`."""
        one = np.ones_like(self.beta)
        left, anchor_m = self.log_integral(one, -1)
        right, anchor_p = self.log_integral(one, +1)
        return left, right, anchor_m, anchor_p


def _points(*arrays: np.ndarray) -> tuple[tuple[int, ...], list[np.ndarray]]:
    shaped = np.broadcast_arrays(*arrays)
    return shaped[0].shape, [np.ravel(a).astype(float) for a in shaped]


def p_anti(beta: ArrayLike, d: ArrayLike, rho0: ArrayLike) -> ArrayLike:
    """`P(rho -> -1 | rho_0) = int_{rho_0}^1 S' / int_{-1}^1 S'` if `cosh 2beta > d-2`, else 0.

    Broadcasts `beta`, `d` (any real >= 2) and `rho0`. `rho0 = -1` is a fixed point of the
    dynamics and gives 1; `rho0 = 1` gives 0. Independent of `sigma`.
    """
    b, dd = _check_beta_d(beta, d)
    shape, (b, dd, r) = _points(b, dd, _check_rho("rho0", rho0))
    out = np.where(r == -1.0, 1.0, 0.0)
    live = _live(b, dd) & (np.abs(r) < 1.0)
    if live.any():
        out[live] = _p_anti_live(b[live], dd[live], r[live])
    return _unwrap(out.reshape(shape))


def _p_anti_live(beta: np.ndarray, d: np.ndarray, rho0: np.ndarray) -> np.ndarray:
    dens = _Density.of(beta, d)
    left, right, anchor_m, anchor_p = dens.halves()
    log_z = np.logaddexp(left, right)
    out = np.empty_like(rho0)
    # 1 - int_{-1}^{rho0}/Z near -1; int_{rho0}^1/Z directly elsewhere, across 0 if need be, so
    # that a small P_anti (large d: tiny already at rho0 = 0) keeps its relative accuracy
    low = rho0 <= -0.75
    for mask, side, e0, anchor in ((low, -1, 1.0 + rho0, anchor_m),
                                   (~low, +1, 1.0 - rho0, anchor_p)):
        if mask.any():
            part, _ = dens.take(mask).log_integral(e0[mask], side, anchor[mask])
            ratio = part - log_z[mask]
            out[mask] = -np.expm1(ratio) if side < 0 else np.exp(ratio)
    return out


def uniform_pair_density(rho: ArrayLike, d: ArrayLike) -> ArrayLike:
    """Density of `<x_1, x_2>` for independent uniform unit vectors: `∝ (1 - rho^2)^((d-3)/2)`."""
    _, dd = _check_beta_d(0.0, d)
    r = _check_rho("rho", rho)
    a = 0.5 * (dd - 1.0)
    with np.errstate(divide="ignore"):
        log_dens = -special.betaln(a, a) - (2 * a - 1) * LOG2 + (a - 1.0) * np.log1p(-r * r)
    return _unwrap(np.exp(log_dens))


def p_anti_uniform(beta: ArrayLike, d: ArrayLike) -> ArrayLike:
    """`P_anti` for a uniformly random initial pair: `int S'(rho) F(rho) drho / int S'`.

    `F` is the distribution function of `rho_0` (a regularised incomplete beta function), since
    `E P_anti(rho_0) = E int_{rho_0}^1 S' / Z = int S'(rho) P(rho_0 < rho) drho / Z`.
    """
    b, dd = _check_beta_d(beta, d)
    shape, (b, dd) = _points(b, dd)
    out = np.zeros_like(b)
    live = _live(b, dd)
    if live.any():
        out[live] = _p_uniform_live(b[live], dd[live])
    return _unwrap(out.reshape(shape))


def _p_uniform_live(beta: np.ndarray, d: np.ndarray) -> np.ndarray:
    dens = _Density.of(beta, d)
    a = 0.5 * (d - 1.0)[:, None]
    # at distance e from -1, F = I_{e/2}(a, a); from +1, F = 1 - I_{e/2}(a, a) = I_{1-e/2}(a, a)
    weights = (lambda e: special.betainc(a, a, 0.5 * e),
               lambda e: special.betainc(a, a, 1.0 - 0.5 * e))
    left, right, anchor_m, anchor_p = dens.halves()
    one = np.ones_like(beta)
    wl, _ = dens.log_integral(one, -1, anchor_m, weights[0])
    wr, _ = dens.log_integral(one, +1, anchor_p, weights[1])
    return np.exp(np.logaddexp(wl, wr) - np.logaddexp(left, right))


def p_anti_reference(beta: float, d: float, rho0: float) -> float:
    """Slow adaptive reference for `p_anti`: nested scipy `quad` with algebraic endpoint weights.

    Uses the plain spec integrand `1/((1 - r^2) cosh(beta (1 - r)))` minus its poles; for tests
    and benchmarks at moderate `beta` (<~ 10).
    """
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


def rho_drift_diffusion(rho: ArrayLike, beta: float, d: float, sigma: float = 1.0) -> tuple[
        ArrayLike, ArrayLike]:
    """Spec §5: drift `sigma^2 (1-rho^2)((d-2) m - s rho)` and squared diffusion `2 s sigma^2
    (1-rho^2)^2` of `rho`, with `m/s = sech(beta (1 - rho))`, `m + s = 1`."""
    b, dd = _check_beta_d(beta, d)
    r = _check_rho("rho", rho)
    s = 1.0 / (1.0 + _sech(b * (1.0 - r)))
    one = 1.0 - r * r
    return (_unwrap(sigma**2 * one * ((dd - 2.0) * (1.0 - s) - s * r)),
            _unwrap(2.0 * s * sigma**2 * one**2))


# ---------------------------------------------------------------------------------------------
# Theory of spec §6 (hybrid: USA with 1/n, M = I, scalar noise eps)
# ---------------------------------------------------------------------------------------------


def hybrid_eps2_c(beta: ArrayLike) -> ArrayLike:
    """Threshold of the hybrid model: antipodal iff `eps^2 > 2 e^{-beta}`, merged iff below."""
    b, _ = _check_beta_d(beta, 2.0)
    return _unwrap(2.0 * np.exp(-b))


def hybrid_lyapunov(beta: ArrayLike, eps: ArrayLike) -> tuple[ArrayLike, ArrayLike]:
    """Exponents `(of log(1+rho) at -1, of log(1-rho) at +1)`: `(2e^-b - eps^2, e^2b (eps^2 -
    2e^-b))`. They always have opposite signs, so the pair ends on one side almost surely."""
    b, _ = _check_beta_d(beta, 2.0)
    e2 = np.asarray(eps, dtype=float) ** 2
    gap = 2.0 * np.exp(-b) - e2
    return _unwrap(gap), _unwrap(-np.exp(2.0 * b) * gap)


def hybrid_drift_diffusion(rho: ArrayLike, beta: float, eps: float) -> tuple[ArrayLike,
                                                                             ArrayLike]:
    """§6 `rho` diffusion: drift `(1-rho^2) e^{beta rho} (1 - eps^2 e^beta/2 - eps^2 rho
    e^{beta rho})` and squared diffusion `eps^2 e^{2 beta rho} (1-rho^2)^2` (Ito, from spec §3)."""
    b, _ = _check_beta_d(beta, 2.0)
    e = check_real("eps", eps)
    r = _check_rho("rho", rho)
    w, one = np.exp(b * r), 1.0 - r * r
    drift = one * w * (1.0 - 0.5 * e * e * np.exp(b) - e * e * r * w)
    return _unwrap(drift), _unwrap(e * e * w * w * one * one)


def hybrid_p_anti(beta: float, eps: float, rho0: float = 0.0) -> float:
    """1 above the threshold, 0 below (and for `rho0 = 1`), nan exactly at it; `rho0 = -1`: 1."""
    b = check_real("beta", beta)
    e = check_real("eps", eps)
    r = float(_check_rho("rho0", rho0))
    if r in (-1.0, 1.0):
        return 1.0 if r == -1.0 else 0.0
    gap = e * e - 2.0 * math.exp(-b)
    return 1.0 if gap > 0 else 0.0 if gap < 0 else math.nan


# ---------------------------------------------------------------------------------------------
# The reduced one-dimensional diffusion, in z = artanh(rho)
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
        return LOG2 - np.logaddexp(0.0, -2.0 * self.z), LOG2 - np.logaddexp(0.0, 2.0 * self.z)


def z_coefficients(z: np.ndarray, beta: float, d: float, sigma: float, eps: float | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Drift and noise of `dz`, `z = artanh rho`.

    §5: `dz = sigma^2 ((d-2) m + s rho) dt + sigma sqrt(2s) dB`. §6 (eps given):
    `dz = e^{beta rho} (1 - eps^2 e^beta / 2) dt + eps e^{beta rho} dB`.
    """
    rho = np.tanh(z)
    if eps is not None:
        w = np.exp(beta * rho)
        return w * (1.0 - 0.5 * eps * eps * math.exp(beta)), eps * w
    one_minus = 2.0 / (1.0 + np.exp(np.minimum(2.0 * z, 700.0)))  # 1 - rho, exact near rho = 1
    s = 1.0 / (1.0 + _sech(beta * one_minus))
    return sigma**2 * ((d - 2.0) * (1.0 - s) + s * rho), sigma * np.sqrt(2.0 * s)


def check_rho0(rho0: Any) -> float | str:
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


def _initial_rho(rho0: float | str, d: float, runs: int, rng: np.random.Generator) -> np.ndarray:
    if rho0 == "uniform":
        a = 0.5 * (d - 1.0)
        return 2.0 * rng.beta(a, a, size=runs) - 1.0
    return np.full(runs, rho0)


def reduced_diffusion(beta: float, d: float, rho0: float | str, *, T: float, dt: float,
                      runs: int, seed: int = 0, sigma: float = 1.0, eps: float | None = None,
                      checkpoints: int | None = None) -> RhoPaths:
    """Euler-Maruyama paths of the 1-D `rho` diffusion (§5; §6 hybrid when `eps` is given).

    Stepped in `z = artanh(rho)`, where the coefficients are bounded and `rho` can never leave
    (-1, 1); `rho0` may be 'uniform' (a uniform random pair in R^d). `checkpoints`: number of
    evenly spaced recording times (ends included; default: start and end).
    """
    _check_beta_d(beta, d)
    sigma = check_real("sigma", sigma)
    eps = None if eps is None else check_real("eps", eps)
    grid = TimeGrid.make(T=T, dt=dt)
    runs, seed = check_int("runs", runs, 1), check_int("seed", seed, 0)
    rho0 = check_rho0(rho0)
    keep = np.unique(np.round(np.linspace(0, grid.steps, max(2, checkpoints or 2))).astype(int))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 3]))
    with np.errstate(divide="ignore"):
        z = np.arctanh(_initial_rho(rho0, d, runs, rng))
    out = [z] if keep[0] == 0 else []
    root = math.sqrt(grid.dt)
    for k in range(1, grid.steps + 1):
        drift, noise = z_coefficients(z, beta, d, sigma, eps)
        z = z + drift * grid.dt + noise * root * rng.standard_normal(runs)
        if k in keep:
            out.append(z)
    return RhoPaths(np.stack(out, axis=1), keep * grid.dt)


# ---------------------------------------------------------------------------------------------
# Outcomes at a tolerance, and the Monte Carlo layer step (see tokensde.analysis.pair_monte_carlo)
# ---------------------------------------------------------------------------------------------


def classify(log_plus: np.ndarray, log_minus: np.ndarray, tol: float) -> tuple[
        np.ndarray, np.ndarray]:
    """Masks `(antipodal, merged)`: `1 + rho < tol` and `1 - rho < tol` (spec §7)."""
    lt = math.log(tol)
    return log_plus < lt, log_minus < lt


def default_dt(d: int) -> float:
    """Layer step for two-token Monte Carlo: `0.05 / d`.

    The network's error per layer in `P_anti` grows like `d^2 dt^2` (the noise `sqrt(dt) V y`
    has norm `~ sqrt(d dt)`); with this step the bias of `P_anti` stays below ~0.01 up to
    d = 10 (measured in docs/two-tokens.md).
    """
    return 0.05 / check_int("d", d, 2)
