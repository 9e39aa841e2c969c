"""The Gram-space sampler (spec §4): exact algebra against a drawn value matrix, the Wishart law of
its Bartlett factor, the same law as the fast sampler (and a wrong degrees-of-freedom count caught),
consistency of the tokens, the `simulate` contract, and the two-token phase boundary of spec §5."""

import math
from functools import cache

import numpy as np
import pytest
import torch
from scipy import stats

from tokensde import Execution, InitialState, ModelParams, ParameterError, Recording, TimeGrid, simulate
from tokensde.analysis.stats import wilson
from tokensde.sim.gram import (
    _bartlett,
    _frame_weights,
    frame_layer,
    noise_factor,
    recompress,
    run_batch_gram,
)
from tokensde.sim.layers import _attention_output, network_step, normalize, weights_from_logits
from tokensde.sim.loop import OnLayers
from tokensde.sim.observe import Observer
from tokensde.sim.rng import RunStreams
from tokensde.sim.samplers import apply_matrices, choose_sampler
from tokensde.sim.sde import sde_step
from tokensde.sim.simulate import _initial_tokens

F64 = torch.float64


def gram_of(x: torch.Tensor) -> torch.Tensor:
    return x @ x.transpose(-1, -2)


# --- exact algebra: one layer in the frame equals one layer with the whole matrix V ----------------

def _frame_draws_from(V: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Frame coordinates of x and the noise factor [B^T V B; T] that V induces (T from a QR of the
    out-of-frame block, so T^T T = (B_perp^T V B)^T (B_perp^T V B))."""
    n, d = x.shape[-2:]
    m = min(n, d)
    basis, _ = torch.linalg.qr(x.transpose(-1, -2), mode="complete")
    b, b_perp = basis[..., :m], basis[..., m:]
    u = x @ b
    inner = b.transpose(-1, -2) @ V @ b
    if m == d:
        return u, inner
    t = torch.linalg.qr(b_perp.transpose(-1, -2) @ V @ b, mode="r").R
    return u, torch.cat([inner, t], dim=-2)


CASES = [
    {"n": 4, "d": 9},
    {"n": 4, "d": 9, "mean": "identity"},
    {"n": 4, "d": 9, "mean": 0.7 * np.eye(9), "Q": 1.3 * np.eye(9), "causal": True},
    {"n": 3, "d": 5, "attention": "usa", "K": -0.8 * np.eye(5), "mean": "identity"},
    {"n": 5, "d": 6},  # d - m = 1 < m: a wide Bartlett factor
    {"n": 6, "d": 3, "mean": "identity"},  # n > d: the frame is all of R^d
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("scheme", ["network", "sde"])
def test_frame_layer_equals_the_layer_with_the_whole_value_matrix(case, scheme):
    p = ModelParams(beta=1.7, sigma=0.8, **case)
    g = torch.Generator().manual_seed(7)
    x = normalize(torch.randn(6, p.n, p.d, generator=g, dtype=F64))
    V = torch.randn(6, p.d, p.d, generator=g, dtype=F64)
    dt = 0.05
    y = _attention_output(x, p)
    step = network_step if scheme == "network" else sde_step
    x1 = step(x, y, p.sigma * apply_matrices(y, V), p, dt)
    u, h = _frame_draws_from(V, x)
    u1 = frame_layer(u, p, dt, scheme, h)
    assert u1.shape == (6, p.n, min(p.n, p.d))
    np.testing.assert_allclose(gram_of(u1).numpy(), gram_of(x1).numpy(), atol=1e-13)


@pytest.mark.parametrize("scheme", ["network", "sde"])
def test_deterministic_flow_follows_the_fast_sampler_path_exactly(scheme):
    p = ModelParams(n=5, d=12, beta=2.0, sigma=0.0, mean=0.6 * np.eye(12), Q=1.2 * np.eye(12))
    x0 = normalize(torch.randn(4, 5, 12, generator=torch.Generator().manual_seed(1), dtype=F64))
    grid = TimeGrid.make(layers=40, alpha=0.2)
    kw = {"runs": 4, "initial": InitialState.tokens(x0), "scheme": scheme,
          "recording": Recording(checkpoints=4)}
    fast = simulate(p, grid, execution=Execution(sampler="fast"), **kw)
    gram = simulate(p, grid, execution=Execution(sampler="gram"), **kw)
    np.testing.assert_allclose(gram.gram, fast.gram, atol=1e-11)
    assert float(fast.gram[:, -1, 0, 1].min()) < 0.99  # not trivially all merged


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("beta", [0.3, 1e4])
def test_softmax_shifted_by_the_own_logit_equals_the_row_max_shift(beta, causal):
    p = ModelParams(n=6, d=40, beta=beta, causal=causal)
    u = recompress(torch.randn(50, 6, 40, generator=torch.Generator().manual_seed(9), dtype=F64))
    u[:, 1] = u[:, 0]  # a merged pair: two rows share their largest logit
    got = _frame_weights(u, p, 1.0)
    ref = weights_from_logits(beta * gram_of(u), p)  # shifted by the row maxima
    assert bool(torch.isfinite(got).all())
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.sum(-1).numpy(), 1.0, atol=1e-14)


def test_recompress_keeps_the_gram_matrix_of_rank_deficient_tokens():
    z = torch.randn(5, 4, 8, generator=torch.Generator().manual_seed(2), dtype=F64)
    z[:, 1] = z[:, 0]
    z[:, 2] = -3.0 * z[:, 0]
    u = recompress(z)
    assert u.shape == (5, 4, 4)
    zn = normalize(z)
    np.testing.assert_allclose(gram_of(u).numpy(), gram_of(zn).numpy(), atol=1e-14)
    assert float((gram_of(u)[:, 0, 1] - 1).abs().max()) < 1e-14


# --- the Bartlett factor has the Wishart law -----------------------------------------------------

@pytest.mark.parametrize(("dof", "cols"), [(5, 3), (2, 3), (1, 2), (300, 4)])
def test_bartlett_factor_has_the_wishart_law(dof, cols):
    runs = 20_000
    t = _bartlett(RunStreams(seed=3, runs=runs), dof, cols)
    assert t.shape == (runs, min(dof, cols), cols)
    assert float(t.tril(-1).abs().max()) == 0.0
    w = gram_of(t.transpose(-1, -2))  # T^T T
    # against G^T G for a Gaussian dof x cols matrix G
    gm = torch.randn(runs, dof, cols, generator=torch.Generator().manual_seed(4), dtype=F64)
    ref = gm.transpose(-1, -2) @ gm
    for i, j in [(0, 0), (cols - 1, cols - 1), (0, cols - 1), (cols - 2, cols - 1)]:
        assert stats.ks_2samp(w[:, i, j].numpy(), ref[:, i, j].numpy()).pvalue > 1e-3, (i, j)
    # moments: E W = dof I, Var W_ii = 2 dof, Var W_ij = dof
    se = math.sqrt(2 * dof / runs)
    assert float((w.mean(0) - dof * torch.eye(cols, dtype=F64)).abs().max()) < 5 * se * 1.5
    assert abs(float(w[:, 0, 1].var()) / dof - 1) < 0.06
    assert abs(float(w[:, -1, -1].var()) / (2 * dof) - 1) < 0.1


def test_noise_factor_stacks_a_gaussian_block_on_the_bartlett_factor():
    runs, m, dof = 20_000, 3, 7
    h = noise_factor(RunStreams(seed=5, runs=runs), m, dof, m)
    assert h.shape == (runs, 2 * m, m)
    g = h[:, :m].reshape(runs, -1)
    assert float(g.mean(0).abs().max()) < 5 / math.sqrt(runs)
    assert float((g.var(0) - 1).abs().max()) < 0.05
    diag = torch.diagonal(h[:, m:], dim1=-2, dim2=-1)
    for i in range(m):  # T_ii^2 ~ chi^2_{dof - i}
        assert stats.kstest(diag[:, i].square().numpy(), stats.chi2(dof - i).cdf).pvalue > 1e-3


# --- the same law as the fast sampler, and a wrong degrees-of-freedom count is caught -----------

LAW_N, LAW_RUNS, LAW_LAYERS = 3, 4000, 10


def _law_setup(d: int) -> tuple[ModelParams, TimeGrid]:
    # horizon 3/d: 1 - rho stays spread out at every d (clustering runs at rate ~ d)
    return ModelParams(n=LAW_N, d=d, beta=1.0, mean="identity"), TimeGrid(LAW_LAYERS, 0.3 / d)


def gram_sample(p: ModelParams, grid: TimeGrid, runs: int, seed: int, shift: int = 0,
                scheme: str = "network", init: str = "uniform", rho0: float | None = None
                ) -> torch.Tensor:
    """Final Gram matrices `(runs, n, n)` from the Gram sampler with the dof shifted by `shift`."""
    rs = RunStreams(seed, runs)
    x = _initial_tokens(init, p, rs, 0, F64, rho0)
    out: dict[int, torch.Tensor] = {}
    run_batch_gram(x, p, grid, rs, scheme,
                   OnLayers([grid.steps], lambda k, xc, rows: out.__setitem__(0, gram_of(xc))),
                   _dof_shift=shift)
    return out[0]


@cache
def fast_sample(d: int, scheme: str) -> dict[str, np.ndarray]:
    p, grid = _law_setup(d)
    res = simulate(p, grid, runs=LAW_RUNS, seed=101, scheme=scheme, execution=Execution(sampler="fast"))
    return gram_stats(res.gram[:, -1])


def gram_stats(g: torch.Tensor | np.ndarray) -> dict[str, np.ndarray]:
    """Statistics of Gram matrices `(runs, n, n)`: log(1 - rho_01), log(1 - mean pairwise inner
    product), effective rank n^2 / |G|_F^2."""
    g = torch.as_tensor(g)
    n = g.shape[-1]
    iu = torch.triu_indices(n, n, 1)
    top = 1 - 2.0**-52
    return {
        "log(1-rho01)": torch.log1p(-g[:, 0, 1].clamp(max=top)).numpy(),
        "log(1-mean rho)": torch.log1p(-g[:, iu[0], iu[1]].mean(-1).clamp(max=top)).numpy(),
        "effective rank": (n * n / g.square().sum((-1, -2))).numpy(),
    }


def ks_pvalues(d: int, shift: int = 0, scheme: str = "network") -> dict[str, float]:
    p, grid = _law_setup(d)
    ours = gram_stats(gram_sample(p, grid, LAW_RUNS, seed=202, shift=shift, scheme=scheme))
    ref = fast_sample(d, scheme)
    return {k: stats.ks_2samp(ours[k], ref[k]).pvalue for k in ref}


@pytest.mark.parametrize(("d", "scheme"), [(4, "network"), (8, "network"), (64, "network"),
                                           (8, "sde")])
def test_same_law_as_the_fast_sampler(d, scheme):
    pv = ks_pvalues(d, scheme=scheme)
    assert min(pv.values()) > 1e-3, pv


@pytest.mark.parametrize(("d", "shift"), [(4, 1), (4, -1), (4, LAW_N), (8, 1), (8, -1),
                                          (8, LAW_N), (64, LAW_N)])
def test_the_same_test_rejects_a_wrong_degrees_of_freedom_count(d, shift):
    # shift = m: d degrees of freedom instead of d - m
    pv = ks_pvalues(d, shift=shift)
    assert min(pv.values()) < 1e-4, pv


def _outcomes(sampler: str, grid: TimeGrid, runs: int, seed: int, shift: int = 0
              ) -> dict[str, tuple[int, int]]:
    """Counts of antipodal and merged pairs at the horizon (spec §7, tol 1e-3), two tokens in
    d = 4, beta = 2, from rho0 = -0.5."""
    p = ModelParams(n=2, d=4, beta=2.0)
    if sampler == "fast":
        rho = simulate(p, grid, runs=runs, seed=seed, initial=InitialState.pair(-0.5),
                       execution=Execution(sampler="fast")).rho()[:, -1]
    else:
        rho = gram_sample(p, grid, runs, seed, shift=shift, init="pair", rho0=-0.5)[:, 0, 1]
    return {"antipodal": (int((rho < -1 + 1e-3).sum()), runs),
            "merged": (int((rho > 1 - 1e-3).sum()), runs)}


def _two_proportion_z(a: tuple[int, int], b: tuple[int, int]) -> float:
    pa, pb, pool = a[0] / a[1], b[0] / b[1], (a[0] + b[0]) / (a[1] + b[1])
    return (pa - pb) / math.sqrt(pool * (1 - pool) * (1 / a[1] + 1 / b[1]))


@pytest.mark.slow
def test_two_token_outcome_probabilities_match_the_fast_sampler():
    grid, runs = TimeGrid.make(T=6.0, dt=0.02), 3000
    fast, gram = _outcomes("fast", grid, runs, seed=1), _outcomes("gram", grid, runs, seed=2)
    for k in fast:
        assert abs(_two_proportion_z(gram[k], fast[k])) < 3.3, (k, gram, fast)
    assert 0.3 < fast["antipodal"][0] / runs < 0.5  # far from 0 and 1: the test has power


@pytest.mark.slow
@pytest.mark.parametrize("shift", [0, 1, -1])
def test_merge_probability_matches_spec_and_a_wrong_dof_does_not(shift):
    # spec §5: P_anti(beta=2, d=4, rho0=-0.5) = 0.46624. A dof shifted by +-1 simulates d = 5 or
    # d = 3, where the scale-function quadrature gives P_anti = 0.40839 / 0.54328.
    grid, runs = TimeGrid.make(T=12.0, dt=0.01), 6000
    merged, _ = _outcomes("gram", grid, runs, seed=3, shift=shift)["merged"]
    lo, hi = wilson(merged, runs, level=0.999)
    consistent = lo - 0.015 < 1 - 0.46624 < hi + 0.015  # allowance: dt and horizon bias
    assert consistent == (shift == 0), (shift, merged / runs)


# --- tokens, the simulate contract, batching ------------------------------------------------------

@pytest.mark.slow
def test_tokens_stay_exactly_on_the_sphere_and_match_the_gram_record():
    p = ModelParams(n=6, d=50, beta=2.0, mean="identity")
    # the frame state reaches observers declared invariant: its norms, and its own X X^T
    norms = Observer("norms", lambda x: x.norm(dim=-1), invariant=True)
    own = Observer("own", gram_of, invariant=True)
    res = simulate(p, TimeGrid.make(layers=3000), runs=8, seed=3,
                   recording=Recording(checkpoints=6, record=("gram",), observe=[norms, own]),
                   execution=Execution(sampler="gram"))
    assert res.sampler == "gram" and res.tokens is None and res.state.shape == (8, 6, 6)
    diag = np.diagonal(res.gram, axis1=-2, axis2=-1)
    assert float(np.abs(diag - 1).max()) < 1e-12
    assert float(np.abs(res.observed["norms"] - 1).max()) < 1e-12
    assert float(np.abs(np.linalg.norm(res.state, axis=-1) - 1).max()) < 1e-12
    np.testing.assert_allclose(res.observed["own"], res.gram, atol=1e-15)
    np.testing.assert_allclose(res.final_gram(), res.gram[:, -1], atol=1e-15)


def test_simulate_end_to_end_with_pair_init_and_checkpoints():
    p = ModelParams(n=2, d=300, beta=3.0)
    res = simulate(p, TimeGrid.make(layers=20), runs=5, seed=0, initial=InitialState.pair(-0.3),
                   recording=Recording(checkpoints=[0, 5, 20], record=("gram",)),
                   execution=Execution(sampler="gram"))
    np.testing.assert_allclose(res.rho()[:, 0], -0.3, atol=1e-15)
    assert res.gram.shape == (5, 3, 2, 2) and res.state.shape == (5, 2, 2)
    meta = res.metadata()
    assert meta["sampler"] == "gram" and meta["params"]["d"] == 300 and meta["steps"] == 20
    assert not np.array_equal(res.gram[:, 1], res.gram[:, 2])


def test_same_seed_same_numbers_whatever_the_batching():
    p = ModelParams(n=3, d=40, beta=1.5)
    ref = simulate(p, TimeGrid.make(layers=30), runs=600, seed=11, recording=Recording(checkpoints=4),
                   execution=Execution(sampler="gram"))
    for bs in (256, 512, 10):
        other = simulate(p, TimeGrid.make(layers=30), runs=600, seed=11, recording=Recording(checkpoints=4),
                         execution=Execution(sampler="gram", batch_size=bs))
        assert np.array_equal(ref.gram, other.gram), bs
    other_seed = simulate(p, TimeGrid.make(layers=30), runs=600, seed=12, recording=Recording(checkpoints=4),
                          execution=Execution(sampler="gram"))
    assert not np.array_equal(ref.gram, other_seed.gram)


def test_merged_tokens_stay_merged_and_the_law_of_the_rest_is_right():
    # tokens 0 and 1 coincide: rank 2 < n = 3; the frame keeps dimension 3 and stays exact
    runs, d = 4000, 5
    g = torch.Generator().manual_seed(8)
    x = normalize(torch.randn(runs, 3, d, generator=g, dtype=F64))
    x[:, 1] = x[:, 0]
    p = ModelParams(n=3, d=d, beta=1.0)
    grid = TimeGrid.make(layers=10, alpha=0.25)
    kw = {"runs": runs, "initial": InitialState.tokens(x)}
    gram = simulate(p, grid, seed=1, execution=Execution(sampler="gram"), **kw)
    fast = simulate(p, grid, seed=2, execution=Execution(sampler="fast"), **kw)
    assert float(np.abs(gram.gram[:, :, 0, 1] - 1).max()) < 1e-12
    r_gram, r_fast = gram.rho(0, 2)[:, -1], fast.rho(0, 2)[:, -1]
    assert stats.ks_2samp(r_gram, r_fast).pvalue > 1e-3


def test_more_tokens_than_dimensions():
    p, runs = ModelParams(n=6, d=3, beta=2.0), 3000
    grid = TimeGrid.make(layers=10, alpha=0.3)
    kw = {"runs": runs, "recording": Recording(record=("gram",))}
    gram = simulate(p, grid, seed=1, execution=Execution(sampler="gram"), **kw)
    fast = simulate(p, grid, seed=2, execution=Execution(sampler="fast"), **kw)
    assert gram.state.shape == (runs, 6, 6)
    assert float(np.abs(gram.state[..., 3:]).max()) == 0.0  # a 3-dimensional frame, zero-padded
    a, b = gram_stats(gram.gram[:, -1]), gram_stats(fast.gram[:, -1])
    assert min(stats.ks_2samp(a[k], b[k]).pvalue for k in a) > 1e-3


def test_float32_runs_and_stays_normalised():
    res = simulate(ModelParams(n=4, d=128), TimeGrid.make(layers=200), runs=16, seed=0,
                   execution=Execution(sampler="gram", dtype="float32"))
    assert res.gram.dtype == np.float32
    assert float(np.abs(np.diagonal(res.gram, axis1=-2, axis2=-1) - 1).max()) < 1e-5


def test_tokens_wider_than_d_are_refused():
    p = ModelParams(n=2, d=3)
    rs = RunStreams(0, 2)
    with pytest.raises(ParameterError, match="at most d = 3 coordinates"):
        run_batch_gram(torch.ones(2, 2, 4, dtype=F64), p, TimeGrid(1, 0.1), rs, "network")


def test_auto_takes_gram_when_it_applies_and_pays():
    assert choose_sampler(ModelParams(n=8, d=1024)) == "gram"
    assert choose_sampler(ModelParams(n=2, d=64, mean="identity", Q=2 * np.eye(64))) == "gram"
    assert choose_sampler(ModelParams(n=8, d=16)) == "fast"  # d < 4 n: fast is as quick
    assert choose_sampler(ModelParams(n=16, d=3)) == "full"
    rng = np.random.default_rng(0)
    assert choose_sampler(ModelParams(n=2, d=64, Q=rng.normal(size=(64, 64)))) == "fast"
    assert choose_sampler(ModelParams(n=2, d=64, law="uniform")) == "full"
    with pytest.raises(ParameterError, match="sampler='gram' needs Gaussian matrix noise"):
        choose_sampler(ModelParams(n=2, d=64, mean=np.diag(np.arange(64.0))), "gram")
    with pytest.raises(ParameterError, match="sampler='gram' needs"):
        simulate(ModelParams(n=2, d=8, noise="scalar"), TimeGrid.make(layers=2),
                 execution=Execution(sampler="gram"))


# --- spec §5 at large d: the two-token phase boundary beta_c(d) = arccosh(d - 2) / 2 -------------

def beta_c(d: int) -> float:
    return math.acosh(d - 2) / 2


def antipode_exponent(beta: float, d: int) -> float:
    """Spec §5: exponent of log(1 + rho) at rho = -1, 2 ((d-2)/cosh 2beta - 1) s(-1)."""
    p = 1 / (1 + math.exp(-2 * beta))
    return 2 * ((d - 2) / math.cosh(2 * beta) - 1) * (p * p + (1 - p) ** 2)


def _p_anti_reference():
    try:
        from tokensde.theory.two_tokens import p_anti
    except ImportError:
        return None
    return p_anti


@pytest.mark.slow
@pytest.mark.parametrize("d", [64, 256, 1024])
def test_two_token_phase_boundary_out_to_d_1024(d):
    assert abs(beta_c(1024) - 3.811) < 1e-3
    runs, rho0, tol = 300, -0.99, 1e-3
    grid = TimeGrid.make(T=5.0, dt=0.5 / d)  # d dt = 0.5: coarse, enough for the sign
    out = {}
    for side, beta in (("below", beta_c(d) - 0.5), ("above", beta_c(d) + 0.5)):
        rho = simulate(ModelParams(n=2, d=d, beta=beta), grid, runs=runs, seed=d,
                       initial=InitialState.pair(rho0), execution=Execution(sampler="gram")).rho()[:, -1]
        out[side] = (int((rho < -1 + tol).sum()), int((rho > 1 - tol).sum()))
    anti, merged = out["below"]
    assert wilson(anti, runs)[1] < 0.02 and wilson(merged, runs)[0] > 0.95, out
    anti, merged = out["above"]
    assert wilson(anti, runs)[0] > 0.3 and wilson(merged, runs)[1] < 0.5, out
    p_anti = _p_anti_reference()
    if p_anti is not None:  # the quadrature of spec §5 (about 0.69 here); horizon and dt bias
        assert abs((runs - merged) / runs - p_anti(beta_c(d) + 0.5, d, rho0)) < 0.12


@pytest.mark.slow
@pytest.mark.parametrize("side", [-0.5, 0.5])
def test_antipode_exponent_changes_sign_at_beta_c(side):
    # log(1 + rho) from 1e-8 over t = 1: mean slope is the exponent while the pair stays close
    d, runs, eps0 = 64, 2000, 1e-8
    beta = beta_c(d) + side
    res = simulate(ModelParams(n=2, d=d, beta=beta), TimeGrid.make(T=1.0, dt=4e-4), runs=runs, seed=9,
                   initial=InitialState.pair(-1 + eps0), execution=Execution(sampler="gram"))
    x = torch.from_numpy(res.state)  # the frame: 1 + rho is a function of inner products
    eps = 0.5 * (x[:, 0] + x[:, 1]).square().sum(-1)  # 1 + rho, without cancellation
    slope = torch.log(eps / eps0).numpy() / res.grid.T
    lam, se = antipode_exponent(beta, d), slope.std() / math.sqrt(runs)
    assert np.sign(slope.mean()) == np.sign(lam)
    assert abs(slope.mean() - lam) < 4 * se + 0.1 * abs(lam), (slope.mean(), lam, se)
