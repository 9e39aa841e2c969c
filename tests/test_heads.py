"""Attention heads (docs/variants.md §2): per-head weights, independent value noise of variance
sigma^2/heads summed over heads, the SDE's covariance summed over heads; heads = 1 unchanged."""

import math

import numpy as np
import pytest
import torch

from tokensde import Execution, ModelParams, ParameterError, Recording, TimeGrid, simulate
from tokensde.sim.layers import _attention_output
from tokensde.sim.rng import RunStreams
from tokensde.sim.samplers import _noise_sampler, choose_sampler
from tokensde.sim.sde import ito_correction

Q = np.arange(16.0).reshape(4, 4) / 20 + np.eye(4)

# rho_01 at the last layer of 5 runs (layers=7, seed=11), computed before heads existed: the
# random streams and the arithmetic of heads = 1 are those of the earlier code. The two `fast`
# rows were recomputed when the fast sampler's factor became continuous (the symmetric root for
# runs within the pivot margin): runs 1-3 pass within it before layer 7.
BEFORE = {
    "fast_network": ((dict(n=3, d=4, beta=2.0), dict(sampler="fast")),
                     [-0.944778365489, -0.477674505259, 0.626656761115, 0.902700630249,
                      -0.806429400684]),
    "full_network_uniform": ((dict(n=3, d=4, law="uniform", sigma=0.7, mean="identity"),
                              dict(sampler="full")),
                             [0.631284438454, 0.700583624357, 0.876511147776, 0.988156362637,
                              -0.027531124225]),
    "full_sde_QK": ((dict(n=3, d=4, Q=Q, causal=True), dict(sampler="full", scheme="sde")),
                    [0.704494008085, -0.583412589383, 0.849147107766, 0.977136897944,
                     -0.797929283332]),
    "fast_sde_mean": ((dict(n=3, d=4, mean="identity", sigma=0.5),
                       dict(sampler="fast", scheme="sde")),
                      [0.905114604576, 0.004080454838, 0.900354637815, 0.869733304546,
                       -0.569195112183]),
    "scalar_sde": ((dict(n=3, d=4, noise="scalar", eps=0.8), dict(sampler="full", scheme="sde")),
                   [-0.016647212433, 0.024842363937, -0.713598170138, 0.226792390685,
                    -0.422238689939]),
    "symmetric_usa": ((dict(n=3, d=4, noise="symmetric", attention="usa"), dict(sampler="full")),
                      [0.891325277535, 0.737724208232, 0.998564343682, 0.999866921022,
                       -0.504506222692]),
    "gram": ((dict(n=2, d=9), dict(sampler="gram")),
             [0.99750376039, 0.916434096226, 0.921412712354, 0.995915365331, 0.997963046472]),
}


@pytest.mark.parametrize("case", sorted(BEFORE))
def test_one_head_reproduces_the_earlier_numbers(case):
    (kw, skw), want = BEFORE[case]
    how, scheme = Execution(sampler=skw["sampler"]), skw.get("scheme", "network")
    for extra in ({}, {"heads": 1}, {"qk": "identity", "qk_scale": 1.0, "qk_redraw": "run"}):
        res = simulate(ModelParams(**kw, **extra), TimeGrid.make(layers=7), runs=5, seed=11,
                       scheme=scheme, execution=how)
        np.testing.assert_allclose(res.gram[:, -1, 0, 1], want, rtol=0, atol=1e-11)
    assert "heads" not in ModelParams(**kw).to_dict()  # fingerprints of stored results unchanged


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [({"heads": 0}, "heads must be an integer from 1 to 2147483647; got 0"),
     ({"heads": 1.5}, "heads must be an integer from 1 to 2147483647"),
     ({"heads": True}, "heads must be an integer from 1 to 2147483647"),
     ({"heads": 2, "Q": np.ones((3, 4, 4))}, r"Q must be a 4x4 matrix \(d = 4\) or one per "
      r"head, shape \(2, 4, 4\); got 'shape \(3, 4, 4\)'"),
     ({"heads": 1, "K": np.ones((1, 4, 4))}, r"K must be a 4x4 matrix \(d = 4\); got"),
     ({"heads": 2, "K": np.full((2, 4, 4), np.nan)}, "K must be finite")],
)
def test_bad_heads_name_the_parameter(kwargs, msg):
    with pytest.raises(ParameterError, match=msg):
        ModelParams(n=3, d=4, **kwargs)


def test_gram_sampler_takes_heads_sharing_one_form_and_refuses_forms_per_head():
    # heads sharing Q^T K = c I have one output: the Gram sampler applies (tests/test_gram_variants.py)
    p = ModelParams(n=2, d=9, heads=2)
    assert p.rotation_invariant and choose_sampler(p) == "gram"
    assert choose_sampler(ModelParams(n=2, d=9, heads=2, Q=2 * np.eye(9)), "gram") == "gram"
    q, k = _qk_heads(2, 9)
    for per_head in (ModelParams(n=2, d=9, heads=2, Q=q, K=k),
                     ModelParams(n=2, d=9, heads=2, Q=np.stack([np.eye(9)] * 2))):
        assert not per_head.rotation_invariant and choose_sampler(per_head) == "fast"
        with pytest.raises(ParameterError, match=r"sampler='gram' needs one query/key form "
                           r"Q\^T K = c I shared by the heads; got Q/K per head, shape \(2, 9, 9\)"):
            choose_sampler(per_head, "gram")


def _qk_heads(heads: int, d: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    return (np.eye(d) + 0.5 * g.standard_normal((heads, d, d)),
            np.eye(d) + 0.5 * g.standard_normal((heads, d, d)))


def test_each_head_attends_with_its_own_query_and_key():
    q, k = _qk_heads(3, 4)
    p = ModelParams(n=5, d=4, beta=2.0, heads=3, Q=q, K=k, causal=True)
    x = torch.nn.functional.normalize(torch.randn(2, 5, 4, dtype=torch.float64), dim=-1)
    y = _attention_output(x, p)
    assert y.shape == (2, 3, 5, 4)
    for h in range(3):
        one = ModelParams(n=5, d=4, beta=2.0, Q=q[h], K=k[h], causal=True)
        torch.testing.assert_close(y[:, h], _attention_output(x, one), rtol=1e-13, atol=1e-14)
    shared = _attention_output(x, ModelParams(n=5, d=4, heads=3, Q=q[0]))  # one pair for all
    torch.testing.assert_close(shared, _attention_output(x, ModelParams(n=5, d=4, Q=q[0]))
                               .unsqueeze(1).expand(-1, 3, -1, -1))


@pytest.mark.parametrize("noise", ["matrix", "symmetric", "scalar"])
def test_ito_drift_is_the_mean_over_heads(noise):
    q, k = _qk_heads(2, 4)
    p = ModelParams(n=3, d=4, heads=2, Q=q, K=k, noise=noise, sigma=0.7)
    x = torch.nn.functional.normalize(torch.randn(6, 3, 4, dtype=torch.float64), dim=-1)
    y = _attention_output(x, p)
    want = sum(p.noise_law.ito(x, y[:, h]) for h in range(2)) / 2
    torch.testing.assert_close(ito_correction(x, y, p), want)
    if noise == "matrix":  # closed form: -(d-1)/2 sigma^2 (1/heads) sum_h |y^h|^2 x
        y2 = (y * y).sum(-1, keepdim=True).mean(1)
        torch.testing.assert_close(ito_correction(x, y, p), -1.5 * 0.49 * y2 * x)


@pytest.mark.parametrize(("sampler", "law"), [("fast", "gaussian"), ("full", "gaussian"),
                                              ("full", "uniform")])
def test_layer_noise_covariance_sums_over_heads(sampler, law):
    # E[xi_i xi_j^T] = (sigma^2/heads) sum_h <y^h_i, y^h_j> I
    q, k = _qk_heads(2, 4, seed=3)
    p = ModelParams(n=2, d=4, beta=3.0, heads=2, Q=q, K=k, law=law, sigma=0.8)
    x0 = torch.nn.functional.normalize(torch.randn(1, 2, 4, dtype=torch.float64,
                                                   generator=torch.Generator().manual_seed(5)),
                                       dim=-1)
    runs = 40_000
    y = _attention_output(x0, p).expand(runs, -1, -1, -1)
    xi = _noise_sampler(sampler, p)(y, p, RunStreams(7, runs))
    yy = torch.einsum("hid,hjd->ij", y[0], y[0]) * p.sigma**2 / 2
    emp = torch.einsum("rid,rje->ijde", xi, xi) / runs
    for i in range(2):
        for j in range(2):
            want = yy[i, j] * torch.eye(4, dtype=torch.float64)
            se = 5 * math.sqrt(2 / runs) * float(yy.diagonal().max())
            assert float((emp[i, j] - want).abs().max()) < se


@pytest.mark.parametrize("scheme", ["network", "sde"])
@pytest.mark.parametrize("sampler", ["fast", "full"])
def test_simulate_with_heads_stays_on_the_sphere_and_is_seeded(scheme, sampler):
    q, k = _qk_heads(3, 4)
    p = ModelParams(n=3, d=4, heads=3, Q=q, K=k, mean="identity", sigma=0.8)
    keep, how = Recording(record=("gram", "tokens")), Execution(sampler=sampler)
    runs = [simulate(p, TimeGrid.make(layers=6), runs=4, seed=2, scheme=scheme, recording=keep,
                     execution=how) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].x, runs[1].x)
    np.testing.assert_allclose(np.linalg.norm(runs[0].x, axis=-1), np.ones((4, 3)), rtol=1e-7)
    assert runs[0].metadata()["params"]["heads"] == 3


def test_coupled_network_and_sde_with_heads_agree_on_a_fine_grid():
    # the discrete network and the SDE on one Brownian path per head: strong error -> 0 with dt
    from tokensde.sim import coupled_states

    q, k = _qk_heads(2, 3)
    p = ModelParams(n=3, d=3, beta=1.0, heads=2, Q=q, K=k)
    x0 = torch.nn.functional.normalize(torch.randn(64, 3, 3, dtype=torch.float64,
                                                   generator=torch.Generator().manual_seed(0)),
                                       dim=-1)
    nets, fine, _ = coupled_states(x0, p, 0.5, (4, 64), 256, RunStreams(3, 64), ("gaussian",))
    err = {L: float((nets["gaussian", L] - fine).square().sum(-1).mean().sqrt()) for L in (4, 64)}
    assert err[64] < err[4] / 2.5  # strong order 1/2 at least: ratio sqrt(16) = 4 expected
