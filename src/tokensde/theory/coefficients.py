"""Coefficients of the two-token `rho = <x_1, x_2>` diffusion, one object per model variant.

Every variant with a rotation-invariant law makes `rho` an autonomous diffusion on [-1, 1],
`drho = b dt + sqrt(a) dB`. Each object gives it in two coordinates:

- `rho_coefficients(v, w)` with `v = 1 + rho`, `w = 1 - rho` (both exact near their endpoint):
  the drift `b` and `c = a / (v w)` (the squared noise of the angle `arccos rho`, bounded);
- `z_coefficients(z)`, `z = artanh rho`: drift and noise of `dz`;

and its boundary behaviour (`boundaries()`: the powers of the scale density `S'` at +-1). The
solvers of `tokensde.theory.first_passage` take any of them:

- `SpecPair`: softmax, `Q^T K = I`, matrix noise (spec §5);
- `HybridPair`: the hybrid model with scalar noise `eps` (spec §6);
- `RedrawnForms`: GOE query/key forms of scale `qk_scale` redrawn every layer
  (`tokensde.theory.redrawn_forms`);
- `MLPPair`: the spec model plus the random MLP block (`tokensde.theory.mlp_block`);

`pair_model` picks the object from the model's parameters (the one place that looks at the
variant). numpy and scipy only.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ..model.checks import ParameterError, _check_real, _require
from ..model.mlp import MLPS

__all__ = [
    "Boundaries", "RedrawnForms", "RhoDiffusion", "forms_z_coefficients", "kernel_constants", "pair_model",
]

_E_END = 1e-30  # distance to an endpoint at which a numerical boundary power is read off


def _sech(x: np.ndarray) -> np.ndarray:
    """`1/cosh(x)` for `x >= 0`, without overflow."""
    e = np.exp(-x)
    return 2 * e / (1 + e * e)


def _gaps(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(1 + rho, 1 - rho)` of `rho = tanh z`, each exact near its endpoint."""
    return (2.0 / (1.0 + np.exp(np.minimum(-2.0 * z, 700.0))),
            2.0 / (1.0 + np.exp(np.minimum(2.0 * z, 700.0))))


@dataclass(frozen=True)
class Boundaries:
    """Feller classification of `rho = -1` (antipodal) and `rho = +1` (merged).

    `S' ~ (1 + rho)^(-alpha_minus)` at -1 and `(1 - rho)^(-alpha_plus)` at +1. An endpoint with
    `alpha < 1` is one that the hitting probability keeps a positive share of as `tol -> 0`: it
    attracts with positive probability. `-1` is *reached* in finite time (a regular boundary,
    Bessel-squared of dimension `d - 1`) only with MLP noise and `d < 3`; otherwise both
    endpoints are natural or entrance boundaries. `tol_power`: `P ~ tol^tol_power` as
    `tol -> 0` (0: a positive limit, or a `1/log(1/tol)` decay when `log_rate`).
    """

    alpha_minus: float
    alpha_plus: float
    antipodal_reachable: bool
    tol_power: float
    log_rate: bool

    @classmethod
    def of(cls, alpha_minus: float, alpha_plus: float, reachable: bool = False) -> Boundaries:
        """From the two powers: the mass of `S'` within `tol` of an endpoint diverges like
        `tol^(1 - alpha)` when `alpha > 1`."""
        grow_m, grow_p = max(alpha_minus - 1.0, 0.0), max(alpha_plus - 1.0, 0.0)
        return cls(alpha_minus, alpha_plus, reachable, max(grow_m - grow_p, 0.0),
                   alpha_minus == 1.0 and alpha_plus < 1.0)

    @property
    def antipodal_attracts(self) -> bool:
        """`S'` integrable at -1 (`alpha_- < 1`): `lim_{tol->0} P > 0` from every start."""
        return self.alpha_minus < 1.0

    @property
    def merged_attracts(self) -> bool:
        """`log(1 - rho)` has a negative exponent at `rho = 1` (`alpha_+ < 1`)."""
        return self.alpha_plus < 1.0

    @property
    def limit_positive(self) -> bool:
        """`lim_{tol->0} P > 0` (also when both ends repel and -1 repels less)."""
        return self.tol_power == 0 and not self.log_rate

    @property
    def both_integrable(self) -> bool:
        """`S'` integrable at both ends: the `tol -> 0` limit is a ratio of finite integrals."""
        return self.alpha_minus < 1.0 and self.alpha_plus < 1.0


class RhoDiffusion(ABC):
    """The `rho` diffusion of one variant; subclasses define one coordinate, the other follows.

    `d` is the token dimension (it fixes the law of `rho_0` for a uniformly random pair).
    """

    d: float
    NOISE: ClassVar[str] = ""  # the field that scales the noise (its 0 is checked for)

    def __post_init__(self) -> None:
        _check_beta_d(getattr(self, "beta", 0.0), self.d)
        if self.NOISE:
            _check_real(self.NOISE, getattr(self, self.NOISE))

    @property
    def bounded_z(self) -> bool:
        """The `z` coefficients are bounded (the `z` paths and the decision-time law apply)."""
        return True

    @property
    def noiseless(self) -> bool:
        """No noise: the flow is deterministic and never reaches -1 from inside (for every
        variant here it either stands still or merges)."""
        return bool(self.NOISE) and getattr(self, self.NOISE) == 0

    def rho_coefficients(self, v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(b, c)`: drift of `rho` and `c = a/(v w)`, at `v = 1 + rho`, `w = 1 - rho`."""
        z = 0.5 * (np.log(v) - np.log(w))
        drift, noise = self.z_coefficients(z)
        rho = 0.5 * (v - w)
        b2 = noise * noise
        return v * w * (drift - rho * b2), v * w * b2

    def z_coefficients(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Drift and noise of `dz`, `z = artanh rho` (Ito: `A = (b + rho c)/(v w)`,
        `B = sqrt(c/(v w))`)."""
        z = np.asarray(z, dtype=float)
        v, w = _gaps(z)
        b, c = self.rho_coefficients(v, w)
        vw = v * w
        return (b + 0.5 * (v - w) * c) / vw, np.sqrt(c / vw)

    def scale_slope(self, e: np.ndarray, side: int) -> np.ndarray:
        """`-e d log S'/de` at the distance `e` from the endpoint `side` (-1 or +1): `2 b/(w c)`
        on the left, `-2 b/(v c)` on the right (`S' = exp(-int 2b/a)`); it tends to the
        endpoint's `alpha`."""
        e = np.asarray(e, dtype=float)
        other = 2.0 - e
        v, w = (e, other) if side < 0 else (other, e)
        b, c = self.rho_coefficients(v, w)
        return 2.0 * b / (other * c) if side < 0 else -2.0 * b / (other * c)

    def boundaries(self) -> Boundaries:
        """The powers of `S'` at the endpoints, read off at the distance `_E_END`."""
        e = np.array([_E_END])
        return Boundaries.of(float(self.scale_slope(e, -1)[0]), float(self.scale_slope(e, 1)[0]))

    def noise_bound(self) -> tuple[float, float]:
        """`(max |drift|, min noise^2)` of `dz` (sizes the finite-difference grids of the
        decision-time law)."""
        z = np.linspace(-40.0, 40.0, 4001)
        a, b = self.z_coefficients(z)
        return float(np.max(np.abs(a))), float(np.min(b * b))


def _check_beta_d(beta: Any, d: Any) -> tuple[float, float]:
    return _check_real("beta", beta), _check_real("d", d, 2.0)


@dataclass(frozen=True)
class _SpecPair(RhoDiffusion):
    """Spec §5: softmax, `Q^T K = I`, matrix noise `sigma`.

    `b = sigma^2 v w ((d-3) m + (w - (1 - sech)) s)`, `c = 2 sigma^2 v w s`, with `sech =
    sech(beta w)`, `s = 1/(1 + sech)`, `m = s sech`; `dz = sigma^2 ((d-2) m + s rho) dt +
    sigma sqrt(2 s) dB`.
    """

    beta: float
    d: float
    sigma: float = 1.0

    NOISE = "sigma"  # `sigma = 0`: nothing moves.

    def attention(self, v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(b1, D1)` with `b = v w b1`, `a = (v w)^2 D1`: the attention part, without `v w`."""
        return _attention(self.beta, self.d, self.sigma, v, w)

    def rho_coefficients(self, v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b1, d1 = self.attention(v, w)
        return v * w * b1, v * w * d1

    def scale_slope(self, e: np.ndarray, side: int) -> np.ndarray:
        e = np.asarray(e, dtype=float)
        other = 2.0 - e
        v, w = (e, other) if side < 0 else (other, e)
        b1, d1 = _attention(self.beta, self.d, 1.0, v, w)  # independent of sigma
        g = 2.0 * b1 / (other * d1)  # the factor v w cancels exactly
        return g if side < 0 else -g

    def z_coefficients(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rho = np.tanh(z)
        one_minus = 2.0 / (1.0 + np.exp(np.minimum(2.0 * z, 700.0)))  # 1 - rho, exact near 1
        s = 1.0 / (1.0 + _sech(self.beta * one_minus))
        return (self.sigma**2 * ((self.d - 2.0) * (1.0 - s) + s * rho),
                self.sigma * np.sqrt(2.0 * s))

    def boundaries(self) -> Boundaries:
        """`alpha_- = 1/2 + (d-2)/(2 cosh 2beta)` (1 at and below `beta_c` whatever the
        rounding), `alpha_+ = -(d-3)/2`."""
        alpha_m = 0.5 + 0.5 * (self.d - 2.0) * float(_sech(np.array(2.0 * self.beta)))
        if not _supercritical(self.beta, self.d):
            alpha_m = max(alpha_m, 1.0)
        return Boundaries.of(alpha_m, -0.5 * (self.d - 3.0))

    def noise_bound(self) -> tuple[float, float]:
        # |drift| <= sigma^2 ((d-2) m + s) <= sigma^2 (d - 1); noise^2 = 2 s sigma^2 >= sigma^2
        return self.sigma**2 * (self.d - 1.0), self.sigma**2


def _beta_critical(d: np.ndarray) -> np.ndarray:
    """`arccosh(d - 2)/2`, 0 for `d <= 3` (`two_tokens.beta_c` checks and unwraps it)."""
    return 0.5 * np.arccosh(np.maximum(np.asarray(d, dtype=float) - 2.0, 1.0))


def _supercritical(beta: Any, d: Any) -> Any:
    """`cosh 2beta > d - 2`, decided against `beta_c` itself, so that `beta = beta_c(d)` is
    never supercritical whatever the rounding of arccosh."""
    dd = np.asarray(d, dtype=float)
    return (dd <= 2.0) | (np.asarray(beta, dtype=float) > _beta_critical(dd))


@dataclass(frozen=True)
class _HybridPair(RhoDiffusion):
    """Spec §6 (USA with 1/n, `M = I`, scalar noise `eps`): `dz = e^{beta rho} (1 - eps^2 e^beta
    / 2) dt + eps e^{beta rho} dB`. `d` only fixes a uniform start."""

    beta: float
    eps: float
    d: float = 3.0

    NOISE = "eps"  # `eps = 0`: the deterministic flow merges the pair (spec §6).

    def z_coefficients(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = np.exp(self.beta * np.tanh(z))
        return w * (1.0 - 0.5 * self.eps**2 * math.exp(self.beta)), self.eps * w

    def boundaries(self) -> Boundaries:
        """`alpha_- = 1 + e^{2 beta}(1/eps^2 - e^beta/2)`, `alpha_+ = 1 - (1/eps^2 - e^beta/2)
        e^{-2 beta}`: exactly one end is integrable off the threshold `eps^2 = 2 e^-beta`."""
        gap = math.inf if self.eps == 0 else 1.0 / self.eps**2 - 0.5 * math.exp(self.beta)
        return Boundaries.of(1.0 + math.exp(2.0 * self.beta) * gap,
                             1.0 - math.exp(-2.0 * self.beta) * gap)


_U_SPAN = 9.5  # the U integral is a trapezoid rule on [-U_SPAN, U_SPAN] (Gaussian weight)
_U_STEP = 0.2  # ... with m moving by at most this much between nodes (the logistic's scale is 1)
_U_NODES = 4001  # at most this many U nodes ...
_BETA_SCALE_MAX = (_U_NODES - 1) * _U_STEP / (2 * _U_SPAN * 2 * math.sqrt(2.0))  # ... so beta s <= 14.9
_E_NODES = 40  # Gauss-Hermite nodes in E (delta has a spread of at most beta s)
_COARSE = 401  # z nodes where the forms' coefficients are computed (then interpolated, cubic),
_Z_SPAN = 20.0  # ... on [-Z_SPAN, Z_SPAN] (beyond, 1 -+ rho < 1e-17: constant to rounding),
_Z_BEND = 3.0  # ... at z = Z_SPAN sinh(Z_BEND u) / sinh(Z_BEND), u uniform: dense near z = 0
_CHUNK = 64  # z values per block of the quadrature
_HX, _HW = np.polynomial.hermite_e.hermegauss(_E_NODES)
_HW = _HW / _HW.sum()


def _u_rule(beta: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Trapezoid nodes and weights for `E f(U)`, fine enough for `m = beta w (1 + s sqrt 2 U)`,
    `w <= 2`: a logistic of m is a near-step in U when `beta s` is large, which Gauss-Hermite
    resolves badly."""
    slope = 2.0 * beta * scale * math.sqrt(2.0)
    n = int(min(_U_NODES, max(129, math.ceil(2 * _U_SPAN * slope / _U_STEP) + 1)))
    u = np.linspace(-_U_SPAN, _U_SPAN, n)
    wt = np.exp(-0.5 * u * u)
    return u, wt / wt.sum()


def forms_z_coefficients(z: np.ndarray, beta: float, d: float, scale: float,
                         sigma: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Drift and noise of `dz` for GOE forms of scale `scale` redrawn every layer, computed
    directly (the formula of `tokensde.theory.redrawn_forms`)."""
    z = np.asarray(z, dtype=float)
    a, b = np.empty_like(z), np.empty_like(z)
    un, uw = _u_rule(beta, scale)
    u, e = un[:, None], _HX[None, :]
    ww = uw[:, None] * _HW[None, :]
    for lo in range(0, z.size, _CHUNK):
        zz = z.ravel()[lo:lo + _CHUNK, None, None]
        v, w = _gaps(zz)
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


@dataclass(frozen=True)
class RedrawnForms(RhoDiffusion):
    """GOE query/key forms `I + s R` redrawn every layer (`tokensde.theory.redrawn_forms`):
    the averaged coefficients, computed on `_COARSE` nodes of `z` and interpolated by cubic
    splines (smooth, bounded, and constant far from 0)."""

    beta: float
    d: float
    scale: float
    sigma: float = 1.0
    _splines: list[Any] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_beta_d(self.beta, self.d)
        _check_real("qk_scale", self.scale, 0.0)
        _check_real("sigma", self.sigma, 0.0, strict=True)
        if self.beta * self.scale > _BETA_SCALE_MAX:
            raise ParameterError(
                f"qk_scale must be at most {_BETA_SCALE_MAX / self.beta:.6g} at beta={self.beta:g} "
                f"(beta * qk_scale <= {_BETA_SCALE_MAX:.4g}, where the average over the forms "
                f"resolves the attention's step); got {self.scale!r}")

    def z_coefficients(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self._splines:
            from scipy.interpolate import CubicSpline  # here: it imports in ~0.4 s

            grid = _Z_SPAN * np.sinh(_Z_BEND * np.linspace(-1.0, 1.0, _COARSE)) / math.sinh(_Z_BEND)
            a, b = forms_z_coefficients(grid, self.beta, self.d, self.scale, self.sigma)
            self._splines.extend([CubicSpline(grid, a), CubicSpline(grid, b)])
        zc = np.clip(np.asarray(z, dtype=float), -_Z_SPAN, _Z_SPAN)
        return self._splines[0](zc), self._splines[1](zc)

    def rho_coefficients(self, v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = 0.5 * (np.log(v) - np.log(w))
        drift, noise = self.z_coefficients(z)
        b2 = noise * noise
        return v * w * (drift - 0.5 * (v - w) * b2), v * w * b2


# ---------------------------------------------------------------------------------------------
# The MLP block
# ---------------------------------------------------------------------------------------------


@cache
def kernel_constants(mlp: str) -> tuple[float, float]:
    """`(khat(-1), khat'(1))` of the activation `mlp` (`khat'(1) = E phi'^2 / E phi^2`)."""
    MLPS.check(mlp)
    act = MLPS.get(mlp)()
    if not act.active:
        return 0.0, 0.0
    return float(act.kernel(np.array(-1.0))), act.slope_at_one()


_KERNEL_CACHE: dict[tuple[str, str], np.ndarray] = {}


def _complement_kernel(mlp: str, v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """`1 - khat(rho)` at `rho = 1 - w` (`= v - 1`), accurate near both endpoints; the last few
    node sets are cached (the kernel of an activation may be slow to evaluate)."""
    key = (mlp, hashlib.sha1(np.ascontiguousarray(w).tobytes()
                             + np.ascontiguousarray(v).tobytes()).hexdigest())
    hit = _KERNEL_CACHE.get(key)
    if hit is not None:
        return hit
    act = MLPS.get(mlp)()
    rho = np.where(w < v, 1.0 - w, v - 1.0)
    out = np.where(w > 0.5, 1.0 - act.kernel(rho), act.complement(np.minimum(w, 0.5)))
    if len(_KERNEL_CACHE) > 32:
        _KERNEL_CACHE.clear()
    _KERNEL_CACHE[key] = out
    return out


@dataclass(frozen=True)
class _MLPPair(RhoDiffusion):
    """The spec model plus the random MLP block `mlp` of output scale `mlp_sigma`
    (cross-covariance `mlp_sigma^2 khat(rho) I`): `b = v w b1 + b0`, `c = v w D1 + D0`, with the
    attention's `(b1, D1)` of `SpecPair` and `b0 = mu^2 (w (d-3+w) - K (d-1-vw))`,
    `D0 = 2 mu^2 (w + (1-w) K)`, `K = 1 - khat(rho)` (docs/mlp_theory.md)."""

    beta: float
    d: float
    sigma: float = 1.0
    mlp: str = "none"
    mlp_sigma: float = 1.0

    def __post_init__(self) -> None:
        mlp = MLPS.check(self.mlp)
        sigma = _check_real("sigma", self.sigma)
        m2 = self.mu2
        _check_real("mlp_sigma", self.mlp_sigma)
        _require(sigma > 0 or m2 > 0, "sigma", "> 0 when there is no MLP noise", sigma)
        _require(m2 == 0 or kernel_constants(mlp)[0] > -1.0, "mlp",
                "an activation with khat(-1) > -1 (not odd)", mlp)
        _check_beta_d(self.beta, self.d)

    @property
    def mu2(self) -> float:
        """`mlp_sigma^2`, 0 without an active block."""
        active = MLPS.get(MLPS.check(self.mlp)).active and _check_real(
            "mlp_sigma", self.mlp_sigma) > 0
        return float(self.mlp_sigma) ** 2 if active else 0.0

    @property
    def bounded_z(self) -> bool:
        """MLP noise does not vanish at the endpoints: its `z` noise grows without bound."""
        return self.mu2 == 0

    def pieces(self, v: np.ndarray, w: np.ndarray, khat_c: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`(b1, b0, D1, D0)` (class docstring); `khat_c = 1 - khat(rho)` or None (no block)."""
        b1, d1 = _attention(self.beta, self.d, self.sigma, v, w)
        m2 = self.mu2
        if khat_c is None or m2 == 0:
            zero = np.zeros_like(b1)
            return b1, zero, d1, zero
        b0 = m2 * (w * (self.d - 3.0 + w) - khat_c * (self.d - 1.0 - v * w))
        d0 = 2.0 * m2 * (w + (1.0 - w) * khat_c)
        return b1, b0, d1, d0

    def rho_coefficients(self, v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = _complement_kernel(self.mlp, v, w) if self.mu2 > 0 else None
        b1, b0, d1, d0 = self.pieces(v, w, k)
        vw = v * w
        return vw * b1 + b0, vw * d1 + d0

    def scale_slope(self, e: np.ndarray, side: int) -> np.ndarray:
        if self.mu2 == 0:
            return _SpecPair(self.beta, self.d, self.sigma).scale_slope(e, side)
        return super().scale_slope(e, side)

    def boundaries(self) -> Boundaries:
        """`alpha_- = (d-1)/2` with MLP noise (b -> mu^2 (d-1)(1+khat(-1)), a ~ 4 mu^2
        (1+khat(-1)) u), else spec §5's; `alpha_+ = -2 B / A` with `b ~ B (1-rho)`,
        `a ~ A (1-rho)^2`: `B = sigma^2 (d-3) + mu^2 ((d-3) - k1 (d-1))`, `A = 4 sigma^2 +
        4 mu^2 (1 + k1)`, `k1 = khat'(1)`."""
        m2, s2, d = self.mu2, self.sigma**2, self.d
        if m2 == 0:
            return _SpecPair(self.beta, d, self.sigma).boundaries()
        k1 = kernel_constants(self.mlp)[1]
        big_b = s2 * (d - 3.0) + m2 * ((d - 3.0) - k1 * (d - 1.0))
        alpha_p = -2.0 * big_b / (4.0 * s2 + 4.0 * m2 * (1.0 + k1))
        return Boundaries.of(0.5 * (d - 1.0), alpha_p, d < 3.0)


def _attention(beta: float, d: float, sigma: float, v: np.ndarray, w: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """`SpecPair.attention` without the checks (it runs in the inner loop of the paths)."""
    ex = np.exp(-beta * w)
    den = 1.0 + ex * ex
    sh = 2.0 * ex / den
    one_minus_sech = np.expm1(-beta * w) ** 2 / den
    s = 1.0 / (1.0 + sh)
    return sigma**2 * ((d - 3.0) * sh * s + (w - one_minus_sech) * s), 2.0 * sigma**2 * s


def pair_model(beta: float, d: float, *, sigma: float = 1.0, mlp: str = "none",
               mlp_sigma: float = 1.0, qk_scale: float = 0.0, eps: float | None = None
               ) -> RhoDiffusion:
    """The `rho` diffusion of a two-token model: `HybridPair` when `eps` is given, `MLPPair`
    with an active MLP block, `RedrawnForms` for `qk_scale > 0`, else `SpecPair`."""
    if eps is not None:
        return _HybridPair(beta, eps, d)
    active = MLPS.get(MLPS.check(mlp)).active and _check_real("mlp_sigma", mlp_sigma) > 0
    if active and _check_real("qk_scale", qk_scale) > 0:
        raise ParameterError("qk_scale > 0 together with an MLP block has no exact theory")
    if active:
        return _MLPPair(beta, d, sigma, mlp, mlp_sigma)
    if _check_real("qk_scale", qk_scale) > 0:
        return RedrawnForms(beta, d, qk_scale, sigma)
    return _SpecPair(beta, d, sigma)
