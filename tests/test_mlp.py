"""The random MLP block (docs/variants.md §5): dual kernels, the exact samplers' law, the SDE's
noise, streams of their own, and bad values."""

import math
import pickle

import numpy as np
import pytest
import torch
from scipy import special
from typer.testing import CliRunner

from tokensde import (
    Execution,
    InitialState,
    ModelParams,
    ParameterError,
    Recording,
    StoppingRule,
    TimeGrid,
    simulate,
)
from tokensde.cli import app
from tokensde.model.mlp import MLPS
from tokensde.model.mlp.gelu import _dual_kernel_at, gelu_at
from tokensde.sim.rng import RunStreams
from tokensde.sim.samplers import _mlp_noise_fast, _mlp_noise_full, choose_sampler, mlp_noise_sde

RELU, GELU = MLPS.get("relu")(), MLPS.get("gelu")()


def _mc_kernel(phi, rho: float, n: int = 2_000_000, seed: int = 3) -> tuple[float, float]:
    """Seeded Monte Carlo of E[phi(u) phi(v)] / E[phi(u)^2] and its standard error."""
    g = np.random.default_rng(seed)
    u = g.standard_normal(n)
    v = rho * u + math.sqrt(1 - rho * rho) * g.standard_normal(n)
    prod = phi(u) * phi(v)
    m2 = float(np.mean(phi(u) ** 2))
    return float(prod.mean()) / m2, float(prod.std() / math.sqrt(n)) / m2


@pytest.mark.parametrize("rho", [-0.95, -0.4, 0.3, 0.85])
def test_dual_kernels_match_monte_carlo(rho):
    for block, phi in ((RELU, lambda z: np.maximum(z, 0.0)), (GELU, lambda z: z * special.ndtr(z))):
        mc, se = _mc_kernel(phi, rho)
        assert abs(float(block.kernel(np.array(rho))) - mc) < 5 * se + 2e-3


def test_kernel_limits_and_closed_values():
    for block in (RELU, GELU):
        assert float(block.kernel(np.array(1.0))) == pytest.approx(1.0, abs=1e-14)
    assert float(RELU.kernel(np.array(0.0))) == pytest.approx(1 / math.pi, abs=1e-15)
    assert float(RELU.kernel(np.array(-1.0))) == pytest.approx(0.0, abs=1e-15)
    assert RELU.second_moment == 0.5
    # E[u^2 Phi(u)^2] by adaptive quadrature, independent of the Gauss-Hermite rule
    from scipy import integrate

    m2 = integrate.quad(lambda u: u * u * special.ndtr(u) ** 2 * math.exp(-u * u / 2)
                        / math.sqrt(2 * math.pi), -np.inf, np.inf, epsabs=1e-13)[0]
    assert GELU.second_moment == pytest.approx(m2, rel=1e-10)
    # GELU at rho = -1: E[phi(u) phi(-u)] = -E[u^2 Phi(u) Phi(-u)]
    m1 = integrate.quad(lambda u: u * u * special.ndtr(u) * special.ndtr(-u) * math.exp(-u * u / 2)
                        / math.sqrt(2 * math.pi), -np.inf, np.inf, epsabs=1e-13)[0]
    assert float(GELU.kernel(np.array(-1.0))) == pytest.approx(-m1 / m2, rel=1e-9)


def test_tensor_kernels_agree_with_numpy():
    r = torch.linspace(-1.0, 1.0, 3001, dtype=torch.float64)
    for block, tol in ((RELU, 1e-14), (GELU, 1e-7)):
        ref = torch.from_numpy(block.kernel(r.numpy()))
        assert float((block.kernel_t(r) - ref).abs().max()) < tol


def _tokens(runs: int) -> torch.Tensor:
    x = torch.tensor([[1.0, 0, 0, 0, 0], [0.6, 0.8, 0, 0, 0], [-0.9, 0.0, 0.3, 0.1, 0.0]],
                     dtype=torch.float64)
    x = x / x.norm(dim=-1, keepdim=True)
    return x.expand(runs, 3, 5).clone()


@pytest.mark.parametrize("draw", [_mlp_noise_full, _mlp_noise_fast, mlp_noise_sde])
@pytest.mark.parametrize("mlp", ["relu", "gelu"])
def test_block_noise_has_the_kernel_covariance(draw, mlp):
    """Each sampler's output has cross-covariance mlp_sigma^2 khat(<x_i, x_j>) I and mean 0."""
    p = ModelParams(n=3, d=5, mlp=mlp, mlp_sigma=0.7, mlp_width=6)
    runs = 40000
    x = _tokens(runs)
    xi = draw(x, p, RunStreams(5, runs))
    cov = torch.einsum("ria,rja->ij", xi, xi) / (runs * 5)  # averaged over the d coordinates
    want = 0.49 * p.mlp_block.kernel((x[0] @ x[0].T).numpy())
    prod = (xi.unsqueeze(2) * xi.unsqueeze(1)).mean(-1)  # (runs, n, n): per-run coordinate mean
    se = prod.std(0) / math.sqrt(runs)
    assert torch.all((cov - torch.from_numpy(want)).abs() < 5 * se + 1e-3)
    off = (xi[:, 0, 0] * xi[:, 1, 1]).mean()  # different coordinates are uncorrelated
    assert abs(float(off)) < 5 * float((xi[:, 0, 0] * xi[:, 1, 1]).std()) / math.sqrt(runs)
    assert torch.all(xi.mean(0).abs() < 5 * xi.std(0) / math.sqrt(runs))


@pytest.mark.parametrize("draw", [_mlp_noise_full, _mlp_noise_fast])
def test_exact_samplers_have_the_finite_width_fourth_moment(draw):
    """With m = 2 ReLU units the output is a Gaussian scale mixture: E xi^4 = 3 s^4 E|h|^4 =
    3 (2 E relu^4 + 2 (E relu^2)^2) = 10.5 at mlp_sigma = 1 (s^2 = 1/(m kappa(1)) = 1); a Gaussian
    (the SDE's noise) would give 3."""
    p = ModelParams(n=3, d=5, mlp="relu", mlp_width=2)
    runs = 200000
    xi = draw(_tokens(runs), p, RunStreams(8, runs))[:, 0]
    m4 = xi.pow(4).mean()
    se = xi.pow(4).std() / math.sqrt(xi.numel())
    assert abs(float(xi.pow(2).mean()) - 1.0) < 0.01
    assert abs(float(m4) - 10.5) < 5 * float(se)


def test_streams_of_their_own_and_batch_independence():
    """A block of zero output leaves the run of mlp='none' with the same seed (to rounding): the
    initial tokens and the value noise come from the same streams; batches do not matter."""
    base = ModelParams(n=3, d=6, beta=1.5)
    zero = base.with_(mlp="relu", mlp_sigma=0.0)
    a = simulate(base, TimeGrid.make(T=0.5, dt=0.05), runs=300, seed=4, execution=Execution(sampler="fast"))
    b = simulate(zero, TimeGrid.make(T=0.5, dt=0.05), runs=300, seed=4, execution=Execution(sampler="fast"))
    assert np.allclose(a.gram, b.gram, rtol=1e-5, atol=1e-13)
    p = base.with_(mlp="gelu", mlp_sigma=0.5)
    for sampler in ("fast", "full"):
        c = simulate(p, TimeGrid.make(T=0.3, dt=0.05), runs=600, seed=2,
                     execution=Execution(sampler=sampler, batch_size=256))
        e = simulate(p, TimeGrid.make(T=0.3, dt=0.05), runs=600, seed=2, execution=Execution(sampler=sampler))
        assert np.array_equal(c.gram, e.gram)
        assert not np.allclose(c.gram[:, -1], np.tile(a.gram[:300, -1], (2, 1, 1)), rtol=1e-5, atol=1e-3)


def test_until_decided_keeps_each_runs_numbers():
    p = ModelParams(n=2, d=4, beta=2.0, mlp="relu", mlp_sigma=0.5)
    fixed = simulate(p, TimeGrid.make(T=3.0, dt=0.05), runs=256, seed=1, recording=Recording(checkpoints=61))
    dec = simulate(p, TimeGrid.make(T=3.0, dt=0.05), runs=256, seed=1,
                   stopping=StoppingRule.decided(tol=1e-2, decide_every=1))
    done = np.flatnonzero(dec.decided_at >= 0)
    assert len(done) > 20
    k = dec.decided_at[done]
    g = fixed.gram[done, k]  # checkpoints are every layer
    assert np.allclose(dec.gram[done, -1], g, rtol=1e-5, atol=1e-12)


@pytest.mark.slow  # a statistical check of tens of seconds: runs with the slow set
def test_network_and_sde_agree_on_a_pair_mean():
    """The SDE of the block (kernel noise, Ito term) against the network at dt = 0.01: a seeded
    check at 5 standard errors (the weak order itself: diagnostics/mlp_weak_order.py)."""
    p = ModelParams(n=3, d=6, beta=1.0, mlp="relu", mlp_sigma=1.0)
    net = simulate(p, TimeGrid.make(T=0.5, dt=0.01), runs=20000, seed=1,
                   execution=Execution(sampler="fast")).gram[:, -1, 0, 1]
    sde = simulate(p, TimeGrid.make(T=0.5, dt=0.005), runs=20000, seed=2, scheme="sde").gram[:, -1, 0, 1]
    none = simulate(p.with_(mlp="none", mlp_sigma=1.0), TimeGrid.make(T=0.5, dt=0.01), runs=20000,
                    seed=1).gram[:, -1, 0, 1]
    se = math.sqrt(float(net.var() + sde.var()) / 20000)
    assert abs(float(net.mean() - sde.mean())) < 5 * se
    assert float(net.mean() - none.mean()) > 10 * se  # the block changes the law, visibly


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [({"mlp": "swish"}, "mlp must be one of none, gelu, relu, swiglu or gelu(q=<q>) with q > 0 or "
                             "swiglu(q=<q>) with q > 0; "
                        "got 'swish'"),
     ({"mlp": "gelu(q=-1)"}, "mlp must be one of none, gelu, relu, swiglu or gelu(q=<q>) with q > 0 or "
                             "swiglu(q=<q>) with q > 0; "
                             "got 'gelu(q=-1)'"),
     ({"mlp": "relu", "mlp_sigma": -1.0}, "mlp_sigma must be a finite number >= 0"),
     ({"mlp": "relu", "mlp_sigma": float("nan")}, "mlp_sigma must be a finite number >= 0"),
     ({"mlp": "gelu", "mlp_width": 0}, "mlp_width must be an integer >= 1; got 0"),
     ({"mlp_sigma": 0.5}, "mlp_sigma is used only with an MLP block"),
     ({"mlp_width": 8}, "mlp_width is used only with an MLP block"),
     ({"mlp": "relu", "norm": "peri", "mlp_sigma": 0.0}, "mlp_sigma must be > 0 with norm='peri'")],
)
def test_bad_mlp_values_name_the_parameter(kwargs, msg):
    with pytest.raises(ParameterError) as err:
        ModelParams(n=3, d=4, **kwargs)
    # a message naming the value given is compared whole (the list of allowed names exactly)
    assert str(err.value) == msg if "; got" in msg else str(err.value).startswith(msg)


def test_scaled_gelu_is_resolved_by_name_and_never_listed():
    """GELU at pre-activation variance q (what tokensde.real maps a block's MLP to) is resolved
    from its name: using one leaves the allowed names exactly none, gelu, relu."""
    name = gelu_at(0.1)
    p = ModelParams(n=3, d=4, mlp=name, mlp_sigma=0.5)
    assert name == "gelu(q=0.1)" and type(p.mlp_block).q == 0.1
    assert p.mlp_block.second_moment == pytest.approx(
        float(_dual_kernel_at(np.array(1.0), 0.1)), rel=1e-12)
    assert MLPS.names() == ("none", "gelu", "relu", "swiglu") and gelu_at(1.0) == "gelu"
    assert type(ModelParams(n=3, d=4, mlp="gelu(q=0.1)").mlp_block) is type(p.mlp_block)
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(ParameterError) as err:
        ModelParams(n=3, d=4, mlp="gelu(q=nan)")
    assert str(err.value) == ("mlp must be one of none, gelu, relu, swiglu or gelu(q=<q>) with q > 0 or "
                             "swiglu(q=<q>) with q > 0; "
                              "got 'gelu(q=nan)'")


def test_gram_sampler_choice_and_cli_errors():
    # the Gram sampler's block is checked in law in tests/test_gram_variants.py (all norms)
    p = ModelParams(n=2, d=16, mlp="relu")
    assert p.rotation_invariant and choose_sampler(p) == "gram"
    for norm in ("pre", "peri"):  # taken when asked for; auto keeps 'fast' for pre/peri-norm
        q = p.with_(norm=norm)
        assert q.rotation_invariant and choose_sampler(q) == "fast"
        assert choose_sampler(q, "gram") == "gram"
    assert p.mlp_hidden == 64 and "mlp_width" not in p.to_dict()
    assert ModelParams().to_dict() == {k: v for k, v in ModelParams().to_dict().items()
                                       if not k.startswith("mlp")}
    r = CliRunner().invoke(app, ["simulate", "--n", "2", "--d", "4", "--time", "1", "--dt",
                                 "0.5", "--runs", "4", "--mlp", "relu", "--mlp-width", "-3"])
    assert r.exit_code == 2 and "mlp_width must be an integer >= 1; got -3" in r.output
    assert "Traceback" not in r.output


def test_pair_theory_starts_and_limits():
    """`p_first_from` over a uniform pair (Gauss-Jacobi) against the independent trapezoid rule of
    `absorption.p_anti_at_tol`; the tol -> 0 limit is P_anti without a block and 0 with one."""
    from tokensde.theory import decision_time as absorption
    from tokensde.theory import two_tokens as tt
    from tokensde.theory.mlp_block import p_first_from, p_first_limit

    for beta, d in ((1.0, 4), (2.0, 4), (2.0, 10)):
        assert p_first_from(beta, d, "uniform", 1e-8) == pytest.approx(
            absorption.p_anti_at_tol(beta, d, "uniform", 1e-8), abs=2e-6)
        assert p_first_limit(beta, d, "uniform") == pytest.approx(tt.p_anti_uniform(beta, d))
        assert p_first_limit(beta, d, -0.5, "relu", 0.3) == 0.0
    assert p_first_limit(2.0, 2, -0.5, "relu", 0.3) > 0.0  # d < 3: -1 is reached


def test_two_token_cells_keep_their_ids_without_a_block():
    from tokensde.study.context import _sweep_file
    from tokensde.sweep.config import SweepConfig

    cells = SweepConfig.load(_sweep_file(("phase-quick",))).cells()
    assert all("mlp" not in c.params and "mlp_sigma" not in c.params for c in cells)
    mlp_cells = SweepConfig.load(_sweep_file(("mlp-quick",))).cells()
    assert {c.params.get("mlp", "none") for c in mlp_cells} == {"none", "relu"}


@pytest.mark.slow  # the CLI runs Monte Carlo with its coupled step error: about 3 s of CPU
def test_two_token_mc_cli_with_a_block():
    import json

    r = CliRunner().invoke(app, ["two-token", "mc", "--beta", "3", "--d", "4", "--rho0", "-0.5",
                                 "--runs", "100", "--tol", "0.1", "--dt", "0.002", "--mlp",
                                 "relu", "--mlp-sigma", "0.3", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)  # stderr carries the run-time estimate
    assert out["theory"] == 0.0 and out["theory_at_tol"] == pytest.approx(0.6449, abs=1e-3)
    assert out["ci"][0] - 0.05 < out["theory_at_tol"] < out["ci"][1] + 0.05
    r = CliRunner().invoke(app, ["two-token", "mc", "--beta", "3", "--d", "4", "--runs", "5",
                                 "--mlp-sigma", "0.3"])
    assert r.exit_code == 2
    assert "--mlp-sigma applies only with --mlp other than none (got --mlp none)" in r.output


@pytest.mark.slow
def test_goe_forms_redrawn_two_token_theory():
    """The averaged rho diffusion of GOE forms redrawn every layer (`two_token_forms`): at scale 0
    it is the spec model's; against the network (seeded, forms redrawn every layer) at tol 1e-3."""
    from tokensde.analysis.pair_monte_carlo import _pair_log_gaps
    from tokensde.analysis.stats import wilson
    from tokensde.theory import decision_time as absorption
    from tokensde.theory import two_tokens as tt
    from tokensde.theory.redrawn_forms import forms_z_coefficients, p_first_forms

    z = np.linspace(-9.0, 9.0, 61)
    a, b = forms_z_coefficients(z, 2.5, 5.0, 0.0, 1.3)
    a0, b0 = tt.z_coefficients(z, 2.5, 5.0, 1.3, None)
    np.testing.assert_allclose(a, a0, atol=1e-12)
    np.testing.assert_allclose(b, b0, atol=1e-12)
    assert p_first_forms(2.0, 4, "uniform", 1e-8, 0.0) == pytest.approx(
        absorption.p_anti_at_tol(2.0, 4, "uniform", 1e-8), abs=1e-9)
    th = p_first_forms(3.0, 4, -0.5, 1e-3, 0.5)
    p = ModelParams(n=2, d=4, beta=3.0, qk="goe", qk_scale=0.5, qk_redraw="layer")
    res = simulate(p, TimeGrid.make(T=60.0, dt=0.01), runs=1500, seed=7, initial=InitialState.pair(-0.5),
                   stopping=StoppingRule.decided(tol=1e-3))
    anti, _ = tt.classify_pair(*_pair_log_gaps(res.x), 1e-3)
    lo, hi = wilson(int(anti.sum()), 1500, 0.999)
    assert lo - 0.01 < th < hi + 0.01  # 99.9 % interval, widened by the O(dt) bias
    assert th < p_first_forms(3.0, 4, -0.5, 1e-3, 0.0) - 0.1  # the forms lower it, visibly


def test_bad_theory_and_sweep_inputs_name_the_parameter(tmp_path):
    from tokensde.sweep.config import SweepConfig
    from tokensde.theory.redrawn_forms import p_first_forms

    with pytest.raises(ParameterError, match=r"tol must be a number in \[1e-14, 0.5\]; got 2.0"):
        p_first_forms(1.0, 4, -0.5, 2.0, 0.5)
    with pytest.raises(ParameterError, match="qk_scale must be a finite number >= 0"):
        p_first_forms(1.0, 4, -0.5, 1e-3, -1.0)
    toml = tmp_path / "bad.toml"
    toml.write_text('name = "bad"\nkind = "two_token"\nmodule = "tokensde.phase_grid"\n'
                    'runs = 10\nT = 1.0\nseed = 1\n[params]\nd = 4\nrho0 = -0.5\n[grid]\n'
                    'beta = [1.0]\nmlp_sigma = [0.3]\n')
    with pytest.raises(ParameterError, match="mlp_sigma is used only with an MLP block"):
        SweepConfig.load(toml).cells()
