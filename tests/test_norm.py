"""Normalisation placement (docs/variants.md §4): post (spec §2), pre (attention sees the normalised
residual stream, which keeps its radius) and peri (the branch output normalised too), and their
SDE limits (`tokensde.sim.norm_sde`)."""

import math

import numpy as np
import pytest
import torch
from scipy import special

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
from tokensde.sim.layers import _mlp_step, _normalize_branch, _peri_norm_step, normalize
from tokensde.sim.samplers import _mlp_noise_given, choose_sampler


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [({"norm": "mid"}, "norm must be one of post, pre, peri; got 'mid'"),
     ({"norm": None}, "norm must be one of post, pre, peri"),
     ({"norm": "peri", "sigma": 0.0}, "norm must be 'post' or 'pre' when the branch output is "
      "zero")],
)
def test_bad_norm_values_name_the_parameter(kwargs, msg):
    with pytest.raises(ParameterError, match=msg):
        ModelParams(n=3, d=4, **kwargs)


def test_sde_limits_and_the_gram_sampler_when_asked_for():
    p = ModelParams(n=2, d=9, norm="pre")
    for bad in ({"noise": "scalar", "eps": 0.5}, {"mlp": "relu"}):
        for sampler in ("auto", "gram"):
            if sampler == "gram" and "noise" in bad:
                continue  # scalar noise: no Gram sampler at all
            with pytest.raises(ParameterError, match="scheme='sde' with norm='peri' needs"):
                simulate(p.with_(norm="peri", **bad), TimeGrid.make(layers=2), scheme="sde",
                         execution=Execution(sampler=sampler))
    # rotation equivariant, so the Gram sampler applies (tests/test_gram_variants.py), but auto
    # keeps 'fast' for pre/peri-norm (earlier auto runs keep their numbers)
    assert p.rotation_invariant and choose_sampler(p) == "fast"
    assert choose_sampler(p, "gram") == "gram"
    from tokensde.analysis.convergence import Problem, coupled_samples

    with pytest.raises(ParameterError, match="convergence takes norm='post' or 'pre'"):
        coupled_samples(Problem("x", p.with_(norm="peri"), T=1.0), (2,), 4, runs=4)


def test_fingerprint_unchanged_for_post():
    assert "norm" not in ModelParams(n=3, d=4, norm="post").to_dict()
    p = ModelParams(n=3, d=4, norm="peri")
    assert p.to_dict()["norm"] == "peri" and ModelParams.from_dict(p.to_dict()).norm == "peri"


@pytest.mark.parametrize("sampler", ["fast", "full"])
def test_one_pre_norm_layer_normalised_is_one_post_norm_layer(sampler):
    kw = dict(runs=50, seed=5, execution=Execution(sampler=sampler),
              recording=Recording(record=("gram", "tokens")))
    base = dict(n=4, d=5, beta=2.0, mean="identity", sigma=0.8)
    grid = TimeGrid.make(layers=1, alpha=0.3)
    post = simulate(ModelParams(**base), grid, **kw)
    pre = simulate(ModelParams(norm="pre", **base), grid, **kw)
    torch.testing.assert_close(torch.nn.functional.normalize(torch.from_numpy(pre.x), dim=-1),
                               torch.from_numpy(post.x),
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(pre.gram, post.gram, rtol=0, atol=1e-12)
    assert float(np.linalg.norm(pre.tokens[:, -1], axis=-1).min()) > 0.5  # the residual stream, not unit
    np.testing.assert_allclose(pre.final_gram(), post.final_gram(), rtol=0, atol=1e-12)


def test_pre_norm_radius_grows_as_the_noise_variance():
    # E |h_1|^2 = |x + dt M y|^2 + dt sigma^2 d |y|^2 for one layer from fixed tokens
    g = np.random.default_rng(0)
    x0 = g.standard_normal((3, 6))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    p = ModelParams(n=3, d=6, beta=1.5, norm="pre", sigma=0.7, mean="identity")
    dt, runs = 0.04, 20_000
    res = simulate(p, TimeGrid.make(T=dt, dt=dt), runs=runs, seed=1, initial=InitialState(x0),
                   recording=Recording(record=("tokens",)))
    from tokensde.sim.layers import _attention_output

    x = torch.as_tensor(x0).unsqueeze(0)
    y = _attention_output(x, p)[0]
    want = ((x[0] + dt * y) ** 2).sum(-1) + dt * 0.49 * 6 * (y * y).sum(-1)
    sq = (torch.from_numpy(res.x) ** 2).sum(-1)
    got, se = sq.mean(0), sq.std(0) / math.sqrt(runs)
    assert float(((got - want).abs() / se).max()) < 5


def test_peri_norm_increments_have_length_alpha():
    p = ModelParams(n=3, d=4, beta=2.0, norm="peri", mean="identity", sigma=0.5)
    res = simulate(p, TimeGrid.make(layers=6, alpha=0.2), runs=20, seed=2,
                   recording=Recording(checkpoints=list(range(7)), record=("gram", "tokens")))
    steps = np.linalg.norm(res.tokens[:, 1:] - res.tokens[:, :-1], axis=-1)
    np.testing.assert_allclose(steps, 0.2, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.diagonal(res.gram, axis1=-2, axis2=-1), np.ones((20, 7, 3)),
                               rtol=1e-7)


def test_peri_norm_of_a_zero_branch_is_zero():
    # N(0) = 0 (the eps -> 0 limit of z / sqrt(|z|^2 + eps)); elsewhere N(z) = z / |z| bit for bit
    z = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [1e-300, 0.0, 0.0]], dtype=torch.float64)
    assert _normalize_branch(z).tolist() == [[0.6, 0.8, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    w = torch.randn(50, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(_normalize_branch(w), normalize(w))
    # both peri sublayers, by hand: x + sqrt(1/4) N(xi) with N((0, 3, 4)) = (0, 0.6, 0.8)
    p = ModelParams(n=2, d=3, norm="peri", mlp="relu")
    x = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]], dtype=torch.float64)
    xi = torch.tensor([[[0.0, 3.0, 4.0], [0.0, 0.0, 0.0]]], dtype=torch.float64)
    want = [[[1.0, 0.3, 0.4], [0.0, 2.0, 0.0]]]
    assert _mlp_step(x, xi, p, 0.25).tolist() == want
    assert _peri_norm_step(x, torch.zeros_like(x), xi, p, 0.25).tolist() == want


def test_a_relu_block_with_every_hidden_unit_off_leaves_its_token():
    # the cause of "non-finite tokens": a token whose m hidden pre-activations are all negative
    # gets an exact zero block output (probability 2^-m per token and layer, every sampler)
    p = ModelParams(n=2, d=3, norm="peri", mlp="relu")
    x = torch.eye(2, 3, dtype=torch.float64).unsqueeze(0)  # orthonormal: C_X = I
    pre = torch.ones(1, 2, p.mlp_hidden, dtype=torch.float64)
    pre[0, 1] = -1.0
    z = torch.tensor([[[1.0, 2.0, 2.0], [5.0, -1.0, 3.0]]], dtype=torch.float64)
    xi = _mlp_noise_given(x, p, pre, z)
    assert xi[0, 1].tolist() == [0.0, 0.0, 0.0] and float(xi[0, 0].norm()) > 0
    after = _mlp_step(x, xi, p, 0.04)
    assert torch.equal(after[0, 1], x[0, 1])
    assert float((after[0, 0] - x[0, 0]).norm()) == pytest.approx(0.2, abs=1e-15)


def test_peri_relu_radius_has_the_closed_form_for_every_sampler():
    # E |h|^2 after depth time T: each sublayer adds sqrt(dt) times a unit vector whose direction
    # is uniform given the past, or nothing when the block's m hidden units are all off, so
    # E |h_i|^2 = 1 + T (1 + 1 - 2^-m) exactly; m = 1 gives 2.5 (a random direction for a zero
    # branch would give 3, the unguarded N(0) nan). The reported case is finite for each sampler.
    reported = ModelParams(n=4, d=3, beta=2, norm="peri", mlp="relu", mlp_sigma=0.7)
    p, runs = reported.with_(mlp_width=1), 2000
    iu = np.triu_indices(4, 1)
    law = {}
    for sampler in ("full", "fast", "gram"):
        res = simulate(reported, TimeGrid.make(T=0.5, dt=0.05), runs=8, seed=3,
                       execution=Execution(sampler=sampler))
        assert np.isfinite(res.state).all() and np.isfinite(res.gram).all()
        np.testing.assert_allclose(np.diagonal(res.gram, axis1=-2, axis2=-1), 1.0, rtol=1e-12)
        res = simulate(p, TimeGrid.make(T=1.0, dt=0.05), runs=runs, seed=5,
                       execution=Execution(sampler=sampler))
        r2 = (res.state**2).sum(-1).mean(-1)  # radii: the same in R^d and in the Gram frame
        assert abs(r2.mean() - 2.5) < 5 * r2.std() / math.sqrt(runs)
        q = (res.gram[:, -1, iu[0], iu[1]] ** 2).mean(-1)
        law[sampler] = (q.mean(), q.var() / runs)
    # the samplers agree in law on E mean_{i<j} <u_i, u_j>^2 at T
    for sampler in ("full", "gram"):
        diff = law[sampler][0] - law["fast"][0]
        assert abs(diff) < 5 * math.sqrt(law[sampler][1] + law["fast"][1])


def phi(r: float, d: int) -> float:
    """`E <g_1/|g_1|, g_2/|g_2|>` for standard Gaussian `g_1, g_2` in R^d, coordinate correlation r
    (docs/variants.md §4)."""
    c = math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2))
    return 2.0 / d * c * c * r * float(special.hyp2f1(0.5, 0.5, d / 2 + 1, r * r))


@pytest.mark.parametrize("d", [3, 8])
def test_peri_norm_noise_correlation_formula(d):
    # the covariance of the peri-norm limit: E <N(V y_1), N(V y_2)> = phi_d(r), r the correlation
    # of y_1, y_2; and phi_d(1) = 1, phi_d(r) -> r as d grows
    assert phi(1.0, d) == pytest.approx(1.0, rel=1e-12)
    assert phi(0.5, 4000) == pytest.approx(0.5, rel=1e-3)
    gen = torch.Generator().manual_seed(d)
    r, runs = 0.6, 200_000
    g1 = torch.randn(runs, d, dtype=torch.float64, generator=gen)
    g2 = r * g1 + math.sqrt(1 - r * r) * torch.randn(runs, d, dtype=torch.float64, generator=gen)
    v = (torch.nn.functional.normalize(g1, dim=-1) * torch.nn.functional.normalize(g2, dim=-1))
    v = v.sum(-1)
    assert float(v.mean()) == pytest.approx(phi(r, d), abs=5 * float(v.std()) / math.sqrt(runs))


def test_until_decided_on_directions():
    p = ModelParams(n=2, d=3, beta=3.0, norm="pre")
    grid = TimeGrid.make(T=3.0, dt=0.05)
    kw = dict(runs=300, seed=2, execution=Execution(batch_size=256))
    full = simulate(p, grid, recording=Recording(checkpoints=list(range(61))), **kw)
    stopped = simulate(p, grid, stopping=StoppingRule.decided(tol=1e-4), **kw)
    done = np.flatnonzero(stopped.decided_at >= 0)
    assert len(done) > 10  # pre-norm slows the directions down (docs/variants.md §4)
    np.testing.assert_allclose(stopped.final_gram()[done],
                               full.gram[done, stopped.decided_at[done]], rtol=0, atol=1e-13)


def test_variants_survive_the_results_file(tmp_path):
    from tokensde.io.store import load_result, save_result

    p = ModelParams(n=3, d=4, heads=2, qk="goe", qk_scale=0.5, qk_redraw="layer", qk_samples=3,
                    norm="pre")
    res = simulate(p, TimeGrid.make(layers=4), runs=5, seed=1, scheme="sde")
    back = load_result(save_result(res, tmp_path / "r.npz"))
    assert back.params.to_dict() == p.to_dict()
    np.testing.assert_array_equal(back.final_gram(), res.final_gram())


def test_pre_norm_sde_step_is_the_network_for_gaussian_values():
    """The pre-norm limit `dh = M y(u) dt + dW y(u)` has no Ito term: its Euler step with the
    network's Gaussian value noise is the network's layer (docs/variants.md §4)."""
    p = ModelParams(n=3, d=5, beta=2.0, norm="pre", mean="identity", heads=2)
    a = simulate(p, TimeGrid.make(T=1.0, dt=0.05), runs=64, seed=3, execution=Execution(sampler="fast"))
    b = simulate(p, TimeGrid.make(T=1.0, dt=0.05), runs=64, seed=3, scheme="sde",
                 execution=Execution(sampler="fast"))
    assert np.array_equal(a.gram, b.gram) and np.array_equal(a.x, b.x)


@pytest.mark.parametrize("heads", [1, 2])
def test_peri_sde_noise_has_the_direction_correlation(heads):
    """The peri-norm limit's noise has cross-covariance `phi_d(r_ij) / d I`, `r_ij` the
    correlation of the value noises (heads' mean), and is centred."""
    from tokensde.sim.norm_sde import _peri_noise
    from tokensde.sim.rng import RunStreams

    p = ModelParams(n=3, d=4, norm="peri", heads=heads)
    runs = 60000
    g = torch.Generator().manual_seed(1)
    y = torch.randn((1, heads, 3, 4) if heads > 1 else (1, 3, 4), generator=g,
                    dtype=torch.float64).expand(runs, *([-1] * (3 if heads > 1 else 2)))
    xi = _peri_noise(y, p, RunStreams(2, runs))
    c = (y[0] @ y[0].transpose(-1, -2))
    c = c.mean(0) if heads > 1 else c
    s = c.diagonal().sqrt()
    r = np.clip((c / (s[:, None] * s[None, :])).numpy(), -1.0, 1.0)
    want = np.vectorize(lambda v: phi(float(v), 4))(r) / 4
    prod = (xi.unsqueeze(2) * xi.unsqueeze(1)).mean(-1)
    se = prod.std(0) / math.sqrt(runs)
    assert torch.all((prod.mean(0) - torch.from_numpy(want)).abs() < 5 * se + 1e-4)
    assert torch.all(xi.mean(0).abs() < 5 * xi.std(0) / math.sqrt(runs))


@pytest.mark.slow  # a statistical check of tens of seconds: runs with the slow set
def test_peri_sde_agrees_with_the_network():
    """Seeded: the peri-norm network at dt = 0.005 against its SDE on the mean inner product of
    the directions, with the mean part M = I (which enters through c_d / (sigma |y|)); the weak
    order itself: diagnostics/norm_weak_order.py."""
    p = ModelParams(n=3, d=4, beta=2.0, norm="peri", mean="identity", sigma=0.8)
    net = simulate(p, TimeGrid.make(T=1.0, dt=0.005), runs=20000, seed=3).gram[:, -1, 0, 1]
    sde = simulate(p, TimeGrid.make(T=1.0, dt=0.005), runs=20000, seed=2, scheme="sde").gram[:, -1, 0, 1]
    flat = simulate(p.with_(mean="none"), TimeGrid.make(T=1.0, dt=0.005), runs=20000, seed=2,
                    scheme="sde").gram[:, -1, 0, 1]
    se = math.sqrt(float(net.var() + sde.var()) / 20000)
    assert abs(float(net.mean() - sde.mean())) < 4 * se
    assert float(sde.mean() - flat.mean()) > 6 * se  # the drift term is visible
