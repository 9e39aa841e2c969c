"""Many nodes in the mean-field flow: node merging and the decided test without K x K arrays, the
O(n) attention, the noise paths from the run streams; and a long-horizon statistic of `simulate`
with either attention evaluator.

Truth: the connected components of scipy's graph routines, the K x K versions (`merge._dense_leads`,
the dense pairwise test), value matrices drawn
directly from `sim.rng.RunStreams`, and Wilson intervals of independent estimates.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from tokensde import Execution, ModelParams, StoppingRule, simulate
from tokensde.analysis.clusters import Outcome, classify_clusters
from tokensde.analysis.stats import wilson
from tokensde.meanfield import flow, merge
from tokensde.meanfield.flow import decided, merge_nodes, noise_path, run_coupled
from tokensde.meanfield.quadrature import circle_rule
from tokensde.model.params import TimeGrid
from tokensde.sim.decide import _DENSE_MAX
from tokensde.sim.rng import _RUN_BLOCK, RunStreams

F64 = torch.float64


def circle_nodes(g: torch.Generator, runs: int, K: int, atoms: int, spread: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes near `atoms` random angles (Gaussian spread `spread`), random weights, a quarter of
    them dead (weight 0)."""
    centre = 2 * math.pi * torch.rand(runs, atoms, generator=g, dtype=F64)
    pick = torch.randint(0, atoms, (runs, K), generator=g)
    t = centre.gather(1, pick) + spread * torch.randn(runs, K, generator=g, dtype=F64)
    x = torch.stack([t.cos(), t.sin()], -1)
    w = torch.rand(runs, K, generator=g, dtype=F64)
    w = torch.where(torch.rand(runs, K, generator=g) < 0.25, 0.0, w)
    return x, w / w.sum(-1, keepdim=True)


@pytest.mark.parametrize("tol", [1e-8, 1e-6, 1e-4])
def test_circle_merging_equals_the_dense_merging(tol):
    g = torch.Generator().manual_seed(4)
    K = _DENSE_MAX + 137
    # spreads around the merge angle: chains that join and chains that break, across 0 = 2 pi
    a = math.sqrt(2 * tol)
    for spread in (0.002 * a, 0.02 * a, 0.2 * a):
        x, w = circle_nodes(g, 6, K, 5, spread)
        x[0, :40] = torch.stack([torch.full((40,), 1.0, dtype=F64),
                                 torch.linspace(-0.3, 0.3, 40, dtype=F64) * a], -1)  # across 0
        x = x / x.norm(dim=-1, keepdim=True)
        lead = merge._circle_leads(x, w, tol)
        want = merge._dense_leads(x, w, tol)
        assert torch.equal(lead, want)
        xm, wm = merge_nodes(x, w, tol)
        assert xm.shape[1] < K and torch.allclose(wm.sum(-1), torch.ones(6, dtype=F64))
    groups = (want == torch.arange(K)).sum(-1)
    assert int(groups.min()) > 1 and int(groups.max()) < K  # merging did something, not all


def sphere_nodes(g: torch.Generator, runs: int, K: int, atoms: int, spread: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """`circle_nodes` on the sphere: nodes near `atoms` random points."""
    c = torch.randn(runs, atoms, 3, generator=g, dtype=F64)
    pick = torch.randint(0, atoms, (runs, K), generator=g)
    x = c.gather(1, pick.unsqueeze(-1).expand(runs, K, 3)) / c.norm(dim=-1).gather(1, pick)[
        ..., None] + spread * torch.randn(runs, K, 3, generator=g, dtype=F64)
    w = torch.rand(runs, K, generator=g, dtype=F64)
    w = torch.where(torch.rand(runs, K, generator=g) < 0.25, 0.0, w)
    return x / x.norm(dim=-1, keepdim=True), w / w.sum(-1, keepdim=True)


def components(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
    """The smallest index of each live node's connected component of the graph of pairs with
    `1 - <x_i, x_j> < tol` (scipy's graph routines; dead nodes alone), `(runs, K)`."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components
    out = []
    for xr, wr in zip(x.numpy(), w.numpy(), strict=True):
        live = wr > 0
        adj = (1.0 - xr @ xr.T < tol) & live[:, None] & live[None, :]
        _, lab = connected_components(csr_matrix(adj), directed=False)
        first = {}
        for i, c in enumerate(lab):
            first.setdefault(c, i)
        out.append([first[c] for c in lab])
    return torch.tensor(out)


@pytest.mark.parametrize("tol", [1e-10, 1e-6, 1e-3])
def test_merging_groups_are_the_connected_components(tol):
    """Circle, sphere and dense groups all equal scipy's components, chains that are not cliques
    included (spreads up to 3 merge distances)."""
    g = torch.Generator().manual_seed(11)
    a = math.sqrt(2 * tol)
    chained = 0
    for K, spread in itertools.product((40, _DENSE_MAX + 200), (0.01 * a, 0.5 * a, 3 * a)):
        for make, fast in ((circle_nodes, merge._circle_leads), (sphere_nodes, merge._sphere_leads)):
            x, w = make(g, 4, K, 6, spread)
            want = components(x, w, tol)
            assert torch.equal(merge._dense_leads(x, w, tol), want)
            assert torch.equal(fast(x, w, tol), want)
            assert torch.equal(merge._group_leads(x, w, tol), want)
            lead = want
            # a group whose members are not all pairwise close: transitivity matters here
            for r in range(4):
                for ld in lead[r].unique():
                    m = (lead[r] == ld).nonzero().flatten()
                    if len(m) > 2:
                        gm = x[r, m] @ x[r, m].T
                        chained += int(bool((1.0 - gm >= tol).any()))
    assert chained > 0


def test_sphere_merging_keys_split_runs_and_fall_back(monkeypatch):
    """Runs in separate sorts when their cube keys need it, and the dense groups when a
    coordinate alone would not fit in the key: the same groups either way."""
    g = torch.Generator().manual_seed(12)
    x, w = sphere_nodes(g, 3, _DENSE_MAX + 50, 4, 1e-6)
    for tol in (1e-10, 1e-30):
        assert torch.equal(merge._sphere_leads(x, w, tol), merge._dense_leads(x, w, tol))
    monkeypatch.setattr(merge, "_KEY_BITS", 3 * 18 + 1)  # 2 runs a sort at tol = 1e-10
    assert torch.equal(merge._sphere_leads(x, w, 1e-10), merge._dense_leads(x, w, 1e-10))
    merged = merge._sphere_leads(x, w, 1e-10)
    assert int((merged != torch.arange(x.shape[1])).sum()) > 0


@pytest.mark.parametrize("K", [20, _DENSE_MAX + 60])
def test_node_decision_without_the_k_by_k_inner_products(K):
    g = torch.Generator().manual_seed(8)
    tol = 1e-4
    x, w = circle_nodes(g, 12, K, 1, 0.0)
    spread = math.sqrt(2 * tol) * torch.linspace(0.5, 1.5, 12, dtype=F64)
    t = torch.atan2(x[..., 1], x[..., 0]) + spread[:, None] * torch.rand(12, K, generator=g,
                                                                          dtype=F64)
    t = t + math.pi * (torch.rand(12, K, generator=g) < 0.4)  # bipolar
    x = torch.stack([t.cos(), t.sin()], -1)
    x[:, 5] = torch.tensor([0.0, 1.0], dtype=F64)  # a dead node far away: ignored
    w[:, 5] = 0.0
    w[:, 6] = 0.3  # live
    live = w > 0
    gram = (x @ x.transpose(-1, -2)).abs()
    ok = (1.0 - gram < tol) | ~(live.unsqueeze(-1) & live.unsqueeze(-2))
    ok.diagonal(dim1=-2, dim2=-1).fill_(True)
    want = ok.flatten(1).all(-1)
    assert bool(want.any()) and not bool(want.all())
    assert torch.equal(decided(x, w, tol), want)


def test_noise_paths_come_from_the_run_streams():
    """Run r's value matrices are the rows of r in `RunStreams(seed, ...)`, one (d, d) draw per
    layer, whatever the batch and the runs beside it."""
    seed, d, steps = 5, 3, 4
    rs = RunStreams(seed, _RUN_BLOCK)
    direct = torch.stack([rs.normal(d, d) for _ in range(steps)], 1)  # (runs, steps, d, d)
    for run in (0, 7, _RUN_BLOCK - 1):
        np.testing.assert_array_equal(noise_path(seed, run, steps, d), direct[run].numpy())
    other = RunStreams(seed, 2 * _RUN_BLOCK, _RUN_BLOCK, 2 * _RUN_BLOCK)
    first = other.normal(d, d)[3]
    np.testing.assert_array_equal(noise_path(seed, _RUN_BLOCK + 3, 1, d)[0], first.numpy())
    # run_coupled carries a token by those matrices: one token, zero drift (beta = 0, y = x)
    p = ModelParams(n=2, d=d, beta=0.0)
    x0 = np.array([[1.0, 0.0, 0.0]])
    grid = TimeGrid.make(T=steps * 0.01, dt=0.01)
    res = run_coupled(p, grid, [("one", x0, None)], runs=9, seed=seed, stopping=StoppingRule(),
                      merge_tol=None, execution=Execution(batch_size=4))
    x = torch.tensor(x0[0])
    for k in range(steps):
        z = x + 0.1 * (torch.tensor(noise_path(seed, 8, steps, d)[k]) @ x)
        x = z / z.norm()
    np.testing.assert_allclose(res.x[0][8, 0].numpy(), x.numpy(), atol=1e-14)


def test_many_nodes_use_the_expansion_and_agree_with_dense(monkeypatch):
    """512 circle nodes at beta = 3 take the O(n) attention (auto); forcing dense changes the
    final states by rounding only."""
    p = ModelParams(n=2, d=2, beta=3.0)
    grid = TimeGrid.make(T=0.5, dt=0.05)
    nodes = circle_rule(512)
    used: list[str] = []
    real = flow._attention_output

    def spy(x, q, forms=None, weights=None, evaluator="dense"):
        used.append(evaluator)
        return real(x, q, forms, weights, evaluator)

    monkeypatch.setattr(flow, "_attention_output", spy)
    kw = dict(runs=2, seed=1, stopping=StoppingRule(), merge_tol=None)
    fast = run_coupled(p, grid, [("limit", *nodes)], **kw)
    assert set(used) == {"expansion"}
    used.clear()
    dense = run_coupled(p, grid, [("limit", *nodes)], execution=Execution(attention_eval="dense"),
                        **kw)
    assert set(used) == {"dense"}
    assert float((fast.x[0] - dense.x[0]).abs().max()) < 1e-11


@pytest.mark.slow
def test_long_horizon_statistics_agree_with_either_evaluator():
    """d = 2, beta = 3, 64 tokens, 300 runs to T = 10 (until decided): P(bipolar), P(decided)
    and the mean pairwise inner product with the expansion and with dense attention agree within
    their intervals (same seed: the paths differ by rounding only, so the agreement is close)."""
    p = ModelParams(n=64, d=2, beta=3.0)
    grid = TimeGrid.make(T=10.0, dt=0.05)
    kw = dict(runs=300, seed=12, stopping=StoppingRule.decided(1e-4))
    out = {}
    for how in ("dense", "expansion"):
        res = simulate(p, grid, execution=Execution(sampler="full", attention_eval=how), **kw)
        outcome = classify_clusters(res.gram[:, -1], 1e-4)
        rho = res.gram[:, -1][:, np.triu_indices(64, 1)[0], np.triu_indices(64, 1)[1]]
        out[how] = ((outcome == Outcome.BIPOLAR).sum(), (res.decided_at >= 0).sum(),
                    rho.mean(-1))
    for i in (0, 1):
        k_d, k_e = int(out["dense"][i]), int(out["expansion"][i])
        lo, hi = wilson(k_d, 300)
        assert lo <= k_e / 300 <= hi
        assert 0.05 < k_d / 300 < 0.99  # a statistic that can move
    md, me = out["dense"][2], out["expansion"][2]
    se = math.hypot(md.std(ddof=1), me.std(ddof=1)) / math.sqrt(300)
    assert abs(md.mean() - me.mean()) < 3 * se
    assert np.abs(md - me).max() < 0.5  # run by run, the same outcome up to rare flips


def test_table_budget_counts_the_o_n_attention():
    """200 paths of 4096 circle tokens hold no n x n scores (the expansion's moments: well under
    1 GiB, where the scores alone would be 26.8 GB); in d = 4, where the expansion does not apply,
    the scores and merging's inner products are counted."""
    from tokensde.meanfield.absorption import table_budget
    n, runs = 4096, 200
    fast = table_budget([2], [3.0], [n], 128, ["iid"], runs, T=1.0)
    assert fast.memory < 2**30
    dense = table_budget([4], [3.0], [n], 128, ["iid"], runs, T=1.0)
    assert dense.memory >= 2 * runs * n * n * 8
    assert dense.work > 10 * fast.work
