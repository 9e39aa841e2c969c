"""Random biases of the layer (tokensde.sim.bias, docs/variants.md §5 "Biases"): the output bias
`alpha bias_sigma g` common to the tokens and the hidden bias `mlp_bias c` of the MLP block,
against their closed forms; the other draws of a run unchanged; every refusal names its
parameter."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tokensde import Execution, InitialState, ModelParams, Recording, TimeGrid, simulate
from tokensde.model.checks import ParameterError
from tokensde.sim.bias import _hidden_biased
from tokensde.sim.rng import RunStreams


def _relu_kernel(rho: float) -> float:
    """E[relu(u) relu(v)] for standard normals of correlation rho (arc-cosine kernel)."""
    return (math.sqrt(1 - rho * rho) + (math.pi - math.acos(rho)) * rho) / (2 * math.pi)


@pytest.mark.parametrize("sampler", ["fast", "full"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_a_vanishing_bias_leaves_every_other_draw_unchanged(sampler, norm):
    """The biases draw from streams of their own: zero biases give the run without them bit for
    bit, and a bias of 1e-12 moves the run by rounding only (a shared stream would shift every
    later draw and move it by O(1))."""
    p = ModelParams(n=4, d=8, beta=1.5, heads=2, mlp="relu", mlp_sigma=0.7, norm=norm)
    kw = {"runs": 40, "seed": 5, "execution": Execution(sampler=sampler)}
    grid = TimeGrid.make(layers=6)
    base = simulate(p, grid, **kw).gram
    assert np.array_equal(base, simulate(p.with_(bias_sigma=0.0, mlp_bias=0.0), grid, **kw).gram)
    tiny = simulate(p.with_(bias_sigma=1e-12, mlp_bias=1e-12), grid, **kw).gram
    assert np.max(np.abs(tiny - base)) < 1e-9
    moved = simulate(p.with_(bias_sigma=0.3), grid, **kw).gram
    assert np.max(np.abs(moved - base)) > 0.05


def test_output_bias_is_one_common_vector_of_variance_dt_bias_sigma2():
    """Pre-norm, no value noise and no block: a layer is `h + alpha bias_sigma g`, the same g for
    every token, of per-coordinate variance dt bias_sigma^2 (5-sigma chi-square band over
    runs x d)."""
    d, runs, b, dt = 6, 4000, 0.8, 0.25
    p = ModelParams(n=3, d=d, sigma=0.0, bias_sigma=b, norm="pre")
    r = simulate(p, TimeGrid.make(layers=1, alpha=dt ** 0.5), runs=runs, seed=2,
                 recording=Recording(record=("tokens",)), execution=Execution(sampler="fast"))
    step = r.tokens[:, 1] - r.tokens[:, 0]
    assert np.max(np.abs(step - step[:, :1])) < 1e-12  # common to the tokens
    var = float((step[:, 0] ** 2).mean()) / (dt * b * b)
    assert abs(var - 1) < 5 * math.sqrt(2 / (runs * d))


def test_post_norm_output_bias_matches_its_closed_form_on_two_tokens():
    """Post-norm, one layer (alpha = 1), no value noise, x_1 and x_2 orthonormal: the cosine
    after the layer is `<N(x_1 + s g), N(x_2 + s g)>`, g ~ N(0, I_d); its mean from an
    independent numpy Monte Carlo of that formula against the simulator (5 combined SE)."""
    d, s = 5, 0.6
    p = ModelParams(n=2, d=d, sigma=0.0, bias_sigma=s, norm="post")
    init = np.eye(d)[:2]
    r = simulate(p, TimeGrid.make(layers=1, alpha=1.0), runs=20000, seed=4, initial=InitialState(init),
                 execution=Execution(sampler="full"))
    got = float(r.gram[:, -1, 0, 1].mean())
    g = np.random.default_rng(0).standard_normal((400000, d)) * s
    a, b = init[0] + g, init[1] + g
    ref = np.einsum("rd,rd->r", a, b) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    se = math.hypot(float(r.gram[:, -1, 0, 1].std()) / math.sqrt(20000),
                    float(ref.std()) / math.sqrt(400000))
    assert abs(got - float(ref.mean())) < 5 * se
    assert float(ref.mean()) > 0.1  # the common vector aligns the pair


@pytest.mark.parametrize("sampler", ["fast", "full"])
def test_hidden_bias_changes_the_block_kernel_as_the_arc_cosine_formula_says(sampler):
    """ReLU block with hidden bias b: for unit tokens of correlation rho the outputs have
    cross-covariance `mlp_sigma^2 E[relu(u) relu(v)] / kappa(1)` per coordinate, (u, v) of
    variance 1 + b^2 and covariance rho + b^2: `(1 + b^2) k((rho + b^2)/(1 + b^2)) / k(1)`."""
    d, runs, b, s = 4, 6000, 1.0, 1.0
    p = ModelParams(n=2, d=d, mlp="relu", mlp_sigma=s, mlp_width=8, mlp_bias=b, norm="pre")
    u = torch.zeros(runs, 2, d, dtype=torch.float64)
    u[:, 0, 0] = 1.0
    u[:, 1, 1] = 1.0  # rho = 0
    rs = RunStreams(7, runs)
    c = RunStreams(8, runs).normal(1, p.mlp_hidden)
    out = _hidden_biased(u, p, sampler, rs, c)
    cross = (out[:, 0] * out[:, 1]).sum(-1) / d
    sq = (out[:, 0] ** 2).sum(-1) / d
    r = b * b / (1 + b * b)
    want_cross = s * s * (1 + b * b) * _relu_kernel(r) / 0.5
    want_sq = s * s * (1 + b * b)
    for got, want in ((cross, want_cross), (sq, want_sq)):
        se = float(got.std()) / math.sqrt(runs)
        assert abs(float(got.mean()) - want) < 5 * se, (float(got.mean()), want, se)
    assert want_cross > 1.0  # without the bias it would be 1/pi: the test can tell


def test_pre_norm_limit_adds_a_brownian_motion_common_to_the_tokens():
    """scheme='sde', pre-norm, no other noise: h_T - h_0 is one vector for all tokens with
    per-coordinate variance T bias_sigma^2."""
    d, runs, b = 5, 3000, 0.5
    p = ModelParams(n=3, d=d, sigma=0.0, bias_sigma=b, norm="pre")
    r = simulate(p, TimeGrid.make(T=2.0, dt=0.25), runs=runs, seed=1, scheme="sde",
                 recording=Recording(record=("tokens",)), execution=Execution(sampler="fast"))
    step = r.tokens[:, -1] - r.tokens[:, 0]
    assert np.max(np.abs(step - step[:, :1])) < 1e-12
    var = float((step[:, 0] ** 2).mean()) / (2.0 * b * b)
    k = runs * d
    assert abs(var - 1) < 5 * math.sqrt(2 / k)


def test_biases_are_checked_and_refused_by_name():
    with pytest.raises(ParameterError, match="bias_sigma must be a finite number >= 0"):
        ModelParams(n=2, d=3, bias_sigma=-0.1)
    with pytest.raises(ParameterError, match="mlp_bias must be 0 with mlp='none'"):
        ModelParams(n=2, d=3, mlp_bias=0.2)
    with pytest.raises(ParameterError, match="mlp_bias must be a finite number >= 0"):
        ModelParams(n=2, d=3, mlp="relu", mlp_bias=float("nan"))
    p = ModelParams(n=2, d=16, bias_sigma=0.1)
    with pytest.raises(ParameterError, match="sampler='gram' does not carry the biases"):
        simulate(p, TimeGrid.make(layers=2), execution=Execution(sampler="gram"))
    assert simulate(p, TimeGrid.make(layers=2)).sampler == "fast"  # auto never takes the Gram sampler
    with pytest.raises(ParameterError, match="bias_sigma with scheme='sde' needs norm='pre'"):
        simulate(p, TimeGrid.make(layers=2), scheme="sde")
    with pytest.raises(ParameterError, match=r"mlp_bias .* scheme='network' only"):
        simulate(ModelParams(n=2, d=16, mlp="relu", mlp_bias=0.1, norm="pre"), TimeGrid.make(layers=2),
                 scheme="sde")


def test_biases_stay_out_of_the_fingerprint_at_their_defaults():
    p = ModelParams(n=2, d=3)
    assert "bias_sigma" not in p.to_dict() and "mlp_bias" not in p.to_dict()
    q = ModelParams(n=2, d=3, mlp="relu", bias_sigma=0.2, mlp_bias=0.1)
    assert q.to_dict()["bias_sigma"] == 0.2 and ModelParams.from_dict(q.to_dict()) == q
    assert q.has_bias and not p.has_bias and not q.rotation_invariant
