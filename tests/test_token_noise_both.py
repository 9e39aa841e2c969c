"""Common noise (the value matrices, `sigma > 0`) and independent token noise (`token_noise > 0`)
together (docs/token-noise.md): both schemes run, the result depends on both noises, is
reproducible from the seed and does not depend on the batch size; and two seeded statistical
checks against closed forms, each able to fail."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokensde import ModelParams
from tokensde.model.params import TimeGrid
from tokensde.sim import Execution, InitialState, Recording, simulate

SCHEMES = ["network", "sde"]


def _final(scheme: str, sigma: float, tau: float, seed: int = 5,
           batch_size: int | None = None) -> np.ndarray:
    p = ModelParams(n=4, d=3, beta=1.0, mean="identity", sigma=sigma, token_noise=tau)
    res = simulate(p, TimeGrid.make(T=0.5, dt=0.05), runs=7, seed=seed, scheme=scheme,
                   recording=Recording(record=("tokens",)),
                   execution=Execution(batch_size=batch_size))
    assert res.tokens is not None
    return res.tokens[:, -1]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_both_noises_run_and_each_matters(scheme):
    both = _final(scheme, 0.5, 0.7)
    assert np.allclose(np.linalg.norm(both, axis=-1), 1.0, atol=1e-12)
    common_only, token_only, neither = (_final(scheme, 0.5, 0.0), _final(scheme, 0.0, 0.7),
                                        _final(scheme, 0.0, 0.0))
    for other in (common_only, token_only, neither):
        assert np.abs(both - other).max() > 1e-3
    # reproducible from the seed, another seed differs, and the batch size changes no bit
    assert np.array_equal(both, _final(scheme, 0.5, 0.7))
    assert np.abs(both - _final(scheme, 0.5, 0.7, seed=6)).max() > 1e-3
    assert np.array_equal(both, _final(scheme, 0.5, 0.7, batch_size=2))
    assert np.array_equal(both, _final(scheme, 0.5, 0.7, batch_size=3))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_one_token_diffuses_at_the_sum_of_the_two_rates(scheme):
    """One token with `M = 0` attends to itself only (`y = x`), so the value noise moves it by
    `V x`, `N(0, sigma^2 I)` for Gaussian matrix noise, independent of its own noise `tau g`.
    It is then a Brownian motion on `S^{d-1}` with generator `(sigma^2 + tau^2)/2` Laplace-
    Beltrami, and `E <x(0), x(t)> = exp(-(d-1) (sigma^2 + tau^2) t / 2)`: the variances add.

    d = 3, sigma = 0.6, tau = 0.8, t = 1, dt = 0.01: the schemes' exact bias (their one-step
    factor `c = E <x, x'>` by quadrature, `c^L`) is -0.0018 (network) and +0.0017 (sde), about
    half a standard error (0.0034). Tolerance 4 standard errors. Ignoring either noise (0.53 or
    0.70) or adding the scales instead of the variances (0.14) fails it by far."""
    d, sigma, tau, T, runs = 3, 0.6, 0.8, 1.0, 20000
    p = ModelParams(n=1, d=d, beta=1.0, mean="none", sigma=sigma, token_noise=tau)
    start = np.zeros((1, d))
    start[0, 0] = 1.0
    res = simulate(p, TimeGrid.make(T=T, dt=0.01), runs=runs, seed=11, scheme=scheme,
                   initial=InitialState.tokens(start), recording=Recording(record=("tokens",)))
    assert res.tokens is not None
    own = res.tokens[:, -1, 0, 0]
    want = math.exp(-(d - 1) * (sigma**2 + tau**2) * T / 2)
    se = own.std() / math.sqrt(own.size)
    assert abs(own.mean() - want) < 4 * se, (own.mean(), want, se)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pair_cosine_decays_at_twice_the_token_rate(scheme):
    """No drift (`M = 0`), no common noise: two tokens are independent Brownian motions with
    generator `tau^2/2` Laplace-Beltrami, so `d <x_1, x_2> = -(d-1) tau^2 <x_1, x_2> dt +
    martingale` (each token's Ito drift `-(d-1)/2 tau^2 x`, no cross variation) and
    `E <x_1(t), x_2(t)> = rho0 exp(-(d-1) tau^2 t)`.

    d = 4, tau = 0.7, rho0 = 0.5, t = 0.5, dt = 0.01, 8192 pairs: want 0.2398, standard error
    about 0.005, the schemes' exact bias (`rho0 c^(2L)`) under 1e-4; tolerance 4 standard
    errors. A factor sqrt 2 in the noise's scale (0.115) or a noise shared by the tokens (0.5:
    the cosine stays) fails it."""
    d, tau, rho0, T, runs = 4, 0.7, 0.5, 0.5, 8192
    p = ModelParams(n=2, d=d, beta=1.0, mean="none", sigma=0.0, token_noise=tau)
    res = simulate(p, TimeGrid.make(T=T, dt=0.01), runs=runs, seed=12, scheme=scheme,
                   initial=InitialState.pair(rho0), recording=Recording(record=("tokens",)))
    assert res.tokens is not None
    x0, x = res.tokens[:, 0], res.tokens[:, -1]
    assert np.allclose((x0[:, 0] * x0[:, 1]).sum(-1), rho0, atol=1e-12)
    cos = (x[:, 0] * x[:, 1]).sum(-1)
    want = rho0 * math.exp(-(d - 1) * tau**2 * T)
    se = cos.std() / math.sqrt(cos.size)
    assert abs(cos.mean() - want) < 4 * se, (cos.mean(), want, se)
