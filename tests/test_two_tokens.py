"""Two tokens (spec §5-§6): exact P_anti against closed forms and limits, the reduced diffusion
against the spec coefficients, and the full network against the theory."""

import json
import math
import warnings

import numpy as np
import pytest
import torch
import typer
from scipy import integrate
from typer.testing import CliRunner

from tokensde import ModelParams, ParameterError, StoppingRule
from tokensde.analysis import pair_monte_carlo as mc
from tokensde.analysis.stats import wilson
from tokensde.sim.layers import _attention_weights, network_step
from tokensde.sim.reduced import reduced_diffusion
from tokensde.sim.rng import RunStreams
from tokensde.sim.samplers import _full_noise
from tokensde.sweep import two_token as phase_grid
from tokensde.sweep.kinds import get_kind
from tokensde.sweep.store import read_table
from tokensde.theory import mlp_block as pdf
from tokensde.theory import two_tokens as tt

SPEC_VALUES = [((1.0, 3, 0.0), 0.22242), ((2.0, 4, -0.5), 0.46624), ((1.5, 6, -0.5), 0.21707),
               ((2.5, 10, 0.0), 0.12202)]


def spec_coefficients(rho, d, beta, sigma=1.0):
    """Spec §5 drift and squared diffusion of rho, written with p = e^b / (e^b + e^{b rho})."""
    p = np.exp(beta) / (np.exp(beta) + np.exp(beta * rho))
    q = 1 - p
    s, m = p * p + q * q, 2 * p * q
    return sigma**2 * (1 - rho**2) * ((d - 2) * m - s * rho), 2 * s * sigma**2 * (1 - rho**2) ** 2


@pytest.mark.parametrize(("d", "closed"), [
    (2, 0.0), (3, 0.0),
    (4, 0.5 * math.log(2.0 + math.sqrt(3.0))),
    (1026, 0.5 * math.log(1024.0 + math.sqrt(1024.0**2 - 1.0))),
])
def test_beta_c_closed_form(d, closed):
    # beta_c(d) = arccosh(d - 2)/2, i.e. cosh(2 beta_c) = d - 2 (0 where d - 2 <= 1)
    assert tt.beta_c(d) == pytest.approx(closed, rel=1e-15, abs=0.0)
    if d > 3:
        assert math.cosh(2.0 * tt.beta_c(d)) == pytest.approx(d - 2, rel=1e-12)
    np.testing.assert_array_equal(tt.beta_c(np.array([d, d])), [tt.beta_c(d)] * 2)


# ---------------------------------------------------------------------------------------------
# exact P_anti
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("point", "value"), SPEC_VALUES)
def test_spec_reference_values(point, value):
    assert tt.p_anti(*point) == pytest.approx(value, abs=1e-5)


@pytest.mark.parametrize("point", [(1.0, 3, 0.0), (2.0, 4, -0.5), (0.9, 5, 0.7), (1.2, 5, -0.999),
                                   (tt.beta_c(6) + 1e-3, 6, 0.0), (3.0, 40, -0.2), (0.4, 2.5, 0.3)])
def test_agrees_with_adaptive_quadrature(point):
    assert tt.p_anti(*point) == pytest.approx(tt.p_anti_reference(*point), rel=1e-8, abs=1e-12)


def test_d2_is_arccos_over_pi():
    rho0 = np.linspace(-0.999, 0.999, 41)
    for beta in (0.0, 0.3, 2.0, 50.0):
        assert np.max(np.abs(tt.p_anti(beta, 2, rho0) - np.arccos(rho0) / np.pi)) < 1e-12


@pytest.mark.parametrize("d", [4, 6, 10])
def test_zero_below_positive_above_and_continuous_at_beta_c(d):
    bc = tt.beta_c(d)
    assert math.cosh(2 * bc) == pytest.approx(d - 2)
    below = tt.p_anti(np.linspace(0, bc, 20), d, np.linspace(-0.99, 0.99, 20))
    assert np.all(below == 0.0)
    assert tt.p_anti(bc + 1e-3, d, 0.0) > 0
    # continuous: linear onset, P(beta_c + delta) ~ c delta
    small = tt.p_anti(bc + np.array([1e-9, 2e-9, 1e-6]), d, -0.5)
    assert 0 < small[0] < 1e-7 and small[1] / small[0] == pytest.approx(2.0, rel=1e-3)
    assert small[2] < 1e-4


def test_increasing_in_beta_towards_arccos_limit():
    rho0 = -0.3
    limit = math.acos(rho0) / math.pi
    for d in (3, 5, 12):
        beta = tt.beta_c(d) + np.geomspace(1e-3, 50, 80)
        p = tt.p_anti(beta, d, rho0)
        assert np.all(np.diff(p) > 0) and np.all(p < limit)
    # the gap closes like beta^{-1/2} (the boundary layer of width 1/beta at rho = 1)
    big = np.array([50.0, 1e3, 1e4])
    gap = limit - tt.p_anti(big, 4, rho0)
    assert np.all(gap > 0) and gap[-1] < 2e-3
    scaled = gap * np.sqrt(big)
    assert np.ptp(scaled) < 0.1 * scaled[0]


def test_vectorised_grid_is_finite_and_equals_pointwise():
    beta, d = np.meshgrid(np.linspace(0, 50, 12), np.arange(2, 62, 5), indexing="ij")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid = tt.p_anti(beta, d, -0.2)
        uni = tt.p_anti_uniform(beta, d)
    assert grid.shape == beta.shape and np.all(np.isfinite(grid)) and np.all(np.isfinite(uni))
    assert np.all((grid >= 0) & (grid <= 1)) and np.all((uni >= 0) & (uni <= 1))
    for i, j in [(3, 2), (11, 11), (6, 0), (1, 7)]:
        assert grid[i, j] == pytest.approx(tt.p_anti(beta[i, j], d[i, j], -0.2), abs=1e-13)
    assert tt.p_anti(1.0, 3, [-1.0, 1.0]).tolist() == [1.0, 0.0]


def test_uniform_pair_density_and_average():
    for d in (2, 3, 7):  # rho = cos(theta): a probability density with E rho^2 = 1/d
        def moment(k, d=d):
            return integrate.quad(lambda th: math.cos(th) ** k * math.sin(th)
                                  * tt.uniform_pair_density(math.cos(th), d), 0, math.pi)[0]

        assert moment(0) == pytest.approx(1.0, abs=1e-9)
        assert moment(2) == pytest.approx(1 / d, abs=1e-9)
    assert tt.p_anti_uniform(0.7, 2) == pytest.approx(0.5, abs=1e-13)
    for beta, d in [(1.0, 3), (2.0, 6)]:
        a = (d - 3) / 2
        direct = integrate.quad(lambda r, b=beta, d=d: tt.p_anti(b, d, r), -1, 1, weight="alg",
                                wvar=(a, a), epsabs=1e-12)[0]
        norm = integrate.quad(lambda r: 1.0, -1, 1, weight="alg", wvar=(a, a))[0]
        assert tt.p_anti_uniform(beta, d) == pytest.approx(direct / norm, abs=1e-8)
    assert tt.p_anti_uniform(0.5, 8) == 0.0


# large d: S' falls like (1 - rho)^((d-3)/2) towards rho = 1, so int_{rho0}^1 S' sits in a layer
# of width ~(1 - rho0)/d, and P_anti(0) can be far below 1e-10 near beta_c. Checked against the
# independent first-passage quadrature at tol = 1e-250, which is the tol -> 0 limit to ~1e-12
# here (its correction goes like tol^(1 + a_-), 1 + a_- >= 0.05 at beta_c + 0.05 for large d).
LARGE_D_POINTS = [(beta_c_offset, d, rho0) for d in (300, 1024, 4096, 10000)
                  for beta_c_offset in (1.0, 3.0) for rho0 in (-0.9, -0.5, -0.2, 0.0, 0.5, 0.9)]


def test_large_d_agrees_with_first_passage_at_vanishing_tol():
    beta = np.array([tt.beta_c(d) + off for off, d, _ in LARGE_D_POINTS] + [12.0] * 8)
    d = np.array([d for _, d, _ in LARGE_D_POINTS] + [300, 1000, 3000, 10000] * 2, dtype=float)
    rho0 = np.array([r for _, _, r in LARGE_D_POINTS] + [0.0] * 4 + [-0.7] * 2 + [0.9] * 2)
    got = tt.p_anti(beta, d, rho0)
    want = pdf.p_first(beta, d, rho0, 1e-250)
    shown = want > 1e-290  # P_anti(0.9) underflows at the largest d
    assert shown.sum() >= 50 and np.all(got[~shown] < 1e-280)
    np.testing.assert_allclose(got[shown], want[shown], rtol=1e-8, atol=0)


@pytest.mark.parametrize(("beta", "d", "rho0", "value"), [
    (6.811, 1024, 0.0, 0.07325443482059), (6.811, 1024, -0.5, 0.36216133843417),
    (7.505, 4096, -0.5, 0.32615461523856), (8.0, 1000, -0.9, 0.75018881482938),
    (8.0, 300, 0.0, 0.20018193326434)])
def test_points_that_the_endpoint_grid_got_wrong(beta, d, rho0, value):
    # formerly -0.0, 0.3117, 0.2996, 0.7106 and off by 1e-8 (values: p_first at tol = 1e-250)
    assert tt.p_anti(beta, d, rho0) == pytest.approx(value, rel=1e-8)
    assert tt.p_anti(beta, d, rho0) == pytest.approx(pdf.p_first(beta, d, rho0, 1e-250), rel=1e-8)


def test_small_p_anti_keeps_its_relative_accuracy():
    beta = tt.beta_c(10000) + 0.05  # P_anti(0) ~ 2e-16, P_anti(0.9) below 1e-200
    rho0 = np.array([-0.6, -0.1, 0.0, 0.9])
    np.testing.assert_allclose(tt.p_anti(beta, 10000, rho0), pdf.p_first(beta, 10000, rho0, 1e-250),
                               rtol=1e-8, atol=0)


@pytest.mark.parametrize(("beta", "d"), [(6.811, 1024), (7.505, 4096), (12.0, 10000),
                                         (tt.beta_c(3000) + 0.05, 3000)])
@pytest.mark.slow
def test_uniform_average_at_large_d(beta, d):
    # the rho_0 density (1 - rho^2)^((d-3)/2) has width 1/sqrt(d): average p_anti over it directly
    half_width = 14.0 / math.sqrt(d)
    x, w = np.polynomial.legendre.leggauss(12)
    edges = np.linspace(-half_width, half_width, 161)
    mid, half = 0.5 * (edges[1:] + edges[:-1]), 0.5 * np.diff(edges)
    rho = (mid[:, None] + half[:, None] * x).ravel()
    log_density = 0.5 * (d - 3) * np.log1p(-rho * rho)
    weights = np.exp(log_density - log_density.max()) * (half[:, None] * w).ravel()
    direct = weights @ tt.p_anti(beta, d, rho) / weights.sum()
    assert tt.p_anti_uniform(beta, d) == pytest.approx(direct, rel=1e-8)


def test_lyapunov_exponents_are_the_endpoint_limits_of_the_drift():
    for beta, d in [(0.4, 5), (1.0, 3), (2.0, 8), (30.0, 6)]:
        w = 1e-7
        b, a = spec_coefficients(-1 + w, d, beta)
        assert tt.lyapunov_antipodal(beta, d) == pytest.approx(b / w - a / (2 * w * w), rel=1e-5)
        b, a = spec_coefficients(1 - w, d, beta)
        assert tt.lyapunov_merged(d) == pytest.approx(-b / w - a / (2 * w * w), rel=1e-5)
    # the antipodal exponent changes sign exactly at beta_c
    bc = tt.beta_c(7)
    assert tt.lyapunov_antipodal(bc - 1e-6, 7) > 0 > tt.lyapunov_antipodal(bc + 1e-6, 7)
    assert tt.antipodal_attracts(bc + 1e-6, 7) and not tt.antipodal_attracts(bc - 1e-6, 7)
    assert tt.beta_c(np.array([2.0, 3.0, 4.0])).tolist() == [0.0, 0.0, pytest.approx(
        math.acosh(2) / 2)]


@pytest.mark.parametrize(("call", "name"), [
    (lambda: tt.p_anti(-1.0, 3, 0.0), "beta"),
    (lambda: tt.p_anti(1.0, 1.5, 0.0), "d"),
    (lambda: tt.p_anti(1.0, 3, 1.2), "rho0"),
    (lambda: mc.monte_carlo(1.0, 3, "sideways", runs=4, T=1, dt=0.1), "rho0"),
    (lambda: mc.monte_carlo(1.0, 3, 0.0, runs=4, T=1, dt=0.1, stopping=StoppingRule.decided(0.0)),
     "tol"),
    (lambda: mc.monte_carlo(1.0, 3, 0.0, runs=4, T=1, dt=0.1, stopping=StoppingRule(),
                            outcome_tol=1.0), "tol"),
    (lambda: mc.monte_carlo(1.0, 3, 0.0, runs=4, T=1, dt=0.1, outcome_tol=1e-6), "outcome_tol"),
    (lambda: mc.monte_carlo(1.0, 3, 0.0, runs=4, T=1, dt=0.1, engine="sde"), "engine"),
    (lambda: reduced_diffusion(1.0, 3, 0.0, T=1.0, dt=2.0, runs=3), "dt"),
])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ParameterError, match=name):
        call()


# ---------------------------------------------------------------------------------------------
# the reduced diffusion
# ---------------------------------------------------------------------------------------------


def _one_step_moments(dt, runs, **kwargs):
    paths = reduced_diffusion(T=dt, dt=dt, runs=runs, seed=11, **kwargs)
    step = paths.rho[:, -1] - paths.rho[:, 0]
    mean, second = step.mean() / dt, (step * step).mean() / dt
    return mean, second, step.std() / math.sqrt(runs) / dt


@pytest.mark.parametrize(("beta", "d", "rho"), [(1.0, 4, -0.3), (2.0, 8, 0.4), (0.5, 3, -0.8)])
def test_reduced_one_layer_moments_match_spec(beta, d, rho):
    mean, second, se = _one_step_moments(3e-3, 2_000_000, beta=beta, d=d, rho0=rho)
    b, a = spec_coefficients(rho, d, beta)
    assert tt.rho_drift_diffusion(rho, beta, d) == pytest.approx((b, a), rel=1e-12)
    assert 4 * se < 0.08 * abs(b)  # sharp enough to see a missing Ito term (~ 2 s rho dt)
    assert abs(mean - b) < 4 * se + 0.01 * abs(b)
    assert second == pytest.approx(a, rel=0.02)  # O(dt) bias ~ 1 %


def test_reduced_hybrid_moments_match_the_network():
    """The §6 rho-coefficients (derived from spec §3) against one layer of the network."""
    beta, eps, rho, dt, runs = 0.8, 0.6, -0.4, 1e-3, 200_000
    b, a = tt.hybrid_drift_diffusion(rho, beta, eps)
    mean, second, se = _one_step_moments(3e-3, 2_000_000, beta=beta, d=3, rho0=rho, eps=eps)
    assert 4 * se < 0.1 * abs(b)
    assert abs(mean - b) < 4 * se + 0.01 * abs(b) and second == pytest.approx(a, rel=0.02)
    p = ModelParams(n=2, d=3, beta=beta, attention="usa", mean="identity", noise="scalar", eps=eps)
    x = torch.zeros(runs, 2, 3, dtype=torch.float64)
    x[:, 0, 0], x[:, 1, 0], x[:, 1, 1] = 1.0, rho, math.sqrt(1 - rho * rho)
    y = _attention_weights(x, p) @ x
    xi = _full_noise(y, p, RunStreams(seed=5, runs=runs))
    steps = []
    for sign in (1.0, -1.0):  # antithetic pair
        z = network_step(x, y, sign * xi, p, dt)
        steps.append((z[:, 0] * z[:, 1]).sum(-1) - rho)
    drift = (0.5 * (steps[0] + steps[1]) / dt).numpy()
    sq = (0.5 * (steps[0] ** 2 + steps[1] ** 2) / dt).numpy()
    se_b = drift.std() / math.sqrt(runs)
    assert abs(drift.mean() - b) < 4 * se_b + 0.01 * abs(b)
    assert sq.mean() == pytest.approx(a, rel=0.01)


def test_hybrid_threshold_and_exponents():
    beta = np.array([0.0, 0.5, 3.0])
    assert np.allclose(tt.hybrid_eps2_c(beta), 2 * np.exp(-beta))
    for b in beta:
        e = math.sqrt(2 * math.exp(-b))
        for f in (0.6, 1.5):
            lam_m, lam_p = tt.hybrid_lyapunov(b, f * e)
            assert np.sign(lam_m) == -np.sign(lam_p) == np.sign(1 - f)
            assert lam_p == pytest.approx(-math.exp(2 * b) * lam_m)
            # exponents are the endpoint limits of the derived rho-coefficients
            w = 1e-7
            dr, df = tt.hybrid_drift_diffusion(-1 + w, b, f * e)
            assert lam_m == pytest.approx(dr / w - df / (2 * w * w), rel=1e-4)
            dr, df = tt.hybrid_drift_diffusion(1 - w, b, f * e)
            assert lam_p == pytest.approx(-dr / w - df / (2 * w * w), rel=1e-4)
    assert tt.hybrid_p_anti(0.5, 2.0) == 1.0 and tt.hybrid_p_anti(0.5, 0.1) == 0.0


@pytest.mark.slow
def test_reduced_diffusion_is_seeded_and_ends_match_theory():
    kw = {"beta": 2.0, "d": 4, "rho0": -0.5, "T": 40.0, "dt": 0.02, "runs": 20_000}
    a, b = reduced_diffusion(seed=1, **kw), reduced_diffusion(seed=1, **kw)
    assert np.array_equal(a.z, b.z)
    anti, merged = tt.classify_pair(*(g[:, -1] for g in a.log_gaps()), 1e-8)
    assert (anti | merged).mean() > 0.995
    lo, hi = wilson(anti.sum(), kw["runs"], 0.99)
    assert lo <= tt.p_anti(2.0, 4, -0.5) <= hi


# ---------------------------------------------------------------------------------------------
# Monte Carlo of the full network
# ---------------------------------------------------------------------------------------------

# (beta, d, rho0, T): supercritical points well above beta_c (relaxation at -1 is fast there)
# and subcritical ones well below it; dt = default_dt(d) = 0.05/d.
MC_GRID = [
    (1.0, 3, 0.0, 40), (2.0, 4, -0.5, 35), (2.5, 10, 0.0, 25), (3.0, 3, 0.5, 30),
    (2.0, 5, 0.0, 30), (1.5, 4, -0.8, 40), (3.0, 8, -0.3, 25), (1.2, 3, -0.2, 40),
    (0.3, 5, -0.8, 15), (0.5, 8, -0.5, 10), (0.2, 5, -0.9, 15), (1.0, 10, -0.95, 15),
]


def _check_mc(beta, d, rho0, T, runs, seed):
    out = mc.monte_carlo(beta, d, rho0, runs=runs, T=T, seed=seed)
    lo, hi = wilson(out.antipodal, out.runs, 0.99)
    assert out.undecided / out.runs < 0.01, out.to_dict()
    assert lo <= out.theory <= hi, out.to_dict()
    return out


@pytest.mark.parametrize(("beta", "d", "rho0", "T"), [(2.0, 4, -0.5, 30), (0.3, 5, -0.8, 15)])
def test_network_monte_carlo_quick(beta, d, rho0, T):
    out = _check_mc(beta, d, rho0, T, runs=400, seed=21)
    assert out.theory == pytest.approx(tt.p_anti(beta, d, rho0))
    if out.theory == 0:
        assert out.antipodal == 0


@pytest.mark.slow
def test_network_monte_carlo_grid_matches_theory():
    for i, (beta, d, rho0, T) in enumerate(MC_GRID):
        _check_mc(beta, d, rho0, T, runs=2000, seed=100 + i)


def test_monte_carlo_result_is_reproducible_and_reports_horizon():
    kw = {"runs": 40, "T": 2.0, "dt": 0.05, "seed": 3}
    a, b = mc.monte_carlo(1.0, 3, "uniform", **kw), mc.monte_carlo(1.0, 3, "uniform", **kw)
    assert a.to_dict() | {"wall_s": 0} == b.to_dict() | {"wall_s": 0}
    r = a.to_dict()
    assert r["steps"] == 40 and r["T"] == 2.0 and r["theory"] == tt.p_anti_uniform(1.0, 3)
    c = r["counts"]
    assert c["runs"] == 40 == c["antipodal"] + c["merged"] + c["undecided"]
    assert r["undecided"] == c["undecided"] / 40 and r["version"]
    assert r["bounds"][0] <= r["bounds"][1]
    if r["ci"] is not None:  # P_anti over the decided runs (docs/reporting.md)
        assert r["p_anti"] + r["p_merged"] == pytest.approx(1.0)
        assert r["ci"][0] <= r["p_anti"] <= r["ci"][1]


@pytest.mark.slow
def test_hybrid_merges_below_and_ends_antipodal_above_threshold():
    beta = 0.5
    eps_c = math.sqrt(tt.hybrid_eps2_c(beta))
    for f in (0.5, 0.7, 1.4, 2.0):
        out = mc.hybrid_monte_carlo(beta, f * eps_c, rho0=0.0, runs=200, T=60.0, dt=0.01,
                                    seed=4)
        wrong, right = (out.antipodal, out.merged) if f < 1 else (out.merged, out.antipodal)
        assert out.theory == (0.0 if f < 1 else 1.0)
        assert wrong == 0 and right >= 196, out.to_dict()


# ---------------------------------------------------------------------------------------------
# CLI and figures
# ---------------------------------------------------------------------------------------------


def _cli():
    from tokensde.cli import sweep, two_token

    app = typer.Typer()
    two_token.register(app)
    sweep.register(app)
    app.callback()(lambda: None)
    return app


def _invoke(*args):
    return CliRunner().invoke(_cli(), ["two-token", *args])


def test_cli_prob_critical_and_errors():
    out = _invoke("prob", "--beta", "2", "--d", "4", "--rho0", "-0.5", "--json")
    assert out.exit_code == 0 and json.loads(out.output)["p_anti"] == pytest.approx(0.46624,
                                                                                      abs=1e-5)
    out = _invoke("prob", "--beta", "1", "--d", "2", "--rho0", "uniform", "--json")
    assert json.loads(out.output)["p_anti"] == pytest.approx(0.5)
    out = _invoke("critical", "--d", "6", "--json")
    assert json.loads(out.output)["beta_c"] == pytest.approx(math.acosh(4) / 2)
    assert "beta_c(6) = 1.0317185" in _invoke("critical", "--d", "6").output
    bad = _invoke("prob", "--beta", "1", "--d", "3", "--rho0", "1.5")
    assert bad.exit_code == 2 and "rho0 must be a number in [-1, 1]" in bad.output


def test_cli_mc_and_hybrid_json(tmp_path):
    path = tmp_path / "mc.json"
    out = _invoke("mc", "--beta", "2", "--d", "4", "--rho0", "-0.5", "--runs", "50", "--time",
                  "5", "--dt", "0.05", "--seed", "2", "--json", "--out", str(path))
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    assert set(r) >= {"p_anti", "ci", "p_merged", "undecided", "theory"}
    assert r["steps"] == 100 and r["theory"] == pytest.approx(0.46624, abs=1e-5)
    saved = json.loads(path.read_text())
    assert saved["kind"] == "tokensde.two_token_mc" and saved["p_anti"] == r["p_anti"]
    out = _invoke("hybrid", "--beta", "1", "--eps", "1.5", "--runs", "20", "--time", "2",
                  "--dt", "0.05", "--json")
    r = json.loads(out.output)
    assert r["eps2_c"] == pytest.approx(2 * math.exp(-1)) and r["regime"] == "antipodal"
    assert r["mc"]["theory"] == 1.0 and r["mc"]["counts"]["runs"] == 20


def test_two_token_kind_is_monte_carlo_with_theory_and_resolves_offsets(tmp_path):
    kind = get_kind(phase_grid.KIND)
    cell = kind.normalize({"beta": 2.0, "d": 4, "runs": 30, "T": 3.0, "engine": "reduced"})
    assert cell["dt"] == pytest.approx(0.05 / 4) and cell["rho0"] == "uniform"
    row = kind(cell, 7)
    direct = mc.monte_carlo(2.0, 4, "uniform", runs=30, T=3.0, dt=0.05 / 4, seed=7,
                            engine="reduced")
    assert np.isclose(row["p_anti"], direct.p_anti, equal_nan=True)
    assert row["antipodal"] == direct.antipodal
    assert row["theory"] == pytest.approx(tt.p_anti_uniform(2.0, 4))
    assert row["beta_c"] == pytest.approx(math.acosh(2.0) / 2)
    if row["undecided"] < 30:  # P_anti over the decided runs, nan when none decided
        assert row["ci_lo"] <= row["p_anti"] <= row["ci_hi"]
    assert row["bound_lo"] <= row["antipodal"] / 30 <= row["bound_hi"]
    off = kind.normalize({"beta_offset": 0.25, "d": 16, "runs": 1, "T": 1.0, "rho0": -0.9,
                          "dt_scale": 0.2})
    assert off["beta"] == pytest.approx(math.acosh(14.0) / 2 + 0.25, abs=1e-6)
    assert off["dt"] == pytest.approx(0.2 / 16)
    with pytest.raises(ParameterError, match="exactly one of beta"):
        kind.normalize({"beta": 1.0, "beta_offset": 0.5, "d": 4, "runs": 1, "T": 1.0})
    with pytest.raises(ParameterError, match="exactly one of beta"):
        kind.normalize({"d": 4, "runs": 1, "T": 1.0})
    with pytest.raises(ParameterError, match=r"beta_offset must be >= -beta_c\(d\)"):
        kind.normalize({"beta_offset": -0.5, "d": 3, "runs": 1, "T": 1.0})
    with pytest.raises(ParameterError, match="rho0 must be a number in"):
        kind.normalize({"beta": 1.0, "d": 4, "runs": 1, "T": 1.0, "rho0": 2})


@pytest.mark.slow  # a statistical check of tens of seconds: runs with the slow set
def test_grid_command_saves_every_cell_resumes_and_draws(tmp_path, monkeypatch):
    sweep, png = tmp_path / "grid", tmp_path / "phase.png"
    args = ["grid", "--out", str(sweep), "--figure", str(png), "--ds", "4", "--runs", "20",
            "--time", "3", "--seed", "1", "--engine", "reduced", "--no-progress"]
    first = _invoke(*args, "--betas", "0.5,2")
    assert first.exit_code == 0, first.output
    table = sweep / "table.parquet"
    assert first.output.split() == [str(table), str(png)] and png.stat().st_size > 20_000
    saved = read_table(sweep)
    assert len(saved) == 2 and set(phase_grid._COLUMNS) <= set(saved.columns)
    # the saved cells are reused, not recomputed; a directory holds one grid
    real, ran = mc.monte_carlo, []
    monkeypatch.setattr(phase_grid, "monte_carlo",
                        lambda beta, *a, **k: (ran.append(beta), real(beta, *a, **k))[1])
    again = _invoke(*args, "--betas", "0.5,2")
    assert again.exit_code == 0, again.output
    assert ran == [] and len(read_table(sweep)) == 2
    grown = _invoke(*args, "--betas", "0.5,2,3")
    assert grown.exit_code == 2 and "holds a different sweep" in grown.output and ran == []
    figs = tmp_path / "figs"  # `sweep plot` draws a two_token sweep from its table alone
    drawn = CliRunner().invoke(_cli(), ["sweep", "plot", str(sweep), str(figs)])
    assert drawn.exit_code == 0, drawn.output
    assert drawn.output.split() == [str(figs / "phase.png")] and ran == []
    assert (figs / "phase.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    kept = read_table(sweep).sort_values("beta").reset_index(drop=True)
    for r in kept.to_dict("records"):  # each cell is monte_carlo at the seed it records
        direct = real(r["beta"], 4, "uniform", runs=20, T=3.0, dt=0.05 / 4, seed=int(r["seed"]),
                      engine="reduced")
        assert np.isclose(r["p_anti"], direct.p_anti, equal_nan=True)
    bad = _invoke(*args, "--betas", "0.5,x")
    assert bad.exit_code == 2 and "--betas must be comma-separated numbers" in bad.output
