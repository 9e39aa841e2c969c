"""The layer step's bias on the token-noise threshold (docs/token-noise.md, "The layer step"):
the first-order formula against the exact multiplier of the many-token map, that multiplier
against a brute-force quadrature of one step on the circle, the formula against the measured
threshold readings of the docs, the step rule and its warning, the degree-2 order parameter, the
t intervals of the threshold fits, and Richardson extrapolation."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import integrate, stats

from tokensde.model.params import ParameterError
from tokensde.study import noise_threshold as nt
from tokensde.theory import token_noise as tn


def tau_c(beta: float, d: int, attention: str = "usa") -> float:
    return math.sqrt(1 / tn.critical_coupling(beta, d, attention))


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("attention", ["usa", "softmax"])
def test_attention_responses_against_quadrature(d, attention):
    """`(c_0, A, B)` from Bessel functions against direct quadrature over `t = <x, z>` (density
    `(1 - t^2)^{(d-3)/2}` on the sphere), at beta = 2.5."""
    beta = 2.5

    def mean(f):
        w = lambda t: (1 - t * t) ** ((d - 3) / 2)  # noqa: E731
        return (integrate.quad(lambda t: f(t) * w(t), -1, 1)[0]
                / integrate.quad(w, -1, 1)[0])

    c0 = mean(lambda t: math.exp(beta * t) * t)
    a = mean(lambda t: math.exp(beta * t) * t * t)
    b = mean(lambda t: math.exp(beta * t) * (1 - t * t)) / (d - 1)
    if attention == "softmax":
        z = mean(lambda t: math.exp(beta * t))
        c0, a, b = c0 / z, a / z - (c0 / z) ** 2, b / z
    assert tn._attention_responses(beta, d, attention) == pytest.approx((c0, a, b), rel=1e-9)
    # B is the theory's linear response c_1 / beta
    assert b == pytest.approx(tn._mode_coefficient(beta, d, attention) / beta, rel=1e-9)


def brute_multiplier(beta: float, dt: float, tau: float, attention: str, scheme: str) -> float:
    """d = 2: the mean `m` of the token law after one step of the many-token map, by
    quadrature over 128 angles and a 32 x 32 Gauss-Hermite rule for the noise, for the density
    `(1 + 2 eps cos)` (`m = eps e_1`), differentiated in eps: the degree-1 multiplier."""
    k, gh = 128, 32
    th = 2 * np.pi * np.arange(k) / k
    z = np.stack([np.cos(th), np.sin(th)], -1)
    g, wg = np.polynomial.hermite_e.hermegauss(gh)
    wg = wg / wg.sum()
    gg = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    wgg = np.outer(wg, wg).ravel()
    s = tau * math.sqrt(dt)
    kern = np.exp(beta * z @ z.T)

    def mean_after(eps: float) -> float:
        dens = (1 + 2 * eps * z[:, 0]) / k
        y = (kern * dens) @ z
        if attention == "softmax":
            y = y / (kern @ dens)[:, None]
        if scheme == "network":
            u = z[:, None, :] + dt * y[:, None, :] + s * gg[None]
        else:
            proj = np.eye(2)[None] - z[:, :, None] * z[:, None, :]
            drift = np.einsum("kij,kj->ki", proj, y) - tau**2 / 2 * z
            u = (z[:, None, :] + dt * drift[:, None, :]
                 + s * np.einsum("kij,gj->kgi", proj, gg))
        xn = u[..., 0] / np.linalg.norm(u, axis=-1)
        return float((dens[:, None] * wgg[None] * xn).sum())

    return (mean_after(1e-4) - mean_after(-1e-4)) / 2e-4


@pytest.mark.parametrize("attention", ["usa", "softmax"])
@pytest.mark.parametrize("scheme", ["network", "sde"])
def test_step_multiplier_is_one_step_of_the_many_token_map(attention, scheme):
    """`step_multiplier` (Gaussian integrals in closed form) equals one step of the map on the
    circle computed by brute force, at beta = 3, dt = 0.01, tau = tau_c, to 1e-9."""
    tau = tau_c(3.0, 2, attention)
    exact = tn._step_multiplier(3.0, 2, 0.01, tau, attention, scheme)
    assert exact == pytest.approx(brute_multiplier(3.0, 0.01, tau, attention, scheme),
                                  abs=1e-9)
    assert abs(exact - 1) > 1e-6  # the step moves the threshold: tau_c is not a fixed point


@pytest.mark.parametrize(("d", "attention", "scheme", "beta"), [
    (2, "usa", "network", 3.0), (3, "usa", "network", 3.0), (2, "softmax", "network", 2.0),
    (2, "usa", "sde", 5.0), (3, "softmax", "network", 1.0), (4, "usa", "network", 2.0)])
def test_first_order_shift_is_the_slope_of_the_exact_threshold(d, attention, scheme, beta):
    """`kappa` (a hand expansion of the normalisation to dt^2) is the slope at dt -> 0 of the
    threshold of the exact one-step map: the shift over dt at dt = 1e-4 and 2e-4 lies within
    3 % of kappa, and the two agree with a linear law (second-order part small)."""
    kappa = tn._step_shift_coefficient(beta, d, attention, scheme)
    slopes = [(tn.step_threshold(beta, d, dt, attention, scheme) / tau_c(beta, d, attention)
               - 1) / dt for dt in (1e-4, 2e-4)]
    assert slopes == pytest.approx([kappa, kappa], rel=0.03)


def test_sde_scheme_has_no_first_order_shift_at_d3():
    """At d = 3 the SDE scheme's `kappa = a B (3 - d) / 4` vanishes: its exact shift falls like
    dt^2 (a quarter when dt halves), while the network's falls like dt."""
    s1, s2 = (tn.step_threshold(3.0, 3, dt, "usa", "sde") / tau_c(3.0, 3) - 1
              for dt in (0.02, 0.01))
    assert tn._step_shift_coefficient(3.0, 3, "usa", "sde") == 0.0
    assert s2 / s1 == pytest.approx(0.25, abs=0.03)
    n1, n2 = (tn.step_threshold(3.0, 3, dt) / tau_c(3.0, 3) - 1 for dt in (0.02, 0.01))
    assert n2 / n1 == pytest.approx(0.5, abs=0.03)


# Threshold readings of docs/token-noise.md, network scheme, n = 1024 unless noted: (d,
# attention, beta, dt, measured tau_c / theory, low, high). The disordered-side fits of the phase
# diagram (dt = 0.025 / tau_c^2) and of the d = 3 and softmax tables; beta = 5 at d = 2 is left
# out because its rows at 1.05 tau_c lie inside the limit's bistable window (1, 1.056).
MEASURED = [
    (2, "usa", 0.5, 0.025 / 1.0157**2, 0.9995, 0.9724, 1.0259),
    (2, "usa", 1.0, 0.025 / 1.0632**2, 1.0096, 0.9899, 1.0290),
    (2, "usa", 2.0, 0.025 / 1.2612**2, 1.0267, 1.0150, 1.0383),
    (2, "usa", 3.0, 0.025 / 1.6234**2, 1.0407, 1.0335, 1.0478),
    (3, "usa", 0.5, 0.025 / 0.8267**2, 0.987, 0.966, 1.008),
    (3, "usa", 1.0, 0.025 / 0.8578**2, 0.992, 0.971, 1.012),
    (3, "usa", 3.0, 0.025 / 1.2228**2, 1.036, 1.013, 1.058),
    (3, "usa", 3.0, 0.025 / 1.2228**2, 1.044, 1.026, 1.062),  # n = 4096
    (2, "softmax", 1.0, 0.025 / 0.9449**2, 1.004, 0.983, 1.025),
    (2, "softmax", 3.0, 0.025 / 0.7348**2, 1.008, 0.984, 1.031),
]


@pytest.mark.parametrize(("d", "attention", "beta", "dt", "ratio", "low", "high"), MEASURED)
def test_step_shift_explains_the_measured_thresholds(d, attention, beta, dt, ratio, low, high):
    """The measured threshold over the theory's lies in its interval around `1 + kappa dt`,
    where the first-order shift reaches 2 to 4 % (beta = 2 and 3 at d = 2); there the limit's
    own value, 1, lies outside the interval, so the rows can tell the two apart."""
    predicted = 1 + tn.step_threshold_shift(beta, d, dt, attention)
    assert low <= predicted <= high
    if predicted > 1.02:
        assert not low <= 1.0 <= high


def test_step_rule_and_its_warning():
    """beta = 5, d = 2 (USA): the rule takes the SDE scheme (its first-order bias is 23 times
    smaller) at a step whose exact shift is within 1 %, and the next step of the ladder up
    breaks the rule; a hand-given dt = 0.05 warns, naming the shift and the steps that meet it."""
    plan = nt._step_plan(5.0, 2)
    assert plan.scheme == "sde" and plan.chosen and not plan.warning
    assert abs(plan.shift) <= 0.01 and plan.advice["network"] < plan.advice["sde"]
    ladder = nt._ladder(nt._DT_MAX)
    up = ladder[ladder.index(plan.dt) - 1]  # 0.01 above 0.005
    assert max(abs(nt.step_error(5.0, 2, up, "usa", "sde")),
               abs(tn.step_threshold_shift(5.0, 2, up, "usa", "sde"))) > 0.01
    net = nt._step_plan(5.0, 2, scheme="network")
    assert net.dt == plan.advice["network"] and abs(net.shift) <= 0.01
    bad = nt._step_plan(5.0, 2, scheme="network", dt=0.05)
    assert bad.shift == pytest.approx(1.2844, abs=1e-3)  # tau_c(0.05) = 2.28 tau_c
    assert "+128 %" in bad.warning and f"dt <= {plan.advice['sde']:g} (sde)" in bad.warning
    with pytest.warns(nt.StepBiasWarning, match="beyond the 1 % rule"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the SDE's own large-step warning
        nt.stationary_order(3.0, 4, 2, 5.0, runs=2, T=0.1, burn=0.0, dt=0.05, samples=2)


def test_nematic_order_closed_values():
    """q = 1 for one cluster and for two antipodal clusters, where r is 1 and 0; i.i.d. uniform
    tokens give n E q^2 = 1 (the exact variance: E|x x^T - I/d|^2 = 1 - 1/d), here over 4000
    seeded draws of 50 tokens at d = 3, within 4 standard errors."""
    e = np.eye(3)[0]
    one = np.tile(e, (10, 1))
    two = np.concatenate([one, -one])
    assert nt.nematic_order(one) == pytest.approx(1.0) and nt.nematic_order(two) == \
        pytest.approx(1.0)
    assert nt._order_parameter(two) == pytest.approx(0.0, abs=1e-15)
    x = np.random.default_rng(3).standard_normal((4000, 50, 3))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    nq2 = 50 * nt.nematic_order(x) ** 2
    assert abs(nq2.mean() - 1) < 4 * nq2.std(ddof=1) / math.sqrt(len(nq2))


def test_fluctuation_fit_uses_t_quantiles():
    """With two rows the fit has no residual degrees of freedom and its interval takes the t
    quantile of the rows' runs - 1: at 4 runs it is t_3 / t_999 = 1.62 times as wide (in tau^2)
    as at 1000 runs, where it is the normal one."""
    def rows(runs: int) -> list[nt.OrderEstimate]:
        out = []
        for tau in (1.4, 1.8):
            r2 = 1 / (1 - 1.3**2 / tau**2) / 1024
            out.append(nt.OrderEstimate(tau, 1024, 2, 1.0, "usa", runs, 40.0, 20.0, 0.05,
                                        "sde", "uniform", math.sqrt(r2), 0.01, r2, 0.1 * r2,
                                        0.0, "dense"))
        return out

    widths = []
    for runs in (4, 1000):
        est, lo, hi = nt.threshold_from_fluctuations(rows(runs))
        assert est == pytest.approx(1.3, abs=1e-9)
        widths.append(hi**2 - lo**2)
    assert widths[0] / widths[1] == pytest.approx(stats.t.ppf(0.975, 3) / stats.t.ppf(0.975, 999),
                                                  rel=1e-6)


def test_extrapolation_is_richardson_over_two_steps():
    """`extrapolate=True` returns `2 X(dt/2) - X(dt)` of the two runs made alone (same seed),
    and the threshold's residual shift `2 s(dt/2) - s(dt)`, which is far below s(dt)."""
    kw = dict(n=8, d=2, beta=3.0, runs=2, T=0.4, burn=0.2, samples=5, scheme="network")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nt.StepBiasWarning)
        both = nt.stationary_order(1.0, dt=0.04, extrapolate=True, **kw)
    one = nt.stationary_order(1.0, dt=0.04, step_tol=None, **kw)
    half = nt.stationary_order(1.0, dt=0.02, step_tol=None, **kw)
    assert both.extrapolated and both.dt == 0.04
    assert both.r == pytest.approx(2 * half.r - one.r, abs=1e-12)
    assert both.q2 == pytest.approx(2 * half.q2 - one.q2, abs=1e-12)
    assert both.se == pytest.approx(math.hypot(2 * half.se, one.se), abs=1e-12)
    assert both.step_shift == pytest.approx(2 * half.step_shift - one.step_shift, abs=1e-12)
    assert abs(both.step_shift) < 0.1 * one.step_shift


def test_out_of_range_beta_and_noise_are_refused_by_name():
    """Where float64 cannot give a step or a threshold, a ParameterError names the parameter
    (no IndexError, ZeroDivisionError or OverflowError)."""
    from tokensde.study.noise_threshold import _step_plan, critical_token_noise, default_step

    with pytest.raises(ParameterError, match=r"beta = 300.*allowed"):
        default_step(300.0, 2)
    with pytest.raises(ParameterError, match=r"beta = 1000 is too large"):
        critical_token_noise(1000.0, 2)
    with pytest.raises(ParameterError, match=r"token_noise .* = 1e\+308.*allowed: tau <="):
        _step_plan(1.0, 2, token_noise=1e308)
