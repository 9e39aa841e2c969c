"""Two tokens with the MLP block (tokensde.theory.mlp_block): the rho coefficients against the spec
and a one-step simulation, p_first against p_anti, an ODE reference and a seeded Monte Carlo, and
the boundary classification against p_first at small tolerances."""

import math
import time

import numpy as np
import pytest
from scipy import integrate

from tokensde.model.checks import ParameterError
from tokensde.model.mlp import MLPS
from tokensde.theory import mlp_block as pdf
from tokensde.theory import two_tokens as tt

SPEC_VALUES = [((1.0, 3, 0.0), 0.22242), ((2.0, 4, -0.5), 0.46624), ((1.5, 6, -0.5), 0.21707),
               ((2.5, 10, 0.0), 0.12202)]


def naive_coefficients(rho, beta, d, sigma, mlp, mlp_sigma):
    """b and a straight from the cross-covariances c_ij (y_1 = p x_1 + q x_2, y_2 = q x_1 + p x_2)."""
    p = np.exp(beta) / (np.exp(beta) + np.exp(beta * rho))
    q = 1 - p
    c11 = sigma**2 * (p * p + q * q + 2 * p * q * rho) + mlp_sigma**2 * MLPS.get(mlp)().kernel(
        np.ones_like(rho))
    c12 = sigma**2 * (2 * p * q + (p * p + q * q) * rho) + mlp_sigma**2 * MLPS.get(mlp)().kernel(rho)
    b = c12 * (d - 2 + rho**2) - (d - 1) * c11 * rho
    a = (1 - rho**2) * (2 * c11 - 2 * rho * c12)
    return b, a


# ---------------------------------------------------------------------------------------------
# Coefficients
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mlp", "mlp_sigma"), [("none", 1.0), ("relu", 0.0), ("gelu", 0.0)])
def test_coefficients_without_mlp_noise_are_spec_section_5(mlp, mlp_sigma):
    rho = np.linspace(-1.0, 1.0, 41)
    for beta, d, sigma in [(0.0, 2, 1.0), (1.3, 5, 0.7), (6.0, 100, 1.0)]:
        b, a = pdf.coefficients(rho, beta, d, sigma, mlp, mlp_sigma)
        bs, as_ = tt.rho_drift_diffusion(rho, beta, d, sigma)
        np.testing.assert_allclose(b, bs, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(a, as_, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mlp", ["relu", "gelu"])
def test_coefficients_match_the_cross_covariances(mlp):
    rho = np.linspace(-0.99, 0.99, 37)
    for beta, d, sigma, ms in [(1.0, 4, 1.0, 0.3), (3.0, 7, 0.5, 2.0), (0.5, 3, 0.0, 1.0)]:
        b, a = pdf.coefficients(rho, beta, d, sigma, mlp, ms)
        bn, an = naive_coefficients(rho, beta, d, sigma, mlp, ms)
        np.testing.assert_allclose(b, bn, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(a, an, rtol=1e-9, atol=1e-12)


def test_coefficients_by_one_normalised_step_in_r_d():
    """x_i' = (x_i + h xi_i)/|.| with (xi_1, xi_2) of cross-covariance c_ij I: E drho = b dt + O(dt^2)
    (the linear part, of mean zero, is subtracted as a control variate) and E drho^2 = a dt."""
    d, rho, beta, sigma, ms = 5, 0.3, 1.5, 1.0, 0.8
    rng = np.random.default_rng(11)
    n, dt = 200_000, 1e-4
    x1 = np.zeros(d)
    x1[0] = 1.0
    x2 = np.zeros(d)
    x2[:2] = rho, math.sqrt(1 - rho * rho)
    p = math.exp(beta) / (math.exp(beta) + math.exp(beta * rho))
    q = 1 - p
    c11 = sigma**2 * (p * p + q * q + 2 * p * q * rho) + ms**2
    c12 = sigma**2 * (2 * p * q + (p * p + q * q) * rho) + ms**2 * float(
        MLPS.get("relu")().kernel(np.array(rho)))
    chol = np.linalg.cholesky(np.array([[c11, c12], [c12, c11]]))
    xi = rng.standard_normal((n, d, 2)) @ chol.T
    h = math.sqrt(dt)
    y1, y2 = x1 + h * xi[..., 0], x2 + h * xi[..., 1]
    new = np.einsum("nd,nd->n", y1, y2) / np.sqrt((y1 * y1).sum(1) * (y2 * y2).sum(1))
    step = new - rho
    linear = h * (xi[..., 0] @ (x2 - rho * x1) + xi[..., 1] @ (x1 - rho * x2))
    est = (step - linear) / dt
    b, a = pdf.coefficients(rho, beta, d, sigma, "relu", ms)
    assert abs(est.mean() - b) < 5 * est.std() / math.sqrt(n)
    assert np.mean(step**2) / dt == pytest.approx(a, rel=0.02)


def test_bad_input_names_itself():
    with pytest.raises(ParameterError, match="tol"):
        pdf.p_first(1.0, 4, 0.0, 0.0)
    with pytest.raises(ParameterError, match="tol"):
        pdf.p_first(1.0, 4, 0.0, 1.0)
    with pytest.raises(ParameterError, match="rho0"):
        pdf.p_first(1.0, 4, 1.5, 1e-3)
    with pytest.raises(ParameterError, match="mlp"):
        pdf.p_first(1.0, 4, 0.0, 1e-3, mlp="tanh")
    with pytest.raises(ParameterError, match="sigma"):
        pdf.p_first(1.0, 4, 0.0, 1e-3, sigma=0.0)
    with pytest.raises(ParameterError, match="d"):
        pdf.coefficients(0.0, 1.0, 1.5)
    with pytest.raises(ParameterError, match="rho"):
        pdf.coefficients(1.01, 1.0, 4)


# ---------------------------------------------------------------------------------------------
# p_first
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "value"), SPEC_VALUES)
def test_vanishing_tol_gives_the_spec_values(args, value):
    assert pdf.p_first(*args, 1e-250) == pytest.approx(value, abs=6e-6)


@pytest.mark.parametrize(("beta", "d", "rho0"), [
    (1.0, 3, 0.0), (2.0, 4, -0.5), (0.8, 4, 0.7), (2.5, 10, 0.0), (4.0, 100, 0.3),
    (6.0, 300, 0.5), (3.0, 30, -0.999)])
def test_vanishing_tol_gives_p_anti(beta, d, rho0):
    assert pdf.p_first(beta, d, rho0, 1e-250) == pytest.approx(tt.p_anti(beta, d, rho0), rel=1e-8,
                                                               abs=1e-12)


def test_p_anti_by_extrapolation_from_moderate_tol():
    """P(tol) = P_anti + A tol^(1 - alpha_-) + o: two tolerances and the known power give P_anti."""
    beta, d, rho0 = 2.0, 4, -0.5
    gamma = 1.0 - pdf.boundaries(beta, d).alpha_minus
    t1, t2 = 1e-8, 1e-12
    p1, p2 = pdf.p_first(beta, d, rho0, [t1, t2])
    assert abs(p1 - tt.p_anti(beta, d, rho0)) > 1e-5  # the tolerance matters at 1e-8 ...
    extrapolated = (p2 * t1**gamma - p1 * t2**gamma) / (t1**gamma - t2**gamma)
    assert extrapolated == pytest.approx(tt.p_anti(beta, d, rho0), abs=1e-9)  # ... and is removed


def reference_by_ode(beta, d, rho0, tol, mlp, ms):
    """(S(1-tol) - S(rho0)) / (S(1-tol) - S(-1+tol)) by an adaptive ODE solver on (L, S) in rho."""
    def rhs(r, y):
        b, a = naive_coefficients(np.array(r), beta, d, 1.0, mlp, ms)
        return [-2 * b / a, math.exp(y[0])]

    def run(end):
        sol = integrate.solve_ivp(rhs, (0.0, end), [0.0, 0.0], method="DOP853", rtol=1e-12,
                                  atol=1e-14, dense_output=True)
        return sol.y[1, -1], sol.sol

    s_hi, upper = run(1.0 - tol)
    s_lo, lower = run(-1.0 + tol)
    s0 = (upper if rho0 > 0 else lower)(rho0)[1]
    return (s_hi - s0) / (s_hi - s_lo)


@pytest.mark.parametrize(("beta", "d", "rho0", "tol", "mlp", "ms"), [
    (2.0, 4, -0.5, 1e-3, "relu", 0.3), (1.0, 6, 0.2, 1e-2, "gelu", 1.0),
    (3.0, 3, -0.8, 1e-4, "relu", 2.0)])
def test_p_first_against_an_ode_reference(beta, d, rho0, tol, mlp, ms):
    assert pdf.p_first(beta, d, rho0, tol, mlp=mlp, mlp_sigma=ms) == pytest.approx(
        reference_by_ode(beta, d, rho0, tol, mlp, ms), rel=1e-8)


@pytest.mark.parametrize(("beta", "d", "rho0", "tol", "mlp", "ms"), [
    (2.0, 4, -0.5, 1e-3, "relu", 1.0), (3.0, 5, -0.3, 1e-2, "gelu", 0.5)])
@pytest.mark.slow
def test_p_first_against_monte_carlo(beta, d, rho0, tol, mlp, ms):
    runs = 6000
    mc = pdf.monte_carlo_first(beta, d, rho0, tol, mlp=mlp, mlp_sigma=ms, runs=runs, dt=2e-3,
                               kappa=0.005, seed=5)
    exact = pdf.p_first(beta, d, rho0, tol, mlp=mlp, mlp_sigma=ms)
    assert mc.undecided == 0.0
    se = math.sqrt(exact * (1 - exact) / runs)
    assert abs(mc.antipodal - exact) < 4 * se + 0.004


def test_p_first_shapes_limits_and_invariances():
    betas = np.array([0.5, 1.0, 2.0, 4.0, 8.0])
    vec = pdf.p_first(betas, 4, -0.5, 1e-6, mlp="gelu", mlp_sigma=0.3)
    assert vec.shape == (5,)
    for b, p in zip(betas, vec, strict=True):
        assert p == pdf.p_first(float(b), 4, -0.5, 1e-6, mlp="gelu", mlp_sigma=0.3)
    rho = np.linspace(-0.9, 0.9, 7)
    path = pdf.p_first(2.0, 4, rho, 1e-4, mlp="relu", mlp_sigma=0.5)
    assert np.all(np.diff(path) < 0)
    assert pdf.p_first(2.0, 4, -1.0, 1e-4, mlp="relu") == 1.0
    assert pdf.p_first(2.0, 4, 1.0, 1e-4, mlp="relu") == 0.0
    # only mlp_sigma / sigma matters (a change of time)
    assert pdf.p_first(2.0, 4, -0.5, 1e-6, 2.0, "relu", 0.6) == pytest.approx(
        pdf.p_first(2.0, 4, -0.5, 1e-6, 1.0, "relu", 0.3), rel=1e-12)
    # a vanishing block changes nothing at a fixed tolerance
    assert pdf.p_first(2.0, 4, -0.5, 1e-4, mlp="relu", mlp_sigma=1e-7) == pytest.approx(
        pdf.p_first(2.0, 4, -0.5, 1e-4), abs=1e-8)
    # a probability below the float range keeps its accuracy in logs (p ~ tol^23.5 here)
    logs = pdf.log_p_first(2.0, 50, -0.5, np.array([1e-12, 1e-16]), mlp="relu", mlp_sigma=0.3)
    assert pdf.p_first(2.0, 50, -0.5, 1e-16, mlp="relu", mlp_sigma=0.3) == 0.0
    assert logs[1] - logs[0] == pytest.approx(23.5 * math.log(1e-4), rel=1e-9)


def test_p_first_is_fast():
    pdf.p_first(2.0, 10, -0.5, 1e-12, mlp="gelu", mlp_sigma=0.3)  # kernel at the nodes cached
    start = time.perf_counter()
    pdf.p_first(np.linspace(0.5, 8.0, 16), 1000, -0.5, 1e-12, mlp="gelu", mlp_sigma=0.3)
    assert (time.perf_counter() - start) / 16 < 0.05


# ---------------------------------------------------------------------------------------------
# Boundary classification and the rate in tol
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mlp", "ms"), [("none", 1.0), ("relu", 0.3), ("gelu", 2.0)])
def test_endpoint_exponents_from_the_coefficients(mlp, ms):
    for beta, d, sigma in [(0.5, 3, 1.0), (2.0, 7, 0.5), (4.0, 40, 1.0)]:
        bd = pdf.boundaries(beta, d, sigma, mlp, ms)
        u = 1e-10
        b, a = pdf.coefficients(-1.0 + u, beta, d, sigma, mlp, ms)
        assert bd.alpha_minus == pytest.approx(u * 2 * b / a, rel=1e-4)
        b, a = pdf.coefficients(1.0 - u, beta, d, sigma, mlp, ms)
        assert bd.alpha_plus == pytest.approx(-u * 2 * b / a, rel=1e-4, abs=1e-6)


def test_classification():
    assert pdf.antipodal_reachable(2.5, "relu", 0.3)
    assert pdf.antipodal_reachable(2.0, "gelu", 1.0)
    assert not pdf.antipodal_reachable(3.0, "relu", 0.3)
    assert not pdf.antipodal_reachable(2.5, "none")
    assert not pdf.antipodal_reachable(2.5, "relu", 0.0)
    # spec model: antipodal attracts iff cosh 2 beta > d - 2
    assert pdf.boundaries(2.0, 4).antipodal_attracts
    assert not pdf.boundaries(0.5, 4).antipodal_attracts
    # with the block: only below d = 3, whatever beta
    assert pdf.boundaries(8.0, 2.9, mlp="relu", mlp_sigma=0.01).antipodal_attracts
    assert not pdf.boundaries(8.0, 3.0, mlp="relu", mlp_sigma=0.01).antipodal_attracts
    assert pdf.boundaries(8.0, 3.0, mlp="relu", mlp_sigma=0.01).log_rate
    assert pdf.boundaries(8.0, 4.0, mlp="gelu", mlp_sigma=0.01).tol_power == 0.5
    # merged attracts iff its Lyapunov exponent -sigma^2(d-1) - mu^2((d-1) - k1(d-3)) < 0
    k1 = pdf.kernel_constants("gelu")[1]
    assert k1 == pytest.approx(1.0720316, abs=1e-6)
    assert pdf.kernel_constants("relu") == (0.0, 1.0)
    for d in (4, 10, 40, 200):
        for ms in (0.5, 3.0, 10.0):
            lyap = -(d - 1) - ms**2 * ((d - 1) - k1 * (d - 3))
            assert pdf.boundaries(1.0, d, 1.0, "gelu", ms).merged_attracts == (lyap < 0)
            assert pdf.boundaries(1.0, d, 1.0, "relu", ms).merged_attracts
    # both ends repel (GELU, strong block, large d): the power is alpha_- - alpha_+
    bd = pdf.boundaries(1.0, 40, 1.0, "gelu", 10.0)
    assert not bd.merged_attracts and not bd.limit_positive
    assert bd.tol_power == pytest.approx(bd.alpha_minus - bd.alpha_plus)
    assert pdf.boundaries(2.0, 4).limit_positive


@pytest.mark.parametrize(("mlp", "ms"), [("relu", 0.3), ("gelu", 1.0)])
@pytest.mark.parametrize("d", [4, 5, 6, 10])
def test_p_first_vanishes_like_the_predicted_power_of_tol(mlp, ms, d):
    power = pdf.boundaries(2.0, d, 1.0, mlp, ms).tol_power
    assert power == (d - 3) / 2
    tols = np.array([1e-10, 1e-12])
    logs = pdf.log_p_first(2.0, d, -0.5, tols, mlp=mlp, mlp_sigma=ms)
    slope = np.diff(logs)[0] / np.diff(np.log(tols))[0]
    assert slope == pytest.approx(power, abs=2e-3)


@pytest.mark.parametrize(("mlp", "ms"), [("relu", 0.3), ("gelu", 1.0)])
def test_critical_dimension_decays_like_one_over_log(mlp, ms):
    """d = 3: 1/P is affine in log(1/tol) up to O(tol^(1 - alpha_+))."""
    assert pdf.boundaries(2.0, 3, 1.0, mlp, ms).log_rate
    inv = 1.0 / pdf.p_first(2.0, 3, -0.5, np.array([1e-8, 1e-10, 1e-12]), mlp=mlp, mlp_sigma=ms)
    first, second = np.diff(inv)
    assert first > 0.3
    assert second == pytest.approx(first, rel=1e-4)


def test_below_three_the_limit_is_positive_and_approached_like_a_power():
    """d = 2.5: P -> P_0 > 0 with P - P_0 ~ tol^(1 - alpha_-) = tol^(1/4)."""
    bd = pdf.boundaries(2.0, 2.5, 1.0, "relu", 0.3)
    assert bd.antipodal_reachable and bd.antipodal_attracts
    p = pdf.p_first(2.0, 2.5, -0.5, np.array([1e-6, 1e-8, 1e-10, 1e-12]), mlp="relu",
                    mlp_sigma=0.3)
    gaps = -np.diff(p)
    assert gaps[-2] / gaps[-1] == pytest.approx(100 ** (1 - bd.alpha_minus), rel=0.01)
    assert p[-1] > 0.5
