"""The batched simulator: geometry, reproducibility, and the physics claims of spec §2 and §5."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from tokensde import Execution, InitialState, ModelParams, ParameterError, Recording, TimeGrid, simulate
from tokensde.analysis.stats import wilson
from tokensde.sim.batch import _CACHE_BYTES, default_batch
from tokensde.sim.layers import _attention_weights, network_step
from tokensde.sim.rng import _RUN_BLOCK, RunStreams
from tokensde.sim.samplers import _fast_noise, _full_noise, choose_sampler


def unit_sphere_error(x: np.ndarray) -> float:
    return float(np.abs(np.linalg.norm(x, axis=-1) - 1).max())


def test_tokens_stay_on_sphere_over_1e4_layers():
    p = ModelParams(n=6, d=5, beta=2.0, mean="identity", sigma=1.0)
    res = simulate(p, TimeGrid.make(layers=10_000), runs=8, seed=3,
                   recording=Recording(checkpoints=5, record=("gram", "tokens")))
    assert unit_sphere_error(res.x) < 1e-12
    assert unit_sphere_error(res.tokens) < 1e-12
    diag = np.diagonal(res.gram, axis1=-2, axis2=-1)
    assert float(np.abs(diag - 1).max()) < 1e-12


@pytest.mark.parametrize("scheme", ["network", "sde"])
def test_huge_beta_is_finite(scheme):
    p = ModelParams(n=8, d=4, beta=1e4)
    res = simulate(p, TimeGrid.make(T=2.0, dt=0.01), runs=16, seed=1, scheme=scheme)
    assert np.isfinite(res.x).all() and np.isfinite(res.gram).all()
    assert unit_sphere_error(res.x) < 1e-12


def test_softmax_attention_rows_and_causal_mask():
    x = torch.nn.functional.normalize(torch.randn(3, 5, 4, dtype=torch.float64), dim=-1)
    p = ModelParams(n=5, d=4, beta=1e4, causal=True)
    a = _attention_weights(x, p)
    assert torch.allclose(a.sum(-1), torch.ones(3, 5, dtype=torch.float64))
    assert float(a.triu(1).abs().max()) == 0.0
    # beta -> infinity: each token attends to itself (its own logit is the largest)
    assert torch.allclose(torch.diagonal(a, dim1=-2, dim2=-1), torch.ones(3, 5, dtype=torch.float64))
    usa = _attention_weights(x, ModelParams(n=5, d=4, beta=0.7, attention="usa"))
    expected = torch.exp(0.7 * x @ x.transpose(-1, -2)) / 5
    assert torch.allclose(usa, expected)


def test_query_key_matrices_enter_as_bilinear_form():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    x = torch.nn.functional.normalize(torch.randn(2, 4, 3, dtype=torch.float64), dim=-1)
    a = _attention_weights(x, ModelParams(n=4, d=3, beta=1.3, Q=q, K=k))
    qx, kx = x @ torch.tensor(q).T, x @ torch.tensor(k).T
    ref = torch.softmax(1.3 * qx @ kx.transpose(-1, -2), dim=-1)
    assert torch.allclose(a, ref)


@pytest.mark.parametrize("mean", ["none", "identity"])
def test_network_step_is_the_formula_and_leaves_its_inputs_alone(mean):
    g = torch.Generator().manual_seed(5)
    x, y, xi = (torch.randn(3, 4, 6, generator=g, dtype=torch.float64) for _ in range(3))
    x = x / x.norm(dim=-1, keepdim=True)
    before = [t.clone() for t in (x, y, xi)]
    z = x + 0.1 * xi + (0.01 * y if mean == "identity" else 0.0)
    out = network_step(x, y, xi, ModelParams(n=4, d=6, mean=mean), 0.01)
    torch.testing.assert_close(out, z / z.norm(dim=-1, keepdim=True), rtol=0, atol=1e-15)
    assert all(torch.equal(a, b) for a, b in zip((x, y, xi), before, strict=True))


def test_same_seed_same_numbers_whatever_the_batching():
    p = ModelParams(n=3, d=6, beta=1.5)
    ref = simulate(p, TimeGrid.make(layers=40), runs=600, seed=11, recording=Recording(checkpoints=4))
    for bs in (256, 512, 10):
        other = simulate(p, TimeGrid.make(layers=40), runs=600, seed=11, recording=Recording(checkpoints=4),
                         execution=Execution(batch_size=bs))
        assert np.array_equal(ref.gram, other.gram), bs
    assert not np.array_equal(ref.gram, simulate(p, TimeGrid.make(layers=40), runs=600, seed=12,
                                                 recording=Recording(checkpoints=4)).gram)


@pytest.mark.parametrize(("sampler", "n", "d", "dtype", "device", "expected"), [
    ("fast", 2, 16, torch.float64, "cpu", 16384),   # 4 MiB / (2 * 16 * 8 B)
    ("fast", 2, 16, torch.float32, "cpu", 32768),   # 4-byte items: twice the runs
    ("gram", 8, 1024, torch.float64, "cpu", 4096),  # factor 2n x n, whatever d
    ("fast", 8, 1024, torch.float64, "cpu", 256),   # 64 runs fit: one whole block instead
    ("full", 2, 64, torch.float64, "cpu", 256),     # 128 runs fit
    ("fast", 8, 1024, torch.float64, "cuda", 1792),  # 1 GiB / (8 * 1024 * 8 * 8 B + 1 KiB)
])
def test_default_batch_fills_the_cache_on_cpu_and_the_memory_budget_on_cuda(
        sampler, n, d, dtype, device, expected):
    p = ModelParams(n=n, d=d, beta=1.0)
    assert default_batch(100_000, p, sampler, dtype, device) == expected
    assert default_batch(100, p, sampler, dtype, device) == 100


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 64), d=st.integers(2, 8192), runs=st.integers(1, 10**6),
       sampler=st.sampled_from(["fast", "full", "gram"]))
def test_default_batch_is_all_runs_or_the_most_whole_blocks_within_the_cache(n, d, runs, sampler):
    p = ModelParams(n=n, d=d, beta=1.0)
    bs = default_batch(runs, p, sampler, torch.float64)
    width = {"full": d * d, "fast": n * max(n, d), "gram": 2 * n * n}[sampler]
    assert bs == runs or (bs % _RUN_BLOCK == 0 and 0 < bs < runs)
    assert bs <= _RUN_BLOCK or bs * width * 8 <= _CACHE_BYTES
    assert bs == runs or bs == _RUN_BLOCK or (bs + _RUN_BLOCK) * width * 8 > _CACHE_BYTES  # largest


def test_two_token_pair_init_and_result_fields():
    res = simulate(ModelParams(n=2, d=4), TimeGrid.make(layers=10), runs=5, seed=0,
                   initial=InitialState.pair(-0.3), recording=Recording(checkpoints=[0, 5, 10]))
    np.testing.assert_allclose(res.rho()[:, 0], -0.3, atol=1e-15)
    assert res.gram.shape == (5, 3, 2, 2) and res.x.shape == (5, 2, 4)
    np.testing.assert_allclose(res.times, [0.0, 0.5, 1.0])
    meta = res.metadata()
    assert meta["seed"] == 0 and meta["params"]["d"] == 4 and meta["sampler"] == "fast"


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [  # each made inside the test: an option object checks what it can when made
        (lambda: {"runs": 0}, "runs must be an integer >= 1"),
        (lambda: {"seed": -1}, "seed must be an integer >= 0"),
        (lambda: {"execution": Execution(sampler="exact")}, "sampler must be one of"),
        (lambda: {"scheme": "rk4"}, "scheme must be one of network, sde"),
        (lambda: {"execution": Execution(dtype="float16")}, "dtype must be one of float64, float32"),
        (lambda: {"execution": Execution(device="tpu")}, "device must be"),
        (lambda: {"initial": InitialState("pair")}, "init='pair' needs rho0"),
        (lambda: {"initial": InitialState.pair(1.5)}, "rho0 must be"),
        (lambda: {"initial": InitialState.tokens(np.zeros((2, 3)))}, "non-zero token vectors"),
        (lambda: {"initial": InitialState.tokens(np.ones((4, 3)))}, "init array must have shape"),
        (lambda: {"recording": Recording(checkpoints=[0, 99])},
         "checkpoints must be layer indices in"),
        (lambda: {"recording": Recording(record=("energy",))}, "record must be a subset"),
    ],
)
def test_simulate_rejects_bad_arguments(kwargs, msg):
    with pytest.raises(ParameterError, match=msg):
        simulate(ModelParams(n=2, d=3), TimeGrid.make(layers=10), **{"runs": 2, **kwargs()})


def test_sampler_choice():
    assert choose_sampler(ModelParams(n=2, d=6)) == "fast"
    assert choose_sampler(ModelParams(n=2, d=64)) == "gram"
    assert choose_sampler(ModelParams(n=2, d=64, Q=2 * np.eye(64) + 0.1)) == "fast"
    assert choose_sampler(ModelParams(n=16, d=3)) == "full"
    assert choose_sampler(ModelParams(n=2, d=64, law="uniform")) == "full"
    with pytest.raises(ParameterError, match="sampler='fast' needs noise='matrix'"):
        choose_sampler(ModelParams(n=2, d=8, noise="symmetric"), "fast")


def _rho_after(sampler, scale=1.0, runs=6000, seed=0):
    p = ModelParams(n=2, d=16, beta=1.0, sigma=scale)
    res = simulate(p, TimeGrid.make(layers=8, alpha=0.15), runs=runs, seed=seed,
                   initial=InitialState.pair(0.2), execution=Execution(sampler=sampler))
    return res.rho()[:, -1]


def test_fast_and_full_samplers_have_the_same_law():
    fast, full = _rho_after("fast", seed=1), _rho_after("full", seed=2)
    assert stats.ks_2samp(fast, full).pvalue > 0.01
    # the same test detects noise whose variance is off by 10 %
    off = _rho_after("full", scale=math.sqrt(1.1), seed=3)
    assert stats.ks_2samp(fast, off).pvalue < 1e-3


def _one_layer_moments(sampler, rho, d, beta, dt, runs):
    """E[drho]/dt and E[drho^2]/dt after one layer, with antithetic noise pairs (xi, -xi)."""
    p = ModelParams(n=2, d=d, beta=beta)
    rs = RunStreams(seed=7, runs=runs)
    x = torch.zeros(runs, 2, d, dtype=torch.float64)
    x[:, 0, 0] = 1.0
    x[:, 1, 0], x[:, 1, 1] = rho, math.sqrt(1 - rho * rho)
    y = _attention_weights(x, p) @ x
    xi = sampler(y, p, rs)
    deltas = []
    for sign in (1.0, -1.0):
        z = network_step(x, y, sign * xi, p, dt)
        deltas.append((z[:, 0] * z[:, 1]).sum(-1) - rho)
    drift = 0.5 * (deltas[0] + deltas[1]) / dt
    second = 0.5 * (deltas[0] ** 2 + deltas[1] ** 2) / dt
    return drift.numpy(), second.numpy()


def spec_drift_diffusion(rho, d, beta, sigma=1.0):
    """Spec §5: drift and squared diffusion coefficient of rho."""
    p = math.exp(beta) / (math.exp(beta) + math.exp(beta * rho))
    q = 1 - p
    s, m = p * p + q * q, 2 * p * q
    return sigma**2 * (1 - rho**2) * ((d - 2) * m - s * rho), 2 * s * sigma**2 * (1 - rho**2) ** 2


@pytest.mark.parametrize("sampler", [_fast_noise, _full_noise])
@pytest.mark.parametrize("rho", [-0.7, 0.0, 0.5])
def test_one_layer_moments_match_spec_drift_and_diffusion(sampler, rho):
    d, beta, dt, runs = 6, 1.0, 2e-4, 40_000
    drift, second = _one_layer_moments(sampler, rho, d, beta, dt, runs)
    b, a = spec_drift_diffusion(rho, d, beta)
    se_b, se_a = drift.std() / math.sqrt(runs), second.std() / math.sqrt(runs)
    # precise enough that a 10 % error in either coefficient would fail
    assert 4 * se_b < 0.1 * abs(b) and 4 * se_a < 0.1 * a
    assert abs(drift.mean() - b) < 4 * se_b + 0.01 * abs(b)
    assert abs(second.mean() - a) < 4 * se_a + 0.01 * a


def test_deterministic_flow_ends_in_one_cluster():
    p = ModelParams(n=16, d=3, beta=1.0, sigma=0.0, mean="identity")
    res = simulate(p, TimeGrid.make(T=40.0, dt=0.1), runs=300, seed=5)
    g = res.gram[:, -1]
    one_cluster = (g > 1 - 1e-3).reshape(len(g), -1).all(1).mean()
    assert one_cluster >= 0.99


def test_pure_noise_at_large_beta_ends_bipolar_in_most_runs():
    p = ModelParams(n=16, d=3, beta=3.0, sigma=1.0)
    res = simulate(p, TimeGrid.make(T=20.0, dt=0.02), runs=200, seed=5)
    g = res.gram[:, -1].reshape(200, -1)
    bipolar = int(((np.abs(g) > 1 - 1e-3).all(1) & (g < -1 + 1e-3).any(1)).sum())
    lo, _ = wilson(bipolar, 200)
    assert lo > 0.5


def test_fast_sampler_is_exact_for_rank_deficient_tokens():
    """Merged (x_2 = x_1) and antipodal (x_3 = -x_1) tokens: the factor reproduces Y Y^T exactly,
    merged tokens stay merged, and fast and full agree in law after one layer."""
    from tokensde.sim.samplers import _gram_factor

    g = torch.Generator().manual_seed(0)
    base = torch.nn.functional.normalize(torch.randn(4, 5, generator=g, dtype=torch.float64), dim=-1)
    base[1], base[2] = base[0], -base[0]
    runs = 4000
    x0 = base.expand(runs, 4, 5).clone()
    y = _attention_weights(x0, ModelParams(n=4, d=5, beta=1.0)) @ x0
    c = _gram_factor(y)
    assert float((c @ c.transpose(-1, -2) - y @ y.transpose(-1, -2)).abs().max()) < 1e-14
    p = ModelParams(n=4, d=5, beta=1.0)
    out = {}
    for i, s in enumerate(("fast", "full")):
        res = simulate(p, TimeGrid.make(layers=3, alpha=0.3), runs=runs, seed=i, initial=InitialState(x0),
                       execution=Execution(sampler=s))
        gram = res.gram[:, -1]
        assert float(np.abs(gram[:, 0, 1] - 1).max()) < 1e-12  # merged stays merged
        out[s] = gram[:, 0, 3]
    assert stats.ks_2samp(out["fast"], out["full"]).pvalue > 0.01
