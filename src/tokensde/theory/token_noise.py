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

from scipy import optimize, special

from ..model.checks import check_choice, check_int, check_real

ATTENTIONS = ("usa", "softmax")


def _check(beta: float, d: int, attention: str) -> tuple[float, int, str]:
    beta = check_real("beta", beta, 0.0, strict=True)
    return beta, check_int("d", d, 2), check_choice("attention", attention, ATTENTIONS)


def _log_ive(nu: float, beta: float) -> float:
    """`log(I_nu(beta) e^{-beta})`, finite for every beta > 0."""
    return math.log(special.ive(nu, beta))


def _log_mode_coefficient(beta: float, d: int, attention: str, degree: int) -> float:
    nu = degree + d / 2 - 1
    if attention == "softmax":
        return _log_ive(nu, beta) - _log_ive(d / 2 - 1, beta)
    # rho_0 lambda_l = 2^{d/2 - 1} Gamma(d/2) beta^{1 - d/2} I_nu(beta)
    return ((d / 2 - 1) * math.log(2) + math.lgamma(d / 2) + (1 - d / 2) * math.log(beta)
            + _log_ive(nu, beta) + beta)


def mode_coefficient(beta: float, d: int, attention: str = "usa", degree: int = 1) -> float:
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
    log = _log_mode_coefficient(beta, d, attention, check_int("degree", degree, 0))
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
    a = check_real("mean_scale", mean_scale, 0.0)
    tau = check_real("token_noise", token_noise, 0.0)
    degree = check_int("degree", degree, 1)
    c = mode_coefficient(beta, d, attention, degree)
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
    d = check_int("d", d, 2)
    nu = d / 2

    def gap(beta: float) -> float:
        return special.ive(nu + 1, beta) / special.ive(nu, beta) - 1.0 / d

    # the ratio rises from 0 (beta -> 0) towards 1 (beta -> infinity); at beta = 4d it is > 1/d
    return float(optimize.brentq(gap, 1e-8, 4.0 * d + 10.0, xtol=1e-14, rtol=1e-14))
