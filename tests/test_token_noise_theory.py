"""Linear stability of the uniform state under independent token noise (tokensde.theory.token_noise)
against an independent numerical computation: the attention drift of a perturbed uniform law by
quadrature on the sphere, linearised by a central difference, without Bessel functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from tokensde.model.params import ParameterError
from tokensde.theory import token_noise as tn


def sphere_rule(d: int, k: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Nodes `(N, d)` and weights of a quadrature of the surface measure of S^{d-1}, d = 2, 3."""
    phi = 2 * np.pi * np.arange(k) / k
    if d == 2:
        return np.stack([np.cos(phi), np.sin(phi)], -1), np.full(k, 2 * np.pi / k)
    t, wt = np.polynomial.legendre.leggauss(k // 2)
    s = np.sqrt(1 - t**2)
    nodes = np.stack([np.outer(s, np.cos(phi)), np.outer(s, np.sin(phi)),
                      np.outer(t, np.ones(k))], -1).reshape(-1, 3)
    return nodes, np.outer(wt, np.full(k, 2 * np.pi / k)).ravel()


def drift_response(beta: float, d: int, attention: str) -> float:
    """`rho_0 C`, where the drift `P_x y[rho_0 + eps h](x) = eps C P_x e + O(eps^2)` for the
    degree-1 perturbation `h(z) = <z, e>`, read at a point x orthogonal to e."""
    z, w = sphere_rule(d)
    rho0 = 1.0 / w.sum()
    e = np.eye(d)[0]
    x = np.eye(d)[1]

    def drift(eps: float) -> float:
        dens = w * (rho0 + eps * (z @ e))
        kern = np.exp(beta * (z @ x))
        y = (dens * kern) @ z
        if attention == "softmax":
            y = y / (dens * kern).sum()
        return float(y @ e)  # P_x e = e here

    eps = 1e-4
    return rho0 * (drift(eps) - drift(-eps)) / (2 * eps)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("attention", ["usa", "softmax"])
@pytest.mark.parametrize("beta", [0.3, 1.0, 4.0, 9.0])
def test_threshold_equals_the_numerical_linear_stability(d, attention, beta):
    """The degree-1 rate is zero exactly at `critical_coupling`: `tau^2 / 2 = rho_0 C` from the
    quadrature, i.e. `a / tau^2 = 1 / (2 rho_0 C)`, to 1e-8."""
    numeric = 1.0 / (2.0 * drift_response(beta, d, attention))
    assert tn.critical_coupling(beta, d, attention) == pytest.approx(numeric, rel=1e-8)


def test_growth_rate_changes_sign_at_the_threshold_and_degree_one_goes_first():
    for d, attention, beta in [(2, "usa", 2.0), (3, "softmax", 5.0), (5, "usa", 1.0)]:
        k = tn.critical_coupling(beta, d, attention)
        for f, sign in [(0.9, -1), (1.1, 1)]:
            rate = tn.mode_growth_rate(beta, d, mean_scale=f * k, token_noise=1.0,
                                       attention=attention)
            assert np.sign(rate) == sign
        at = tn.mode_growth_rate(beta, d, k, 1.0, attention)
        assert abs(at) < 1e-12
        # degree 2 is still stable at the degree-1 threshold
        assert tn.mode_growth_rate(beta, d, k, 1.0, attention, degree=2) < 0


@pytest.mark.parametrize("d", [2, 3, 6])
def test_weak_attention_gives_the_mean_field_threshold_d_over_2(d):
    """beta -> 0: attention becomes the mean token, `dx = a P_x m dt + noise`, whose uniform
    state loses stability at `a / tau^2 = d / 2` (on the circle the noisy Kuramoto model's
    `K_c = sigma^2`)."""
    for attention in ("usa", "softmax"):
        assert tn.critical_coupling(1e-7, d, attention) == pytest.approx(d / 2, rel=1e-6)


def test_usa_threshold_is_the_published_formula_and_softmax_differs():
    beta, d = 3.0, 3
    published = beta ** (d / 2) / (2 ** (d / 2) * math.gamma(d / 2) * special.iv(d / 2, beta))
    assert tn.critical_coupling(beta, d, "usa") == pytest.approx(published, rel=1e-12)
    assert tn.critical_coupling(beta, d, "softmax") != pytest.approx(published, rel=1e-2)
    # huge beta: no overflow; USA's threshold is about sqrt(2 pi) beta^{(d+1)/2} e^{-beta} / 2^{d/2}
    # / Gamma(d/2), here 1.8e-15
    assert tn.critical_coupling(40.0, 3, "usa") == pytest.approx(
        math.sqrt(2 * math.pi) * 40.0**2 * math.exp(-40.0) / (2**1.5 * math.gamma(1.5)), rel=0.05)
    assert tn.critical_coupling(800.0, 3, "usa") == 0.0  # underflows, no error
    assert tn.critical_coupling(800.0, 3, "softmax") == pytest.approx(400.0, rel=2e-3)


@pytest.mark.parametrize("d", [2, 3, 4, 8])
def test_beta_star_solves_its_equation(d):
    b = tn.beta_star(d)
    assert special.iv(d / 2 + 1, b) / special.iv(d / 2, b) == pytest.approx(1 / d, rel=1e-10)
    assert 0 < b < 4 * d + 10


@pytest.mark.parametrize(("call", "name"), [
    (lambda: tn.critical_coupling(-1.0, 3), "beta"),
    (lambda: tn.critical_coupling(float("nan"), 3), "beta"),
    (lambda: tn.critical_coupling(1.0, 1), "d"),
    (lambda: tn.critical_coupling(1.0, 3, "cosine"), "attention"),
    (lambda: tn.mode_growth_rate(1.0, 3, -1.0, 1.0), "mean_scale"),
    (lambda: tn.mode_growth_rate(1.0, 3, 1.0, float("inf")), "token_noise"),
    (lambda: tn.beta_star(0), "d"),
])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ParameterError, match=name):
        call()
