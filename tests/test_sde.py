"""The SDE limit (spec §3): Ito drift against the discrete network, coupling and convergence."""

import math

import pytest
import torch

from tokensde import InitialState, ModelParams, TimeGrid, simulate
from tokensde.sim import coupled_paths
from tokensde.sim.layers import _attention_output, _tangent, network_step, normalize
from tokensde.sim.rng import RunStreams
from tokensde.sim.samplers import _full_noise
from tokensde.sim.sde import ito_correction, sde_step

NOISES = [
    {"noise": "matrix"},
    {"noise": "matrix", "law": "uniform"},
    {"noise": "symmetric", "sigma": 0.7},
    {"noise": "scalar", "eps": 1.3},
    {"noise": "scalar", "law": "rademacher", "eps": 0.8},
]


def _tokens(runs, n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = normalize(torch.randn(n, d, generator=g, dtype=torch.float64))
    return x.expand(runs, n, d).clone()


def _mean_increment(step, x, y, xi, p, dt):
    """Antithetic estimate of E[x_{k+1} - x_k] / dt for one layer."""
    plus, minus = step(x, y, xi, p, dt), step(x, y, -xi, p, dt)
    return ((plus + minus) / 2 - x).mean(0) / dt


@pytest.mark.parametrize("kw", NOISES)
def test_sde_drift_equals_network_drift(kw):
    """The network's normalisation generates exactly the Ito correction of the SDE (to O(dt))."""
    p = ModelParams(n=4, d=5, beta=1.2, mean="identity", **kw)
    runs, dt = 100_000, 1e-4
    x = _tokens(runs, 4, 5)
    y = _attention_output(x, p)
    xi = _full_noise(y, p, RunStreams(seed=1, runs=runs))
    net = _mean_increment(network_step, x, y, xi, p, dt)
    sde = _mean_increment(sde_step, x, y, xi, p, dt)
    scale = float(net.abs().max())
    assert float((net - sde).abs().max()) < 0.02 * scale
    # and the correction is not negligible: dropping it breaks the agreement
    no_ito = _tangent(x[0], y[0]) if p.M is not None else 0 * y[0]
    assert float((net - no_ito).abs().max()) > 0.2 * scale


@pytest.mark.parametrize("kw", NOISES)
def test_ito_correction_keeps_the_norm_to_second_order(kw):
    p = ModelParams(n=3, d=4, beta=0.5, **kw)
    runs, dt = 200_000, 1e-3
    x = _tokens(runs, 3, 4, seed=2)
    y = _attention_output(x, p)
    xi = _full_noise(y, p, RunStreams(seed=3, runs=runs))
    z = x + dt * ito_correction(x, y, p) + dt**0.5 * _tangent(x, xi)
    excess = ((z * z).sum(-1) - 1).mean().abs().max()
    ito_size = float((dt * ito_correction(x, y, p)).norm(dim=-1).mean())
    assert float(excess) < 0.05 * ito_size


@pytest.mark.slow
def test_network_and_sde_agree_in_law_at_fine_steps():
    p = ModelParams(n=2, d=6, beta=1.0)
    grid = TimeGrid.make(T=0.5, dt=0.005)
    kw = {"runs": 20_000, "initial": InitialState.pair(0.0)}
    net = simulate(p, grid, seed=1, **kw).rho()[:, -1]
    sde = simulate(p, grid, seed=2, scheme="sde", **kw).rho()[:, -1]
    se = math.sqrt((net.var() + sde.var()).item() / 20_000)
    assert abs(net.mean() - sde.mean()).item() < 4 * se + 0.005


def _strong_error(layers, runs=400, substeps=8, seed=0):
    p = ModelParams(n=3, d=4, beta=1.0, mean="identity")
    grid = TimeGrid.make(T=0.5, dt=0.5 / layers)
    gen = torch.Generator().manual_seed(seed)
    h = grid.dt / substeps

    def increments(k):
        return h**0.5 * torch.randn(runs, substeps, 4, 4, generator=gen, dtype=torch.float64)

    x0 = _tokens(runs, 3, 4, seed=4)
    xn, xs = coupled_paths(x0, p, grid, increments, substeps)
    return float((xn - xs).norm(dim=-1).mean())


def test_coupled_network_converges_strongly_to_its_sde():
    e_coarse, e_fine = _strong_error(8), _strong_error(32)
    # strong order about 1/2: a 4x finer grid shrinks the error by about 2 (at least 1.5)
    assert e_fine < e_coarse / 1.5
    assert e_fine < 0.2
