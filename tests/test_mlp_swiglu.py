"""The gated MLP block `mlp='swiglu'` (docs/mlp_theory.md §6): its dual kernel against Monte Carlo
of the block itself and against closed identities, the samplers' law (the split into gates and
inputs, the zero units), the network and depth-limit schemes, and what is refused."""

import math
import pickle

import numpy as np
import pytest
import torch
from scipy import integrate

from tokensde import Execution, ModelParams, ParameterError, TimeGrid, simulate
from tokensde.model.mlp import MLPS
from tokensde.model.mlp.swiglu import _silu_kernel, swiglu_at
from tokensde.sim.rng import RunStreams
from tokensde.sim.samplers import _mlp_noise_fast, _mlp_noise_full, mlp_noise_sde

SWIGLU = MLPS.get("swiglu")()


def _silu(z: np.ndarray) -> np.ndarray:
    return z / (1.0 + np.exp(-z))


def _gaussian_moment(f) -> float:
    return integrate.quad(lambda u: f(u) * math.exp(-u * u / 2) / math.sqrt(2 * math.pi),
                          -40, 40, epsabs=1e-14, limit=200)[0]


@pytest.mark.parametrize(("q", "rho"), [(1.0, -0.8), (1.0, 0.35), (0.05, -0.5), (0.05, 0.7)])
def test_kernel_matches_monte_carlo_of_the_gated_block(q, rho):
    """Units `silu(<w1, x>) <w3, x>` of the block itself (W_1 of entry variance q/d, W_3 of
    1/d, two unit tokens of cosine rho in R^4): E[h(x) h(y)] / E[h(x)^2] = rho kappa_q / kappa_q(1)."""
    g = np.random.default_rng(17)
    d, units = 4, 400_000
    x = np.array([1.0, 0, 0, 0])
    y = np.array([rho, math.sqrt(1 - rho * rho), 0, 0])
    w1 = g.standard_normal((units, d)) * math.sqrt(q)
    w3 = g.standard_normal((units, d))
    hx, hy = _silu(w1 @ x) * (w3 @ x), _silu(w1 @ y) * (w3 @ y)
    m2 = float(np.mean(hx * hx))
    prod = hx * hy
    mc, se = float(prod.mean()) / m2, float(prod.std()) / math.sqrt(units) / m2
    name = swiglu_at(q)
    got = float(MLPS.get(name)().kernel(np.array(rho)))
    assert abs(got - mc) < 4 * se + 1e-3, (got, mc, se)


def test_closed_values_of_the_kernel():
    # kappa(1) by adaptive quadrature; kappa(1) - kappa(-1) = E[u silu(u)] = E[u^2 sigmoid(u)] = 1/2
    k1 = _gaussian_moment(lambda u: _silu(u) ** 2)
    assert 2 * SWIGLU.second_moment == pytest.approx(k1, rel=1e-12)
    assert float(SWIGLU.kernel(np.array(-1.0))) == pytest.approx(1 / (2 * k1) - 1, rel=1e-11)
    assert float(SWIGLU.kernel(np.array(1.0))) == pytest.approx(1.0, abs=1e-14)
    assert float(SWIGLU.kernel(np.array(0.0))) == 0.0
    # small gate variance q: silu(z) = z/2 + z^2/4 + O(z^4), so kappa_q(rho) = q rho / 4 +
    # q^2 (1 + 2 rho^2) / 16 + O(q^3): the unit is nearly bilinear and khat(rho) -> rho^2
    q = 1e-4
    tiny = MLPS.get(swiglu_at(q))()
    r = np.array([-0.9, -0.3, 0.5, 0.8])
    want = r * (r + q * (1 + 2 * r * r) / 4) / (1 + 3 * q / 4)
    np.testing.assert_allclose(tiny.kernel(r), want, atol=1e-7)
    assert float(np.abs(want - r * r).max()) > 1e-4  # the O(q) term is resolved
    # the 64-node rule against 2-D adaptive quadrature at one point
    rho, q = 0.3, 4.0
    s = math.sqrt(1 - rho * rho)
    ref = integrate.dblquad(
        lambda w, u: _silu(2 * u) * _silu(2 * (rho * u + s * w))
        * math.exp(-(u * u + w * w) / 2) / (2 * math.pi), -12, 12, -12, 12, epsabs=1e-12)[0]
    assert float(_silu_kernel(np.array(rho), q)) == pytest.approx(ref, rel=1e-7)


def test_complement_and_slope_at_one():
    w = np.array([1e-9, 1e-6, 9.9e-4, 1.01e-3, 0.1])
    c = SWIGLU.complement(w)
    # continuous across the switch to the Taylor series, and 1 - khat(1 - w) where that is accurate
    np.testing.assert_allclose(c[2:], 1 - SWIGLU.kernel(1 - w[2:]), rtol=1e-9)
    # khat'(1) = 1 + E[phi'^2] / E[phi^2], phi' = sigmoid(u) (1 + u (1 - sigmoid(u)))
    def dsilu(u):
        s = 1 / (1 + math.exp(-u))
        return s * (1 + u * (1 - s))
    slope = 1 + _gaussian_moment(lambda u: dsilu(u) ** 2) / (2 * SWIGLU.second_moment)
    assert SWIGLU.slope_at_one() == pytest.approx(slope, rel=1e-10)
    np.testing.assert_allclose(c[:2], slope * w[:2], rtol=1e-5)


def _tokens(runs: int) -> torch.Tensor:
    x = torch.tensor([[1.0, 0, 0, 0, 0], [0.6, 0.8, 0, 0, 0], [-0.9, 0.0, 0.3, 0.1, 0.0]],
                     dtype=torch.float64)
    x = x / x.norm(dim=-1, keepdim=True)
    return x.expand(runs, 3, 5).clone()


@pytest.mark.parametrize("draw", [_mlp_noise_full, _mlp_noise_fast, mlp_noise_sde])
def test_block_noise_has_the_gated_kernel_covariance(draw):
    """Each sampler's output has cross-covariance mlp_sigma^2 khat(<x_i, x_j>) I."""
    p = ModelParams(n=3, d=5, mlp="swiglu", mlp_sigma=0.7, mlp_width=8)
    runs = 40000
    x = _tokens(runs)
    xi = draw(x, p, RunStreams(5, runs))
    cov = torch.einsum("ria,rja->ij", xi, xi) / (runs * 5)
    want = 0.49 * p.mlp_block.kernel((x[0] @ x[0].T).numpy())
    prod = (xi.unsqueeze(2) * xi.unsqueeze(1)).mean(-1)
    se = prod.std(0) / math.sqrt(runs)
    assert torch.all((cov - torch.from_numpy(want)).abs() < 5 * se + 1e-3), (cov, want)


@pytest.mark.parametrize("draw", [_mlp_noise_full, _mlp_noise_fast])
def test_one_gated_unit_has_its_fourth_moment(draw):
    """mlp_width = 2 is one unit h = silu(a) b (the second hidden unit is zero): a coordinate of
    the output is s w h, s^2 = 1 / E silu^2, so E xi^4 = 3 E silu^4 E b^4 / (E silu^2)^2 =
    9 E silu^4 / (E silu^2)^2 (two independent units would give less)."""
    p = ModelParams(n=3, d=5, mlp="swiglu", mlp_width=2)
    runs = 200000
    xi = draw(_tokens(runs), p, RunStreams(8, runs))[:, 0]
    m2, m4 = _gaussian_moment(lambda u: _silu(u) ** 2), _gaussian_moment(lambda u: _silu(u) ** 4)
    want = 9 * m4 / m2 ** 2
    se = xi.pow(4).std() / math.sqrt(xi.numel())
    assert abs(float(xi.pow(2).mean()) - 1.0) < 0.02
    assert abs(float(xi.pow(4).mean()) - want) < 5 * float(se), (float(xi.pow(4).mean()), want)


@pytest.mark.parametrize("scheme", ["network", "sde"])
def test_gram_sampler_has_the_law_of_the_fast_sampler(scheme):
    """Pre-norm, a weak attention and the gated block: the mean and mean square of the pair cosines
    after 8 steps agree between the Gram sampler (frame coordinates) and the fast one."""
    p = ModelParams(n=4, d=6, beta=1.0, norm="pre", sigma=0.6, mlp="swiglu", mlp_sigma=1.2,
                    mlp_width=12)
    grid, runs = TimeGrid(8, 0.02), 3000
    out = {}
    for sampler, seed in (("gram", 1), ("fast", 2)):
        res = simulate(p, grid, runs=runs, seed=seed, scheme=scheme,
                       execution=Execution(sampler=sampler))
        i, j = np.triu_indices(p.n, 1)
        v = res.gram[:, -1][:, i, j]
        out[sampler] = (v.mean(-1), np.square(v).mean(-1))
    for a, b in zip(out["gram"], out["fast"], strict=True):
        z = (a.mean() - b.mean()) / math.sqrt(a.var(ddof=1) / runs + b.var(ddof=1) / runs)
        assert abs(z) < 4.5, z


def test_refusals_and_names():
    with pytest.raises(ParameterError, match=r"mlp_width must be even with mlp='swiglu'"):
        ModelParams(n=3, d=4, mlp="swiglu", mlp_width=7)
    with pytest.raises(ParameterError, match=r"mlp must be one of .*swiglu"):
        ModelParams(n=3, d=4, mlp="swiglu(q=-1)")
    p = ModelParams(n=3, d=4, mlp=swiglu_at(0.05), mlp_sigma=0.5)
    assert p.mlp == "swiglu(q=0.05)" and type(p.mlp_block).q == 0.05
    assert p.mlp_hidden == 16  # the default 4 d: 8 gates and 8 inputs
    assert pickle.loads(pickle.dumps(p)) == p
    assert swiglu_at(1.0) == "swiglu" and MLPS.get("swiglu(q=1)") is type(SWIGLU)
    with pytest.raises(ParameterError, match="even number of pre-activations"):
        SWIGLU(torch.zeros(2, 3))
