"""The convergence diagnostic computes what it says: closed-form weak errors, exact orders, coupling.

Known answer: one token (n = 1) with Gaussian matrix noise is Brownian motion on the sphere for the
SDE, `E<x_T, x_0> = exp(-(d-1) sigma^2 T / 2)`; one network layer maps `E<x', x>` to
`r(h) = E[(1 + h g_1) / sqrt((1 + h g_1)^2 + h^2 chi^2_{d-1})]` (rotation invariance), so the
L-layer network has `E<x_L, x_0> = r(sigma sqrt(T/L))^L` exactly; likewise one projected Euler
SDE step of size dt has `E<x', x> = E[u / sqrt(u^2 + sigma^2 dt chi^2_{d-1})]`,
`u = 1 - (d-1) sigma^2 dt / 2`.
"""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from tokensde import Execution, ModelParams, ParameterError, TimeGrid
from tokensde.analysis.convergence import (
    _PROBLEMS,
    ConvergenceResult,
    Problem,
    _concat_samples,
    _Size,
    _uniform_from_gaussian,
    coupled_samples,
    fit_order,
    run_convergence,
    summarise,
)
from tokensde.io.store import StoreError
from tokensde.sim import coupled_paths, coupled_states
from tokensde.sim.rng import RunStreams

D = 3  # chi^2_{d-1} = chi^2_2 is exponential with mean 2: closed forms below use that


def _overlap_given_u(u: float | np.ndarray, s2: float) -> float | np.ndarray:
    """E[u / sqrt(u^2 + s2 * E)], E ~ chi^2_2 (mean 2), in closed form via erfcx."""
    lam = 1.0 / (2.0 * s2)
    return u * np.sqrt(np.pi * lam) * special.erfcx(np.sqrt(lam) * np.abs(u))


def network_overlap(h: float) -> float:
    """r(h) for d = 3: average `_overlap_given_u(1 + h g, h^2)` over g ~ N(0, 1)."""
    f = lambda g: _overlap_given_u(1.0 + h * g, h * h) * stats.norm.pdf(g)  # noqa: E731
    return integrate.quad(f, -12, 12, points=[-1 / h], limit=200, epsabs=1e-13)[0]


def sde_overlap(dt: float) -> float:
    """One projected Euler SDE step, d = 3, sigma = 1."""
    return float(_overlap_given_u(1.0 - (D - 1) * dt / 2, dt))


ONE = Problem("one_token", ModelParams(n=1, d=D, beta=1.0), T=0.5, init="uniform",
              statistics={"self_overlap": "E<x_T, x_0>"})


REF = 16  # fine SDE steps over [0, T]; the fine and half grids have exact answers too


def exact_weak_error(L: int, T: float = ONE.T) -> float:
    """E[f(X_L) - (2 f(X_h) - f(X_2h))] for f = <x_T, x_0>, in closed form."""
    h = T / REF
    return (network_overlap(math.sqrt(T / L)) ** L - 2 * sde_overlap(h) ** REF
            + sde_overlap(2 * h) ** (REF // 2))


@pytest.fixture(scope="module")
def one_token_samples():
    return coupled_samples(ONE, levels=(1, 2, 4, 8), ref_steps=REF, runs=32768, seed=11)


def test_closed_forms_agree_with_direct_sampling():
    g = np.random.default_rng(0)
    h = 0.5
    z = g.normal(size=(400_000, D))
    x = np.array([1.0, 0.0, 0.0]) + h * z
    mc = (x[:, 0] / np.linalg.norm(x, axis=1)).mean()
    assert mc == pytest.approx(network_overlap(h), abs=4 * 0.3 / math.sqrt(4e5))


def test_weak_errors_match_the_exact_single_token_answer(one_token_samples):
    points, _ = summarise(one_token_samples, one_token_samples, ONE, bootstrap=50)
    weak = {p["L"]: p for p in points if p["kind"] == "weak" and p["law"] == "gaussian"}
    assert sorted(weak) == [1, 2, 4, 8]
    for L, p in weak.items():
        exact = exact_weak_error(L)
        assert abs(exact) > 6 * p["se"], "the test must resolve the error it checks"
        assert p["error"] == pytest.approx(exact, abs=4 * p["se"])
        assert p["ci_lo"] < p["error"] < p["ci_hi"]


FLOW = Problem("flow", ModelParams(n=2, d=3, beta=1.0, mean="identity", sigma=0.0), T=2.0,
               init="pair", rho0=-0.2, statistics={"pair_mean": "rho"})


def _flow_reference(ref_steps: int) -> tuple[float, float, float]:
    s = coupled_samples(FLOW, levels=(8,), ref_steps=ref_steps, runs=2, seed=4)
    points, _ = summarise(s, s, FLOW, bootstrap=5)
    ref = next(p for p in points if p["kind"] == "reference_correction")
    return ref["value"], float(s.ref_fine.mean()), ref["se"]


def test_reference_is_second_order_richardson():
    # sigma = 0 makes every number deterministic: errors against a 64x finer grid
    truth = _flow_reference(4096)[0]
    (v1, f1, se), (v2, f2, _) = _flow_reference(64), _flow_reference(128)
    assert se == pytest.approx(0.0, abs=1e-12)
    assert abs(f1 - truth) / abs(f2 - truth) == pytest.approx(2.0, rel=0.1)  # plain: O(h)
    assert abs(v1 - truth) / abs(v2 - truth) == pytest.approx(4.0, rel=0.1)  # Richardson: O(h^2)


def test_fit_order_recovers_an_exact_power_law():
    L = np.array([4, 8, 16, 32, 64])
    f = fit_order(L, 3.0 * L**-0.75)
    assert f.order == pytest.approx(0.75, abs=1e-12)
    assert f.constant == pytest.approx(3.0, rel=1e-12)
    assert f.se == pytest.approx(0.0, abs=1e-10)
    rng = np.random.default_rng(1)
    reps = 3.0 * L**-0.75 * np.exp(rng.normal(0, 0.05, (2000, L.size)))
    noisy = fit_order(L, reps[0], replicates=reps)
    # the bootstrap interval of the slope has width ~ 2 * 1.96 * 0.05 / sqrt(sum (logL - mean)^2)
    width = 2 * 1.96 * 0.05 / np.sqrt(np.sum((np.log(L) - np.log(L).mean()) ** 2))
    assert noisy.boot_hi - noisy.boot_lo == pytest.approx(width, rel=0.15)
    with pytest.raises(ValueError, match="non-zero"):
        fit_order([4, 8], [0.1, 0.0])


def test_deterministic_flow_has_first_order_error():
    # sigma = 0: the network is the projected Euler scheme of the attention ODE (order 1)
    flow = Problem("flow", ModelParams(n=4, d=3, beta=1.0, mean="identity", sigma=0.0), T=2.0,
                   statistics={"pair_mean": "m1"})
    s = coupled_samples(flow, levels=(8, 16, 32, 64, 128), ref_steps=1024, runs=256, seed=2)
    _, fits = summarise(s, s, flow, bootstrap=20)
    weak = next(f for f in fits if f["kind"] == "weak" and f["law"] == "gaussian")
    strong = next(f for f in fits if f["kind"] == "strong" and f["law"] == "gaussian")
    assert weak["order"] == pytest.approx(1.0, abs=0.08)
    assert strong["order"] == pytest.approx(1.0, abs=0.08)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_network_and_fine_sde_match_core_coupled_paths(norm):
    p = ModelParams(n=3, d=3, beta=1.5, norm=norm)
    runs, T, ref, L = 8, 1.0, 32, 8
    x0 = torch.nn.functional.normalize(torch.randn(runs, 3, 3, dtype=torch.float64), dim=-1)
    nets, fine, _ = coupled_states(x0, p, T, (L,), ref, RunStreams(5, runs), ("gaussian",))
    z = RunStreams(5, runs)
    h = T / ref
    dws = torch.stack([math.sqrt(h) * z.normal(3, 3) for _ in range(ref)], dim=1)
    m = ref // L
    net, sde = coupled_paths(x0, p, TimeGrid(L, T / L), lambda k: dws[:, k * m:(k + 1) * m], m)
    assert torch.allclose(nets["gaussian", L], net, atol=1e-12)
    assert torch.allclose(fine, sde, atol=1e-12)


def test_coupled_paths_refuses_what_it_cannot_carry():
    x0 = torch.nn.functional.normalize(torch.randn(2, 3, 3, dtype=torch.float64), dim=-1)
    inc = lambda k: torch.zeros(2, 1, 3, 3, dtype=torch.float64)  # noqa: E731
    for p, what in ((ModelParams(n=3, d=3, mlp="relu"), "MLP block"),
                    (ModelParams(n=3, d=3, norm="peri"), "norm='post' or 'pre'")):
        with pytest.raises(ParameterError, match=what):
            coupled_paths(x0, p, TimeGrid(2, 0.5), inc)


def test_uniform_law_by_quantile_map():
    v = _uniform_from_gaussian(torch.randn(200_000, dtype=torch.float64), 1.0).numpy()
    a = math.sqrt(3.0)
    assert np.abs(v).max() <= a
    assert stats.kstest(v, stats.uniform(loc=-a, scale=2 * a).cdf).pvalue > 1e-3
    assert v.var() == pytest.approx(1.0, abs=0.01)


def test_numbers_do_not_depend_on_chunking():
    kw = dict(levels=(4, 8), ref_steps=16, runs=600, seed=9)
    whole = coupled_samples(_PROBLEMS["two_tokens"], **kw)
    parts = _concat_samples([coupled_samples(_PROBLEMS["two_tokens"], start=a, stop=b, **kw)
                            for a, b in ((0, 256), (256, 512), (512, 600))])
    assert np.array_equal(whole.net, parts.net)
    assert np.array_equal(whole.sq_err, parts.sq_err)
    small = coupled_samples(_PROBLEMS["two_tokens"], execution=Execution(batch_size=256), **kw)
    assert np.array_equal(whole.sq_err, small.sq_err) and np.array_equal(whole.net, small.net)
    with pytest.raises(ParameterError, match="dtype='float32'"):
        coupled_samples(_PROBLEMS["two_tokens"], execution=Execution(dtype="float32"), **kw)


def test_bad_input_names_the_parameter():
    with pytest.raises(ParameterError, match="ref_steps"):
        coupled_samples(_PROBLEMS["two_tokens"], levels=(4, 6), ref_steps=16, runs=4)
    with pytest.raises(ParameterError, match="noise"):
        coupled_samples(Problem("s", ModelParams(n=2, noise="scalar"), T=1.0,
                                statistics={"pair_mean": "m"}), levels=(2,), ref_steps=4)
    with pytest.raises(ParameterError, match="law"):
        coupled_samples(_PROBLEMS["two_tokens"], levels=(2,), ref_steps=4, laws=("cauchy",))
    with pytest.raises(ParameterError, match="run range"):
        coupled_samples(_PROBLEMS["two_tokens"], levels=(2,), ref_steps=4, runs=8, start=3)


def test_result_round_trip_and_schema_check():
    size = _Size({"two_tokens": 256}, {"two_tokens": 256}, levels=(4, 8, 16), strong_ref=4)
    res = run_convergence(size, problems=("two_tokens",), seed=3, bootstrap=20)
    data = res.to_dict()
    back = ConvergenceResult.from_dict(data)
    assert back.points == res.points and back.fits == res.fits
    assert data["version"] and data["schema"] == 1
    assert {p["kind"] for p in res.points} == {"weak", "strong", "reference_correction"}
    assert len([p for p in res.points if p["kind"] == "weak"]) == 2 * 2 * 3
    with pytest.raises(StoreError, match="schema"):
        ConvergenceResult.from_dict({**data, "schema": 99})


def test_pre_norm_network_is_the_euler_sde_on_its_own_grid():
    # pre-norm (docs/variants.md §4): the SDE's Euler step is the residual update, so without an
    # MLP block the network of ref/2 layers and the SDE twice as coarse are one computation
    p = ModelParams(n=4, d=5, beta=1.0, heads=2, causal=True, norm="pre", sigma=1.3)
    x0 = 0.7 * torch.randn(6, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    nets, fine, half = coupled_states(x0, p, 1.0, (2, 4), 8, RunStreams(4, 6), ("gaussian",))
    assert torch.allclose(nets["gaussian", 4], half, atol=1e-12)
    # the stream is not projected: its radii move away from the start's
    assert not torch.allclose(torch.linalg.vector_norm(fine, dim=-1),
                              torch.linalg.vector_norm(x0, dim=-1), atol=1e-3)
    # one layer by hand: x + (sum of the fine increments) y(N(x)), per head with sigma/sqrt(2)
    nets1, _, _ = coupled_states(x0, p, 1.0, (1,), 4, RunStreams(4, 6), ("gaussian",))
    z = RunStreams(4, 6)
    v = sum(p.sigma / math.sqrt(2) * math.sqrt(0.25) * z.normal(2, 5, 5) for _ in range(4))
    u = torch.nn.functional.normalize(x0, dim=-1)
    y = torch.softmax((u @ u.transpose(-1, -2)).masked_fill(
        torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf")), -1) @ u
    by_hand = x0 + (y.unsqueeze(1) @ v.transpose(-1, -2)).sum(1)
    assert torch.allclose(nets1["gaussian", 1], by_hand, atol=1e-12)


def test_post_norm_network_is_not_the_euler_sde():
    # the check above can fail: post-norm's SDE step has the Ito drift and the projection
    p = ModelParams(n=4, d=5, beta=1.0, sigma=1.3)
    x0 = torch.nn.functional.normalize(torch.randn(6, 4, 5, dtype=torch.float64), dim=-1)
    nets, _, half = coupled_states(x0, p, 1.0, (4,), 8, RunStreams(4, 6), ("gaussian",))
    assert not torch.allclose(nets["gaussian", 4], half, atol=1e-6)


def test_coupled_states_refuses_peri_norm():
    p = ModelParams(n=3, d=3, beta=1.0, norm="peri")
    x0 = torch.nn.functional.normalize(torch.randn(2, 3, 3, dtype=torch.float64), dim=-1)
    with pytest.raises(ParameterError, match="norm='post' or 'pre'"):
        coupled_states(x0, p, 1.0, (2,), 4, RunStreams(0, 2), ("gaussian",))


def test_pre_norm_samples_read_directions_and_converge_weakly():
    """Pre-norm in `coupled_samples`: the statistics read the directions of the stream (|mean
    cosine| <= 1 although the radii grow); the network of ref/2 layers is the coarse SDE (equal
    statistics); the weak error of E mean<u_i,u_j>^2 is resolved at L = 4 and shrinks at least
    4-fold by L = 32 (Euler: order 1 predicts 8-fold)."""
    prob = Problem("pre", ModelParams(n=4, d=3, beta=1.0, norm="pre"), T=1.0,
                   statistics={"pair_mean": "m", "pair_square_mean": "m2"})
    s = coupled_samples(prob, levels=(4, 32), ref_steps=64, runs=4096, seed=1, laws=("gaussian",))
    assert np.abs(s.net).max() <= 1 + 1e-12 and np.abs(s.ref_fine).max() <= 1 + 1e-12
    assert np.array_equal(s.net[0, 1], s.ref_half)
    err = s.net[0, :, 1] - s.ref_fine[1]
    mean, se = err.mean(-1), err.std(-1, ddof=1) / math.sqrt(err.shape[-1])
    assert mean[0] < -5 * se[0]
    assert abs(mean[1]) < abs(mean[0]) / 4
    assert s.sq_err[0, 0, 1].mean() < s.sq_err[0, 0, 0].mean()

