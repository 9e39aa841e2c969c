"""Independent token noise: linear stability of the uniform state in the many-token limit.

Each token has its own Brownian motion on the sphere of strength `tau` (tangent projection and
Ito correction, generator `tau^2/2` times the Laplace-Beltrami operator), and the attention
drift has mean part `M = a I`:

    dx_i = a P_{x_i} y_i dt + tau P_{x_i} dB_i - (d - 1)/2 tau^2 x_i dt.

As n grows the token law `rho` solves `d_t rho = tau^2/2 Lap rho - div(rho a P_x y[rho])`, with
`y[rho](x) = int e^{beta <x, z>} z rho(dz)` for USA and that divided by `int e^{beta <x, z>}
rho(dz)` for softmax. The uniform law is stationary. Linearised around it, a spherical harmonic
of degree `l` grows at the rate

    l (l + d - 2) (a c_l / beta - tau^2 / 2),

where `c_l = rho_0 lambda_l` (USA) or `lambda_l / lambda_0` (softmax), `lambda_l` the Funk-Hecke
eigenvalue of `e^{beta t}` on degree `l` and `rho_0 = 1 / |S^{d-1}|`. This follows from
`P_x y[h](x) = grad_S (K h)(x) / beta`, `K` the kernel operator. `lambda_l` falls with `l`, so
degree 1 goes first. With `lambda_1 = (2 pi)^{d/2} beta^{1-d/2} I_{d/2}(beta)` and
`lambda_0 = (2 pi)^{d/2} beta^{1-d/2} I_{d/2-1}(beta)`, the uniform state loses stability when the
coupling `a / tau^2` passes

    USA:      beta^{d/2} / (2^{d/2} Gamma(d/2) I_{d/2}(beta)),
    softmax:  beta I_{d/2-1}(beta) / (2 I_{d/2}(beta)).

The USA threshold is the `K_#` of the noisy-transformer literature, whose coupling is this
`a / tau^2` (drift strength over the noise's variance rate). numpy and scipy only.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from scipy import optimize, special

from ..model.checks import ParameterError, _check_choice, _check_int, _check_real

__all__ = [
    "ATTENTIONS", "beta_star", "critical_coupling", "mode_growth_rate", "step_threshold",
    "step_threshold_shift",
]

ATTENTIONS = ("usa", "softmax")


def _check(beta: float, d: int, attention: str) -> tuple[float, int, str]:
    beta = _check_real("beta", beta, 0.0, strict=True)
    return beta, _check_int("d", d, 2), _check_choice("attention", attention, ATTENTIONS)


def _log_ive(nu: float, beta: float, d: int) -> float:
    """`log(I_nu(beta) e^{-beta})`, or ParameterError naming beta and d where float64 cannot
    hold it (instead of a nan, or a bare 'math domain error')."""
    value = float(special.ive(nu, beta))
    if math.isfinite(value) and value > 0.0:
        return math.log(value)
    why = ("it underflows to 0: d is too large against beta" if value == 0.0 else
           "scipy's ive is nan: beta is too large (above about 1e9)")
    raise ParameterError(f"beta = {beta:g} and d = {d} are out of the range of this theory: the "
                         f"Bessel function I_{nu:g}(beta) e^-beta is not a float64 number > 0 "
                         f"({why})")


def _log_mode_coefficient(beta: float, d: int, attention: str, degree: int) -> float:
    nu = degree + d / 2 - 1
    if attention == "softmax":
        return _log_ive(nu, beta, d) - _log_ive(d / 2 - 1, beta, d)
    # rho_0 lambda_l = 2^{d/2 - 1} Gamma(d/2) beta^{1 - d/2} I_nu(beta)
    return ((d / 2 - 1) * math.log(2) + math.lgamma(d / 2) + (1 - d / 2) * math.log(beta)
            + _log_ive(nu, beta, d) + beta)


def _mode_coefficient(beta: float, d: int, attention: str = "usa", degree: int = 1) -> float:
    """`c_l`: the attention's linear response on degree-`l` harmonics at the uniform state,
    `rho_0 lambda_l` (USA) or `lambda_l / lambda_0` (softmax).

    Args:
        beta: attention strength, > 0.
        d: dimension of the ambient space (tokens on S^{d-1}), >= 2.
        attention: 'usa' or 'softmax'.
        degree: the harmonic degree `l`, >= 0.

    Returns:
        `c_l` (inf where it passes the float range: USA at beta above about 700).
    """
    beta, d, attention = _check(beta, d, attention)
    log = _log_mode_coefficient(beta, d, attention, _check_int("degree", degree, 0))
    return math.exp(log) if log < 709.0 else math.inf


def mode_growth_rate(beta: float, d: int, mean_scale: float, token_noise: float,
                     attention: str = "usa", degree: int = 1) -> float:
    """Growth rate `l (l + d - 2) (a c_l / beta - tau^2 / 2)` of a degree-`l` perturbation of the
    uniform token law.

    Args:
        beta: attention strength, > 0.
        d: dimension of the ambient space, >= 2.
        mean_scale: `a` in `M = a I`, >= 0.
        token_noise: `tau`, the strength of each token's own Brownian motion, >= 0.
        attention: 'usa' or 'softmax'.
        degree: the harmonic degree `l`, >= 1.

    Returns:
        The rate (positive: the uniform state is unstable in that degree).
    """
    a = _check_real("mean_scale", mean_scale, 0.0)
    tau = _check_real("token_noise", token_noise, 0.0)
    degree = _check_int("degree", degree, 1)
    c = _mode_coefficient(beta, d, attention, degree)
    return degree * (degree + d - 2) * (a * c / beta - tau**2 / 2)


def critical_coupling(beta: float, d: int, attention: str = "usa") -> float:
    """The coupling `a / tau^2` above which the uniform state is linearly unstable:
    `beta / (2 c_1)`, i.e. `beta^{d/2} / (2^{d/2} Gamma(d/2) I_{d/2}(beta))` for USA and
    `beta I_{d/2-1}(beta) / (2 I_{d/2}(beta))` for softmax.

    Args:
        beta: attention strength, > 0.
        d: dimension of the ambient space, >= 2.
        attention: 'usa' or 'softmax'.

    Returns:
        The critical coupling.
    """
    beta, d, attention = _check(beta, d, attention)
    return math.exp(math.log(beta / 2) - _log_mode_coefficient(beta, d, attention, 1))


def beta_star(d: int) -> float:
    """The `beta_*` of the USA model with independent noise: the root of
    `I_{d/2+1}(beta) / I_{d/2}(beta) = 1/d`; the published analysis finds the transition of the
    uniform state continuous for `beta <= beta_*` and discontinuous above.

    Args:
        d: dimension of the ambient space, >= 2.

    Returns:
        `beta_*`.
    """
    d = _check_int("d", d, 2)
    nu = d / 2

    def gap(beta: float) -> float:
        return special.ive(nu + 1, beta) / special.ive(nu, beta) - 1.0 / d

    # the ratio rises from 0 (beta -> 0) towards 1 (beta -> infinity); at beta = 4d it is > 1/d
    return float(optimize.brentq(gap, 1e-8, 4.0 * d + 10.0, xtol=1e-14, rtol=1e-14))


# ---------------------------------------------------------------------------------------------
# The layer step's bias on the threshold (docs/token-noise.md, "The layer step")

_SCHEMES = ("network", "sde")


def _check_scheme(scheme: str) -> str:
    return _check_choice("scheme", scheme, _SCHEMES)


def _log_moment_scale(beta: float, d: int) -> float:
    """`log` of `Gamma(d/2) (2/beta)^{d/2-1} e^{beta}`, the common factor of the uniform moments
    `E[e^{beta t} t^k]` (`t = <x, z>`, z uniform on S^{d-1}) in terms of scaled Bessel functions."""
    return math.lgamma(d / 2) + (d / 2 - 1) * math.log(2 / beta) + beta


def _attention_responses(beta: float, d: int, attention: str = "usa") -> tuple[float, float, float]:
    """`(c_0, A, B)`: the attention output at the uniform law and its response to a degree-1
    perturbation. At the uniform law `y(x) = c_0 x`; for the density `rho_0 (1 + eps d <z, e>)`
    it moves by `eps d (A <x, e> x + B P_x e)`, radial part `A` and tangential part `B = c_1 /
    beta`.

    For USA, `c_0 = E[e^{beta t} t]`, `A = E[e^{beta t} t^2]` and `B = E[e^{beta t} (1 - t^2)]
    / (d - 1)`, over `t = <x, z>` with z uniform on S^{d-1}. Softmax divides the output by
    `Z = E[e^{beta t}]` and subtracts the normaliser's response, so its `c_0`, `A`, `B` are
    `c_0 / Z`, `A / Z - (c_0 / Z)^2` and `B / Z`.

    Args:
        beta: attention strength, > 0.
        d: dimension of the ambient space, >= 2.
        attention: 'usa' or 'softmax'.

    Returns:
        `(c_0, A, B)` (USA: of order `e^beta`; inf past the float range).
    """
    beta, d, attention = _check(beta, d, attention)
    nu = d / 2 - 1
    # E[e^{bt}] = G I_nu, E[e^{bt} t] = G I_{nu+1}, E[e^{bt} t^2] = G (I_{nu+2} + I_{nu+1} / b),
    # G = Gamma(d/2) (2/b)^nu (derivatives of b^{-nu} I_nu(b))
    i0, i1, i2 = (special.ive(nu + k, beta) for k in (0, 1, 2))
    c0, a_, b_ = i1, i2 + i1 / beta, i1 / beta
    if attention == "softmax":
        return c0 / i0, a_ / i0 - (c0 / i0) ** 2, b_ / i0
    log_g = _log_moment_scale(beta, d)
    if log_g > 700.0:
        return math.inf, math.inf, math.inf
    g = math.exp(log_g)
    return c0 * g, a_ * g, b_ * g


def _step_shift_coefficient(beta: float, d: int, attention: str = "usa",
                           scheme: str = "network", mean_scale: float = 1.0) -> float:
    """`kappa` in `tau_c(dt) / tau_c = 1 + kappa dt + O(dt^2)`: the first-order shift of the
    many-token threshold of one layer scheme of step `dt`, `kappa = (a/2) (c_0 + 2 A + (d - 7)
    B / 2)` for the network scheme and `a B (3 - d) / 4` for the SDE scheme (`attention_responses`).

    Derived in docs/token-noise.md ("The layer step"): the degree-1 mode's multiplier over one
    step, expanded to `dt^2`, vanishes at a `tau^2` moved by `2 dt Q`; in the network scheme the
    radial part of the output, larger where tokens are dense, enters `Q` through `c_0` and `A`.

    Args:
        beta: attention strength, > 0.
        d: dimension of the ambient space, >= 2.
        attention: 'usa' or 'softmax'.
        scheme: 'network' or 'sde'.
        mean_scale: `a` in `M = a I`, > 0.

    Returns:
        `kappa`, in units of 1 / depth time.
    """
    scheme = _check_scheme(scheme)
    a = _check_real("mean_scale", mean_scale, 0.0, strict=True)
    c0, big_a, big_b = _attention_responses(beta, d, attention)
    if scheme == "sde":
        return a * big_b * (3 - d) / 4
    return a / 2 * (c0 + 2 * big_a + (d - 7) * big_b / 2)


def step_threshold_shift(beta: float, d: int, dt: float, attention: str = "usa",
                         scheme: str = "network", mean_scale: float = 1.0) -> float:
    """The expected relative shift `tau_c(dt) / tau_c - 1 = kappa dt` of the threshold of one
    layer scheme to first order in the step (`step_shift_coefficient`).

    Args:
        beta: attention strength, > 0.
        d: dimension of the ambient space, >= 2.
        dt: the layer step, > 0.
        attention: 'usa' or 'softmax'.
        scheme: 'network' or 'sde'.
        mean_scale: `a` in `M = a I`, > 0.

    Returns:
        The relative shift (positive: the scheme orders up to a larger noise than the limit).
    """
    dt = _check_real("dt", dt, 0.0, strict=True)
    return _step_shift_coefficient(beta, d, attention, scheme, mean_scale) * dt


def _inverse_norm_integral(fn: Any, scale: float) -> float:
    """`(2 / sqrt(pi)) int_0^inf fn(u) du`, the Gaussian-integral form of `1 / |z|`
    (`1/|z| = (2/sqrt(pi)) int_0^inf exp(-u^2 |z|^2) du`); `fn` lives on `u ~ 1 / scale`, so the
    integral runs over `v = u scale`."""
    from scipy import integrate

    k = max(scale, 1.0)
    with warnings.catch_warnings():
        # at small steps quad reports roundoff while it reaches about 1e-13 absolute, well
        # below what the threshold needs (tests/test_token_noise_step.py checks the values)
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        val, _ = integrate.quad(lambda v: fn(v / k), 0.0, math.inf, limit=200, epsabs=1e-14,
                                epsrel=1e-10)
    return 2.0 / math.sqrt(math.pi) * val / k


def _step_multiplier(beta: float, d: int, dt: float, token_noise: float,
                    attention: str = "usa", scheme: str = "network",
                    mean_scale: float = 1.0) -> float:
    """The factor by which one layer step multiplies a degree-1 perturbation of the uniform law
    in the many-token limit, exact in `dt` (the normalisation integrated, not expanded).

    Network scheme: the token moves to `N(m e_1 + dt b + s g)`, `m = 1 + dt a c_0`, `s = tau
    sqrt(dt)`, g standard normal in R^d; with `phi(m) = E <N(m e_1 + s g), e_1>` the factor is
    `phi(m) + a A dt phi'(m) + (d - 1) a B dt phi(m) / m`. SDE scheme: the noise is projected
    and the radial drift is the Ito term, so `p = 1 - dt (d - 1) tau^2 / 2` is fixed and the
    factor is `E[p / |v|] + (d - 1) a B dt E[1/|v| - q^2/|v|^3]`, `v = (p, s g_perp)`.
    The Gaussian expectations are one-dimensional integrals (`1/|z| = (2/sqrt(pi)) int
    exp(-u^2 |z|^2) du`), done by quadrature.

    Args:
        beta: attention strength, > 0.
        d: dimension of the ambient space, >= 2.
        dt: the layer step, > 0.
        token_noise: `tau`, > 0.
        attention: 'usa' or 'softmax'.
        scheme: 'network' or 'sde'.
        mean_scale: `a` in `M = a I`, > 0.

    Returns:
        The multiplier (above 1: the uniform law is unstable under this scheme).
    """
    dt = _check_real("dt", dt, 0.0, strict=True)
    tau = _check_real("token_noise", token_noise, 0.0, strict=True)
    scheme = _check_scheme(scheme)
    a = _check_real("mean_scale", mean_scale, 0.0, strict=True)
    c0, big_a, big_b = _attention_responses(beta, d, attention)
    s = tau * math.sqrt(dt)
    if scheme == "network":
        lam = (1.0 + dt * a * c0) / s  # the mean's length in units of s

        def weight(u: float) -> float:
            q = 1 + 2 * u * u
            return float(q ** (-(d + 2) / 2) * math.exp(-u * u * lam * lam / q))

        # E[Z_1 / |Z|] for Z ~ N(lam e_1, I_d) and its derivative in lam
        phi = lam * _inverse_norm_integral(weight, lam)
        dphi = _inverse_norm_integral(
            lambda u: weight(u) * (1 - 2 * u * u * lam * lam / (1 + 2 * u * u)), lam)
        m = lam * s
        return phi + a * big_a * dt * dphi / s + (d - 1) * a * big_b * dt * phi / m
    lam = (1.0 - dt * (d - 1) * tau * tau / 2) / s
    inv = _inverse_norm_integral(  # E[1 / sqrt(lam^2 + W)], W ~ chi^2_{d-1}
        lambda u: math.exp(-u * u * lam * lam) * (1 + 2 * u * u) ** (-(d - 1) / 2), lam)
    w3 = 2 * (d - 1) * _inverse_norm_integral(  # E[W / (lam^2 + W)^{3/2}]
        lambda u: u * u * math.exp(-u * u * lam * lam) * (1 + 2 * u * u) ** (-(d + 1) / 2), lam)
    return lam * inv + (d - 1) * a * big_b * dt * (inv - w3 / (d - 1)) / s


def step_threshold(beta: float, d: int, dt: float, attention: str = "usa",
                   scheme: str = "network", mean_scale: float = 1.0) -> float:
    """The many-token threshold `tau_c(dt)` of one layer scheme at a finite step: the token
    noise at which `step_multiplier` is 1 (root-bracketed around the limit's `tau_c`).

    Args:
        beta: attention strength, > 0.
        d: dimension of the ambient space, >= 2.
        dt: the layer step, > 0.
        attention: 'usa' or 'softmax'.
        scheme: 'network' or 'sde'.
        mean_scale: `a` in `M = a I`, > 0.

    Returns:
        `tau_c(dt)`; compare with `math.sqrt(a / critical_coupling(beta, d, attention))`.
    """
    a = _check_real("mean_scale", mean_scale, 0.0, strict=True)
    tau_c = math.sqrt(a / critical_coupling(beta, d, attention))

    def gap(q: float) -> float:
        return _step_multiplier(beta, d, dt, q * tau_c, attention, scheme, a) - 1.0

    lo, hi = 0.5, 2.0
    while gap(lo) < 0 and lo > 1e-3:
        lo /= 2
    while gap(hi) > 0 and hi < 1e3:
        hi *= 2
    return tau_c * float(optimize.brentq(gap, lo, hi, xtol=1e-12, rtol=1e-12))
