"""The Gram sampler for the rotation-invariant variants (docs/variants.md §2, §3, §5): heads sharing
one form `c I`, query/key forms redrawn every layer from a rotation-invariant law (their frame
compressions), and the MLP block (network sub-step and the SDE's joint noise). Exact algebra
against the whole d x d matrices, the laws of the compressed forms, agreement in law with the fast
sampler (and a wrong out-of-frame count caught by the same statistics), streams, batching,
early stopping, a huge d, and what stays refused."""

import math
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
import torch
from scipy import stats

from tokensde import Execution, ModelParams, ParameterError, Recording, StoppingRule, TimeGrid, simulate
from tokensde.model.qk import QK_LAWS
from tokensde.sim.gram import (
    _frame_forms,
    frame_layer,
    frame_mlp_layer,
    frame_norm_layer,
    recompress,
    run_batch_gram,
    uniform_frame,
)
from tokensde.sim.layers import (
    _attention_output,
    _mlp_step,
    _peri_norm_step,
    _residual_step,
    network_step,
    normalize,
)
from tokensde.sim.loop import OnLayers
from tokensde.sim.norm_sde import _peri_factor, _peri_sde_step
from tokensde.sim.observe import Observer
from tokensde.sim.rng import RunStreams
from tokensde.sim.samplers import (
    _gram_factor,
    _mlp_kernel_noise,
    _mlp_scale,
    _psd_factor,
    apply_matrices,
    choose_sampler,
)
from tokensde.sim.sde import sde_step
from tokensde.sim.simulate import MLP_STREAM, QK_STREAM

F64 = torch.float64


def gram_of(x: torch.Tensor) -> torch.Tensor:
    return x @ x.transpose(-1, -2)


def frame_of(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An orthonormal frame `B` (d x m) of the tokens' span, its complement, and `u = x B`."""
    m = min(x.shape[-2:])
    basis, _ = torch.linalg.qr(x.transpose(-1, -2), mode="complete")
    b, b_perp = basis[..., :m], basis[..., m:]
    return b, b_perp, x @ b


def stacked_factor(inner: list[torch.Tensor], outer: list[torch.Tensor]) -> list[torch.Tensor]:
    """Noise factors `[B^T X_j; T_j]` of Gaussian blocks `X_j` acting on one frame: the in-frame
    blocks `inner[j]` `(m, c_j)` and the out-of-frame blocks `outer[j]` `(d - m, c_j)`, whose
    joint out-of-frame part is the R factor of one QR of `[outer_1, outer_2, ...]` (block upper
    triangular), split into the columns of each block."""
    cols = [o.shape[-1] for o in outer]
    r = torch.linalg.qr(torch.cat(outer, -1), mode="r").R
    out, lo = [], 0
    for a, c in zip(inner, cols, strict=True):
        out.append(torch.cat([a, r[..., lo:lo + c]], dim=-2))
        lo += c
    return out


# --- exact algebra: one frame layer equals one layer with the whole d x d matrices ----------------

@pytest.mark.parametrize("scheme", ["network", "sde"])
@pytest.mark.parametrize(("law", "n", "d"), [("goe", 4, 11), ("gaussian", 3, 5), ("goe", 5, 4)])
def test_forms_per_head_frame_layer_equals_the_layer_with_whole_matrices(law, n, d, scheme):
    # three heads with their own forms A_h and value matrices V_h: in the frame, the forms are
    # B^T A_h B and the noise factor is [B^T V_1 B ... B^T V_3 B] over the R factor of the
    # out-of-frame blocks side by side (the stacked outputs / sqrt(3) times a d x 3m matrix)
    heads, runs, dt = 3, 5, 0.04
    p = ModelParams(n=n, d=d, beta=1.3, sigma=0.9, mean="identity", heads=heads, qk=law,
                    qk_scale=0.8, qk_redraw="layer", causal=True)
    g = torch.Generator().manual_seed(3)
    x = normalize(torch.randn(runs, n, d, generator=g, dtype=F64))
    a = p.qk_law.draw(RunStreams(1, runs), heads, F64)  # (runs, heads, d, d)
    v = torch.randn(runs, heads, d, d, generator=g, dtype=F64)
    y = _attention_output(x, p, a)
    xi = p.sigma * apply_matrices(y, v) / math.sqrt(heads)
    x1 = (network_step if scheme == "network" else sde_step)(x, y, xi, p, dt)
    b, b_perp, u = frame_of(x)
    forms = b.transpose(-1, -2).unsqueeze(1) @ a @ b.unsqueeze(1)
    inner = torch.cat(list((b.transpose(-1, -2).unsqueeze(1) @ v @ b.unsqueeze(1)).unbind(1)), -1)
    if b_perp.shape[-1]:
        outer = torch.cat(list((b_perp.transpose(-1, -2).unsqueeze(1) @ v @ b.unsqueeze(1))
                               .unbind(1)), -1)
        (h,) = stacked_factor([inner], [outer])
    else:
        h = inner
    u1 = frame_layer(u, p, dt, scheme, h, forms=forms)
    np.testing.assert_allclose(gram_of(u1).numpy(), gram_of(x1).numpy(), atol=1e-13)


@pytest.mark.parametrize(("mlp", "n", "d", "width"), [("relu", 3, 8, 7), ("gelu", 4, 5, 16),
                                                       ("gelu", 5, 3, 9)])
def test_mlp_frame_sublayer_equals_the_sublayer_with_both_weight_matrices(mlp, n, d, width):
    # W_1 B is the frame's first-layer matrix; given H, H W_2^T = C_H Z with Z = C_H^-1 H W_2^T
    # standard normal, and [(Z B)^T; R factor of (Z B_perp)^T] is the noise factor the block draws
    # (H of full rank n here: ReLU units can make it singular, where Z is not determined)
    runs, dt = 4, 0.03
    p = ModelParams(n=n, d=d, mlp=mlp, mlp_sigma=1.4, mlp_width=width)
    g = torch.Generator().manual_seed(5)
    x = normalize(torch.randn(runs, n, d, generator=g, dtype=F64))
    w1 = torch.randn(runs, width, d, generator=g, dtype=F64)
    w2 = torch.randn(runs, d, width, generator=g, dtype=F64)
    hidden = p.mlp_block(x @ w1.transpose(-1, -2))
    x1 = _mlp_step(x, _mlp_scale(p) * hidden @ w2.transpose(-1, -2), p, dt)
    b, b_perp, u = frame_of(x)
    c = _gram_factor(hidden)  # the block's own factor: Cholesky, or the symmetric root near the margin
    z = torch.linalg.solve(c, hidden @ w2.transpose(-1, -2))
    inner = (z @ b).transpose(-1, -2)
    h = stacked_factor([inner], [(z @ b_perp).transpose(-1, -2)])[0] if b_perp.shape[-1] else inner
    u1 = frame_mlp_layer(u, p, dt, w1 @ b, h)
    np.testing.assert_allclose(gram_of(u1).numpy(), gram_of(x1).numpy(), atol=1e-13)


@pytest.mark.parametrize(("n", "d", "sigma"), [(3, 10, 0.8), (3, 5, 0.8), (4, 4, 0.8),
                                               (3, 10, 0.0)])
def test_sde_step_with_block_equals_the_step_with_whole_matrices(n, d, sigma):
    # the attention noise V y and the block's kernel noise mlp_sigma C_K Z act on one complement
    # of the frame: their out-of-frame parts come from one QR of [B_perp^T V B, B_perp^T Z^T]
    runs, dt = 4, 0.02
    p = ModelParams(n=n, d=d, beta=2.0, sigma=sigma, mean="identity", mlp="gelu", mlp_sigma=0.7)
    g = torch.Generator().manual_seed(9)
    x = normalize(torch.randn(runs, n, d, generator=g, dtype=F64))
    v = torch.randn(runs, d, d, generator=g, dtype=F64)
    zm = torch.randn(runs, n, d, generator=g, dtype=F64)
    y = _attention_output(x, p)
    x1 = sde_step(x, y, p.sigma * apply_matrices(y, v) + _mlp_kernel_noise(x, p, zm), p, dt)
    b, b_perp, u = frame_of(x)
    bt = b.transpose(-1, -2)
    c = _psd_factor(p.mlp_block.kernel_t(gram_of(u))).mul_(dt**0.5 * p.mlp_sigma)
    if sigma == 0.0:
        h_a, h_b = None, stacked_factor([(zm @ b).transpose(-1, -2)],
                                        [(zm @ b_perp).transpose(-1, -2)])[0]
    elif b_perp.shape[-1]:
        h_a, h_b = stacked_factor([bt @ v @ b, (zm @ b).transpose(-1, -2)],
                                  [b_perp.transpose(-1, -2) @ v @ b,
                                   (zm @ b_perp).transpose(-1, -2)])
        k_a = min(d - n, n)  # the attention factor's out-of-frame rows; below them, zeros
        tail = h_a[:, n + k_a:]
        assert tail.numel() == 0 or float(tail.abs().max()) == 0.0
        h_a = h_a[:, :n + k_a]
    else:
        h_a, h_b = bt @ v @ b, (zm @ b).transpose(-1, -2)
    u1 = frame_layer(u, p, dt, "sde", h_a, block=(c, h_b))
    np.testing.assert_allclose(gram_of(u1).numpy(), gram_of(x1).numpy(), atol=1e-13)


# --- the compressed forms have the law of B^T R B ---------------------------------------------------

@pytest.mark.parametrize(("law", "d", "m"), [("goe", 7, 3), ("gaussian", 7, 3), ("gaussian", 3, 3),
                                             ("gaussian", 40, 2)])
@pytest.mark.slow
def test_frame_forms_have_the_law_of_the_compressed_form(law, d, m):
    # by rotation invariance B^T R B has the law of R's top-left m x m block
    runs = 20_000
    q = QK_LAWS.get(law)(d, 1.0, "layer")
    got = q.frame_fluctuation(RunStreams(2, runs), (), m, F64)
    ref = q.fluctuation(RunStreams(3, runs), (), F64)[:, :m, :m]
    assert got.shape == (runs, m, m)
    functionals = {
        "R_00": lambda r: r[:, 0, 0], "R_01": lambda r: r[:, 0, 1], "R_10": lambda r: r[:, 1, 0],
        "R_00 R_11": lambda r: r[:, 0, 0] * r[:, 1, 1], "R_01 R_10": lambda r: r[:, 0, 1] * r[:, 1, 0],
        "|R|^2": lambda r: r.square().sum((-1, -2)), "tr R": lambda r: r.diagonal(0, -2, -1).sum(-1)}
    for name, f in functionals.items():
        pv = stats.ks_2samp(f(got).numpy(), f(ref).numpy()).pvalue
        assert pv > 1e-3, (name, pv)
    # unit variance per logit, Var <u, R u> = 2 (goe) or 1 (gaussian)
    assert abs(float(got[:, 0, 1].var()) - 1) < 0.05
    assert abs(float(got[:, 0, 0].var()) - (2.0 if law == "goe" else 1.0)) < 0.08


def test_a_law_that_is_not_rotation_invariant_has_no_frame_form():
    with pytest.raises(ParameterError, match="qk='wigner' is not rotation invariant"):
        QK_LAWS.get("wigner")(5, 1.0, "layer").frame_fluctuation(RunStreams(0, 3), (), 2, F64)


# --- the same law as the fast sampler -----------------------------------------------------------

RUNS = 4000

LAW_CASES = {
    # name: (model parameters, scheme, n, d)
    "3 heads sharing I": ({"heads": 3, "mean": "identity"}, "network", 3, 6),
    "2 heads sharing 1.5 I, sde": ({"heads": 2, "Q": "1.5I"}, "sde", 3, 6),
    "relu block": ({"mlp": "relu"}, "network", 3, 6),
    "relu block alone": ({"mlp": "relu", "sigma": 0.0}, "network", 3, 6),
    "gelu block, 2 hidden units": ({"mlp": "gelu", "mlp_width": 2}, "network", 3, 6),
    "relu block, sde": ({"mlp": "relu", "mlp_sigma": 1.5}, "sde", 3, 6),
    "goe forms": ({"qk": "goe", "qk_redraw": "layer", "qk_scale": 1.5}, "network", 3, 6),
    "gaussian forms, 3 heads": ({"qk": "gaussian", "qk_redraw": "layer", "qk_scale": 1.5,
                                 "heads": 3}, "network", 3, 6),
    "goe forms, sde": ({"qk": "goe", "qk_redraw": "layer", "qk_scale": 1.5, "qk_samples": 3},
                       "sde", 3, 6),
    "gaussian forms, 2 heads, d - m < m": ({"qk": "gaussian", "qk_redraw": "layer",
                                            "qk_scale": 1.5, "heads": 2}, "network", 3, 4),
    "everything": ({"qk": "gaussian", "qk_redraw": "layer", "heads": 2, "mlp": "gelu",
                    "mlp_width": 5, "mean": "identity", "causal": True}, "network", 3, 6),
    "everything, sde": ({"qk": "goe", "qk_redraw": "layer", "heads": 2, "qk_samples": 2,
                         "mlp": "relu", "mean": "identity"}, "sde", 3, 6),
    "everything, n > d": ({"qk": "goe", "qk_redraw": "layer", "heads": 2, "mlp": "relu",
                           "mlp_width": 6}, "network", 4, 3),
}


def law_params(name: str) -> tuple[ModelParams, str, TimeGrid]:
    kw, scheme, n, d = LAW_CASES[name]
    kw = dict(kw)
    if kw.get("Q") == "1.5I":
        kw["Q"] = 1.5 * np.eye(d)
    return ModelParams(n=n, d=d, beta=1.5, **kw), scheme, TimeGrid(12, 0.05)


def pair_stats(g: np.ndarray | torch.Tensor) -> dict[str, np.ndarray]:
    """Per run: the mean and the mean square of the pairwise inner products `<x_i, x_j>`, i < j."""
    g = np.asarray(g)
    i, j = np.triu_indices(g.shape[-1], 1)
    v = g[:, i, j]
    return {"mean": v.mean(-1), "mean square": np.square(v).mean(-1)}


def z_scores(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, float]:
    """Two-sample z statistics of the means of each statistic."""
    return {k: float((a[k].mean() - b[k].mean())
                     / math.sqrt(a[k].var(ddof=1) / len(a[k]) + b[k].var(ddof=1) / len(b[k])))
            for k in a}


def gram_final(p: ModelParams, scheme: str, grid: TimeGrid, runs: int, seed: int,
               shift: int = 0) -> torch.Tensor:
    """Final Gram matrices of the Gram sampler from a uniform start, streams as in `simulate`,
    with the out-of-frame degrees of freedom shifted by `shift`."""
    rs = RunStreams(seed, runs)
    x = uniform_frame(rs, p.n, p.d)
    forms = _frame_forms(p, scheme, rs.derived(QK_STREAM), F64) if p.qk_law.random else None
    mlp_rs = rs.derived(MLP_STREAM) if p.mlp_block.active else None
    out: dict[int, torch.Tensor] = {}
    run_batch_gram(x, p, grid, rs, scheme,
                   OnLayers([grid.steps], lambda k, xc, rows: out.__setitem__(0, gram_of(xc))),
                   forms=forms, mlp_rs=mlp_rs, _dof_shift=shift)
    return out[0]


@cache
def fast_stats(name: str) -> dict[str, np.ndarray]:
    p, scheme, grid = law_params(name)
    return pair_stats(simulate(p, grid, runs=RUNS, seed=11, scheme=scheme,
                               execution=Execution(sampler="fast")).gram[:, -1])


@pytest.mark.parametrize("name", sorted(LAW_CASES))
def test_same_law_as_the_fast_sampler(name):
    p, scheme, grid = law_params(name)
    res = simulate(p, grid, runs=RUNS, seed=12, scheme=scheme, execution=Execution(sampler="gram"))
    assert res.sampler == "gram"
    z = z_scores(pair_stats(res.gram[:, -1]), fast_stats(name))
    assert max(abs(v) for v in z.values()) < 5, z


@pytest.mark.parametrize("name", ["relu block alone", "relu block, sde", "gaussian forms, 3 heads",
                                  "everything"])
def test_the_same_statistics_reject_a_wrong_out_of_frame_count(name):
    # d degrees of freedom instead of d - m for the value noise and the block's noise
    p, scheme, grid = law_params(name)
    right = z_scores(pair_stats(gram_final(p, scheme, grid, RUNS, 13)), fast_stats(name))
    wrong = z_scores(pair_stats(gram_final(p, scheme, grid, RUNS, 13, shift=p.n)),
                     fast_stats(name))
    assert max(abs(v) for v in right.values()) < 5, right
    assert max(abs(v) for v in wrong.values()) > 5, wrong


def test_heads_sharing_one_form_are_one_head_in_the_gram_sampler():
    # the same law, and in the Gram sampler the same numbers: sum_h V_h y / sqrt(H) is one V y
    for kw in ({}, {"mean": "identity", "mlp": "relu"}):
        one = ModelParams(n=3, d=20, beta=2.0, **kw)
        for scheme in ("network", "sde"):
            ref = simulate(one, TimeGrid.make(layers=8), runs=300, seed=4, scheme=scheme,
                           execution=Execution(sampler="gram"))
            got = simulate(one.with_(heads=4), TimeGrid.make(layers=8), runs=300, seed=4, scheme=scheme,
                           execution=Execution(sampler="gram"))
            assert np.array_equal(ref.gram, got.gram)


# --- streams, batching, early stopping -----------------------------------------------------------

def test_new_pieces_draw_from_their_own_streams():
    # the value noise and the initial tokens are those of the model without the piece: a block
    # of zero output, or forms of scale 1e-9, give the run without them to rounding (not the SDE
    # of forms redrawn every layer, which steps heads * qk_samples heads, as with `fast`)
    base = ModelParams(n=3, d=12, beta=2.0, mean="identity")
    grid = TimeGrid.make(layers=10)
    kw = {"runs": 300, "seed": 5, "execution": Execution(sampler="gram")}
    forms = ({"qk": "goe", "qk_redraw": "layer", "qk_scale": 1e-9},
             {"qk": "gaussian", "qk_redraw": "layer", "qk_scale": 1e-9})
    for scheme in ("network", "sde"):
        ref = simulate(base, grid, scheme=scheme, **kw).gram
        for extra in ({"mlp": "gelu", "mlp_sigma": 0.0}, *(forms if scheme == "network" else ())):
            got = simulate(base.with_(**extra), grid, scheme=scheme, **kw).gram
            assert float(np.abs(got - ref).max()) < 1e-7, (scheme, extra)
        moved = simulate(base.with_(mlp="relu"), grid, scheme=scheme, **kw).gram
        assert float(np.abs(moved - ref).max()) > 1e-2


def test_same_numbers_whatever_the_batching_and_early_stopping():
    # a decided run's state is the fixed-horizon run's state at the same layer, bit for bit: each
    # run keeps its own forms and block weights when others leave the batch
    p = ModelParams(n=2, d=10, beta=3.0, heads=2, qk="goe", qk_redraw="layer", qk_scale=0.5,
                    mlp="relu", mlp_sigma=0.3)
    grid, gram = TimeGrid.make(T=1.0, dt=0.05), Execution(sampler="gram")
    every = Recording(checkpoints=list(range(21)))
    for scheme in ("network", "sde"):
        kw = {"runs": 600, "seed": 3, "scheme": scheme}
        full = simulate(p, grid, recording=every, execution=gram, **kw)
        assert np.array_equal(full.gram, simulate(p, grid, recording=every,
                                                  execution=replace(gram, batch_size=256),
                                                  **kw).gram)
        stopped = simulate(p, grid, stopping=StoppingRule.decided(tol=1e-3), execution=gram, **kw)
        at = stopped.decided_at
        done = np.flatnonzero(at >= 0)
        assert 50 < len(done) < 600, len(done)
        np.testing.assert_array_equal(stopped.final_gram()[done], full.gram[done, at[done]])


# --- a huge d costs what a small one does -----------------------------------------------------------

@pytest.mark.parametrize("kw", [
    {"heads": 4},
    {"qk": "gaussian", "qk_redraw": "layer", "heads": 2},
    {"qk": "goe", "qk_redraw": "layer", "mlp": "gelu", "mlp_width": 32},
])
def test_a_million_dimensions_hold_nothing_of_size_d(kw):
    # the memory bound of simulate counts nothing of size d for the Gram sampler (a d = 1e6 run
    # of the fast sampler needs tens of GiB); the run takes what d = 16 takes
    p = ModelParams(n=4, d=10**6, beta=1.0, **kw)
    assert choose_sampler(p) == "gram"
    for scheme in ("network", "sde"):
        res = simulate(p, TimeGrid.make(layers=4), runs=512, seed=0, scheme=scheme)
        assert res.sampler == "gram" and res.state.shape == (512, 4, 4)
        diag = np.diagonal(res.gram, axis1=-2, axis2=-1)
        assert float(np.abs(diag - 1).max()) < 1e-12
        assert not np.array_equal(res.gram[:, 0], res.gram[:, -1])
    with pytest.raises(ParameterError, match="this simulation needs at least"):
        simulate(ModelParams(n=4, d=10**9, beta=1.0, **kw), TimeGrid.make(layers=4), runs=512,
                 execution=Execution(sampler="fast"))


# --- what stays refused ---------------------------------------------------------------------------

@pytest.mark.parametrize(("kw", "msg"), [
    ({"qk": "wigner", "qk_redraw": "layer"}, r"needs a rotation-invariant qk law \(gaussian, goe, "
     r"or 'identity'\); got qk='wigner'"),
    ({"qk": "goe"}, r"needs qk_redraw='layer' with a random qk law .*got qk='goe', "
     r"qk_redraw='run'"),
    ({"qk": "gaussian", "heads": 2}, r"needs qk_redraw='layer' .*got qk='gaussian', "
     r"qk_redraw='run'"),
    ({"heads": 2, "Q": np.stack([np.eye(6), 2 * np.eye(6)])}, r"needs one query/key form Q\^T K = "
     r"c I shared by the heads; got Q/K per head, shape \(2, 6, 6\)"),
    ({"norm": "pre", "qk": "wigner", "qk_redraw": "layer"}, r"needs a rotation-invariant qk law"),
    ({"norm": "peri", "qk": "goe"}, r"needs qk_redraw='layer' with a random qk law"),
    ({"heads": 2, "mlp": "relu", "law": "uniform"}, "needs Gaussian matrix noise"),
])
def test_what_stays_refused_names_why(kw, msg):
    p = ModelParams(n=2, d=6, **kw)
    assert not p.rotation_invariant
    with pytest.raises(ParameterError, match="sampler='gram' " + msg):
        simulate(p, TimeGrid.make(layers=2), runs=2, execution=Execution(sampler="gram"))
    if "Q" not in kw:  # nor does auto take it where d >= 4 n
        assert choose_sampler(p.with_(d=64)) != "gram"


def test_forms_and_blocks_must_be_passed_to_the_batch():
    x = recompress(normalize(torch.randn(2, 2, 5, dtype=F64)))
    rs = RunStreams(0, 2)
    kw: dict = {}
    with pytest.raises(ParameterError, match=r"qk='goe' draws query/key forms: pass them"):
        run_batch_gram(x, ModelParams(n=2, d=5, qk="goe", qk_redraw="layer"),
                       TimeGrid(1, 0.1), rs, "network", **kw)
    p = ModelParams(n=2, d=5, heads=2, qk="goe", qk_redraw="layer", qk_samples=3)
    with pytest.raises(ParameterError, match="forms drawn for 2 heads, but scheme='sde' steps 6"):
        run_batch_gram(x, p, TimeGrid(1, 0.1), rs, "sde", **kw,
                       forms=_frame_forms(p, "network", rs.derived(QK_STREAM), F64))
    with pytest.raises(ParameterError, match="mlp='relu' draws MLP weights: pass their streams"):
        run_batch_gram(x, ModelParams(n=2, d=5, mlp="relu"), TimeGrid(1, 0.1), rs, "network",
                       **kw)


def test_identity_mean_part_is_never_built_at_huge_d():
    """mean='identity' holds no d x d matrix: the Gram sampler runs it at d = 10^6."""
    p = ModelParams(n=3, d=10**6, beta=1.0, mean="identity")
    assert p._M is None and p.mean_trace == 1.0 and p.rotation_invariant
    res = simulate(p, TimeGrid.make(T=0.2, dt=0.05), runs=8, seed=0, execution=Execution(sampler="gram"))
    g = res.final_gram()
    np.testing.assert_allclose(np.diagonal(g, axis1=-2, axis2=-1), np.ones((8, 3)))


# --- pre- and peri-norm: the residual stream h in the frame, radii kept (docs/variants.md §4) ------

def stream(runs: int, n: int, d: int, g: torch.Tensor) -> torch.Tensor:
    """A residual stream off the sphere: random directions, radii in [0.5, 2]."""
    x = normalize(torch.randn(runs, n, d, generator=g, dtype=F64))
    return x * (0.5 + 1.5 * torch.rand(runs, n, 1, generator=g, dtype=F64))


@pytest.mark.parametrize("norm", ["pre", "peri"])
@pytest.mark.parametrize(("n", "d", "mean"), [(3, 8, "identity"), (4, 4, "none"),
                                              (5, 3, "identity")])
def test_pre_and_peri_frame_layer_equals_the_layer_with_the_whole_matrix(norm, n, d, mean):
    # the whole Gram matrix of h (radii included), one attention layer and one MLP sublayer;
    # peri normalises each branch output with its out-of-frame coordinates too
    runs, dt = 4, 0.05
    p = ModelParams(n=n, d=d, beta=1.7, sigma=0.8, mean=mean, norm=norm, mlp="gelu",
                    mlp_sigma=1.2, mlp_width=11)
    g = torch.Generator().manual_seed(21)
    h = stream(runs, n, d, g)
    v = torch.randn(runs, d, d, generator=g, dtype=F64)
    y = _attention_output(normalize(h), p)
    h1 = (_residual_step if norm == "pre" else _peri_norm_step)(
        h, y, p.sigma * apply_matrices(y, v), p, dt)
    b, b_perp, hs = frame_of(h)
    bt = b.transpose(-1, -2)
    f = stacked_factor([bt @ v @ b], [b_perp.transpose(-1, -2) @ v @ b]) if b_perp.shape[-1] \
        else [bt @ v @ b]
    hs1 = frame_norm_layer(hs, p, dt, "network", f[0])
    np.testing.assert_allclose(gram_of(hs1).numpy(), gram_of(h1).numpy(), atol=1e-12)
    # the MLP sublayer on h1: the block sees N(h1)
    w1 = torch.randn(runs, p.mlp_hidden, d, generator=g, dtype=F64)
    w2 = torch.randn(runs, d, p.mlp_hidden, generator=g, dtype=F64)
    hidden = p.mlp_block(normalize(h1) @ w1.transpose(-1, -2))
    h2 = _mlp_step(h1, _mlp_scale(p) * hidden @ w2.transpose(-1, -2), p, dt)
    b, b_perp, hs1 = frame_of(h1)
    c = torch.linalg.cholesky(gram_of(hidden))
    z = torch.linalg.solve_triangular(c, hidden @ w2.transpose(-1, -2), upper=False)
    inner = (z @ b).transpose(-1, -2)
    hb = stacked_factor([inner], [(z @ b_perp).transpose(-1, -2)])[0] if b_perp.shape[-1] \
        else inner
    hs2 = frame_mlp_layer(hs1, p, dt, w1 @ b, hb)
    np.testing.assert_allclose(gram_of(hs2).numpy(), gram_of(h2).numpy(), atol=1e-12)


@pytest.mark.parametrize(("n", "d"), [(3, 8), (4, 4), (5, 3)])
def test_peri_sde_frame_step_equals_the_step_with_the_whole_noise(n, d):
    # the peri limit's kernel noise C Z (Z n x d) in the frame: C [Z B; R factor of Z B_perp]^T
    runs, dt = 4, 0.05
    p = ModelParams(n=n, d=d, beta=1.7, sigma=0.8, mean="identity", norm="peri")
    g = torch.Generator().manual_seed(23)
    h = stream(runs, n, d, g)
    zn = torch.randn(runs, n, d, generator=g, dtype=F64)
    y = _attention_output(normalize(h), p)
    h1 = _peri_sde_step(h, y, _peri_factor(y, p) @ zn, p, dt)
    b, b_perp, hs = frame_of(h)
    inner = (zn @ b).transpose(-1, -2)
    f = stacked_factor([inner], [(zn @ b_perp).transpose(-1, -2)])[0] if b_perp.shape[-1] \
        else inner
    hs1 = frame_norm_layer(hs, p, dt, "sde", f)
    np.testing.assert_allclose(gram_of(hs1).numpy(), gram_of(h1).numpy(), atol=1e-12)


NORM_CASES = {
    # name: (model parameters, scheme, n, d)
    "pre": ({"norm": "pre"}, "network", 3, 6),
    "pre, identity mean": ({"norm": "pre", "mean": "identity"}, "network", 3, 6),
    "pre, relu block": ({"norm": "pre", "mlp": "relu", "mlp_width": 5}, "network", 3, 6),
    "pre, gelu block, identity mean, n > d": ({"norm": "pre", "mlp": "gelu", "mlp_width": 5,
                                               "mean": "identity"}, "network", 4, 3),
    "pre, goe forms, 2 heads": ({"norm": "pre", "qk": "goe", "qk_redraw": "layer", "heads": 2},
                                "network", 3, 6),
    "pre, sde, relu block, identity mean": ({"norm": "pre", "mlp": "relu", "mean": "identity"},
                                            "sde", 3, 6),
    "peri": ({"norm": "peri"}, "network", 3, 6),
    "peri, identity mean": ({"norm": "peri", "mean": "identity"}, "network", 3, 6),
    "peri, gelu block, 2 heads": ({"norm": "peri", "mlp": "gelu", "mlp_width": 5, "heads": 2},
                                  "network", 3, 6),
    "peri, sde": ({"norm": "peri"}, "sde", 3, 6),
    "peri, sde, identity mean, n > d": ({"norm": "peri", "mean": "identity"}, "sde", 4, 3),
}


def norm_stats(res) -> dict[str, np.ndarray]:
    """Per run at T: the pair statistics of the directions and the mean squared radius |h|^2."""
    out = pair_stats(res.gram[:, -1])
    out["radius^2"] = np.square(res.state).sum(-1).mean(-1)  # a function of inner products
    return out


@pytest.mark.parametrize("name", sorted(NORM_CASES))
def test_pre_and_peri_same_law_as_the_fast_sampler(name):
    kw, scheme, n, d = NORM_CASES[name]
    p, grid = ModelParams(n=n, d=d, beta=1.5, **kw), TimeGrid(12, 0.05)
    got = simulate(p, grid, runs=RUNS, seed=12, scheme=scheme, execution=Execution(sampler="gram"))
    ref = simulate(p, grid, runs=RUNS, seed=11, scheme=scheme, execution=Execution(sampler="fast"))
    assert got.sampler == "gram" and got.state.shape == (RUNS, n, n)
    # the record is the directions' Gram matrix, state the frame coordinates of h (radii kept)
    diag = np.diagonal(got.gram[:, -1], axis1=-2, axis2=-1)
    assert float(np.abs(diag - 1).max()) < 1e-12
    assert float(np.linalg.norm(got.state, axis=-1).std()) > 0.05
    z = z_scores(norm_stats(got), norm_stats(ref))
    assert max(abs(v) for v in z.values()) < 5, z


def test_pre_and_peri_records_and_post_unchanged_by_them():
    # observers and state see h in the frame; gram is its directions' Gram matrix; a post-norm
    # run is untouched (same numbers as before: tests/test_gram.py holds them)
    p = ModelParams(n=3, d=9, beta=1.5, norm="peri", mean="identity")
    seen = [Observer("dirs", lambda h: gram_of(normalize(h)), invariant=True),
            Observer("radii", lambda h: h.norm(dim=-1), invariant=True)]
    res = simulate(p, TimeGrid.make(layers=6), runs=50, seed=2,
                   recording=Recording(checkpoints=3, record=("gram",), observe=seen),
                   execution=Execution(sampler="gram"))
    np.testing.assert_allclose(res.gram, res.observed["dirs"], rtol=0, atol=1e-13)
    np.testing.assert_allclose(res.observed["radii"][:, -1], np.linalg.norm(res.state, axis=-1),
                               rtol=1e-14, atol=0)
    assert float(np.abs(res.observed["radii"][:, -1] - 1).max()) > 1e-3  # radii kept


@pytest.mark.parametrize("kw", [{"norm": "pre", "mlp": "gelu", "mlp_width": 32},
                                {"norm": "peri", "qk": "goe", "qk_redraw": "layer", "heads": 2},
                                {"norm": "peri", "mean": "identity"}])
def test_pre_and_peri_at_a_million_dimensions(kw):
    p = ModelParams(n=4, d=10**6, beta=1.0, **kw)
    for scheme in ("network", "sde"):
        if scheme == "sde" and p.mlp_block.active and p.norm == "peri":
            continue
        res = simulate(p, TimeGrid.make(layers=4), runs=256, seed=0, scheme=scheme,
                       execution=Execution(sampler="gram"))
        assert res.sampler == "gram" and res.state.shape == (256, 4, 4)
        diag = np.diagonal(res.gram, axis1=-2, axis2=-1)
        assert float(np.abs(diag - 1).max()) < 1e-12
        assert float(np.abs(np.linalg.norm(res.state, axis=-1) - 1).max()) > 1e-3


def test_peri_sde_with_a_block_stays_refused_with_the_gram_sampler():
    p = ModelParams(n=2, d=8, norm="peri", mlp="relu")
    with pytest.raises(ParameterError, match=r"scheme='sde' with norm='peri' needs .*mlp='none'"):
        simulate(p, TimeGrid.make(layers=2), runs=2, scheme="sde", execution=Execution(sampler="gram"))
    rs = RunStreams(0, 2)
    with pytest.raises(ParameterError, match="scheme='sde' with norm='peri' needs"):
        run_batch_gram(uniform_frame(rs, 2, 8), p, TimeGrid(1, 0.1), rs, "sde",
                       mlp_rs=rs.derived(MLP_STREAM))
