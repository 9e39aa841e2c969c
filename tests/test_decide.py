"""Many tokens without n x n arrays: the decided test, token statistics, the default record and the
memory budget (`tokensde.sim.decide`, `tokensde.analysis.token_clusters`).

Truth: the dense pairwise test (the `n x n` gaps `1 - |<x_i, x_j>|`), the Gram-matrix cluster
analysis (`analysis.clusters`), and the sizes of the arrays a run holds.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tokensde import Execution, ModelParams, Recording, StoppingRule, simulate
from tokensde.analysis.clusters import Outcome, classify_clusters, pair_fractions, upper_pairs
from tokensde.analysis.token_clusters import _tokens_outcome, _tokens_pair_fractions
from tokensde.model.params import TimeGrid
from tokensde.sim import decide
from tokensde.sim.budget import EXPANSION_UNITS, RUN_UNITS, SCORE_UNITS
from tokensde.sim.decide import (
    _angle_of_gap,
    _cap_verdict,
    _circle_verdict,
    _dense_decided,
    _rounding_margin,
    decided_tokens,
)
from tokensde.sim.options import _GRAM_RECORD_MAX
from tokensde.sim.simulate import simulation_budget

F64 = torch.float64


def unit(z: torch.Tensor) -> torch.Tensor:
    return z / torch.linalg.vector_norm(z, dim=-1, keepdim=True)


def caps(g: torch.Generator, runs: int, n: int, d: int, radius: torch.Tensor,
         minority: float = 0.3) -> torch.Tensor:
    """Tokens in a cap of angular radius `radius` `(runs,)` about a random centre, a fraction
    `minority` of them flipped to the antipodal cap (bipolar-like)."""
    c = unit(torch.randn(runs, 1, d, generator=g, dtype=F64))
    v = torch.randn(runs, n, d, generator=g, dtype=F64)
    v = unit(v - (v * c).sum(-1, keepdim=True) * c)
    r = torch.rand(runs, n, 1, generator=g, dtype=F64).sqrt() * radius.view(-1, 1, 1)
    x = c * r.cos() + v * r.sin()
    flip = torch.rand(runs, n, 1, generator=g, dtype=F64) < minority
    return torch.where(flip, -x, x)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("tol", [1e-6, 1e-3, 0.1, 0.5])
def test_decided_equals_the_dense_test_on_random_and_clustered_tokens(d, tol):
    g = torch.Generator().manual_seed(11 * d)
    a = _angle_of_gap(tol)
    n = decide._DENSE_MAX + 181
    # cap radii from 0.2 to 0.7 of the threshold angle: diameters on both sides of it
    x = torch.cat([caps(g, 24, n, d, a * torch.linspace(0.2, 0.7, 24, dtype=F64)),
                   unit(torch.randn(4, n, d, generator=g, dtype=F64))])
    if d == 3:  # three tight clusters at the corners of a triangle of side 0.95 a or 1.05 a:
        # its diameter is the side, its radius about the centre side / sqrt 3, so neither the
        # cap bound nor the far-point pairs settle it
        corners = torch.tensor([[math.cos(k * 2 * math.pi / 3), math.sin(k * 2 * math.pi / 3)]
                                for k in range(3)], dtype=F64)
        tri = []
        for side in (0.95, 1.05):
            r = side * a / math.sqrt(3)
            xy = corners[torch.randint(0, 3, (n,), generator=g)] * r
            xy = xy + 1e-4 * a * torch.randn(n, 2, generator=g, dtype=F64)
            tri.append(unit(torch.cat([xy, torch.ones(n, 1, dtype=F64)], -1)))
        x = torch.cat([torch.stack(tri), x])
    want = _dense_decided(x, tol)
    assert bool(want[-28:-22].all()) and not bool(want[-8:].any())  # both answers occur
    assert torch.equal(decided_tokens(x, tol), want)
    if d == 3:  # the cap certificate leaves some runs to the rim pairs: that path is covered
        verdict, _ = _cap_verdict(x, tol, _rounding_margin(x))
        assert bool((verdict < 0).any())


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("tol", [1e-6, 1e-3, 0.25])
def test_decided_at_the_edge_of_tol(d, tol):
    """Two extreme tokens at gap tol +- 10 E (E the rounding margin) and a cloud between them, a
    third of them flipped: the decision flips with the sign, as the dense test's does."""
    g = torch.Generator().manual_seed(5)
    rot = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=F64))[0]
    for sign in (-1, 1):
        e = 10 * 3e-15 * sign
        span = _angle_of_gap(tol + e)
        t = torch.cat([torch.tensor([0.0, span], dtype=F64),
                       span * torch.rand(decide._DENSE_MAX + 100, generator=g, dtype=F64)])
        x = torch.stack([t.cos(), t.sin(), *([torch.zeros_like(t)] * (d - 2))], -1)
        x[::3] *= -1
        x = (x @ rot.T)[None]
        assert abs(e) > 5 * _rounding_margin(x)  # outside the rounding band
        want = _dense_decided(x, tol)
        assert bool(want) == (sign < 0)
        assert torch.equal(decided_tokens(x, tol), want)


def test_circle_lemma_arc_against_pairs():
    """The circle verdict is the arc of the angles mod pi: tokens at 0 and pi + s (antipodal up
    to s) pass iff s < A(tol); a third token at pi/2 breaks it."""
    tol = 1e-3
    a = _angle_of_gap(tol)
    for s, want in ((0.9 * a, 1), (1.1 * a, 0)):
        t = torch.tensor([0.0, math.pi + s, 0.5 * s], dtype=F64)
        x = torch.stack([t.cos(), t.sin()], -1)[None]
        assert int(_circle_verdict(x, tol, _rounding_margin(x))) == want
        assert bool(_dense_decided(x, tol)) == bool(want)
    t = torch.tensor([0.0, math.pi, math.pi / 2], dtype=F64)
    x = torch.stack([t.cos(), t.sin()], -1)[None]
    assert int(_circle_verdict(x, tol, _rounding_margin(x))) == 0


def test_simulation_decides_at_the_same_layer_as_the_dense_test(monkeypatch):
    p = ModelParams(n=decide._DENSE_MAX + 44, d=2, beta=4.0)
    kw = dict(runs=6, seed=3, stopping=StoppingRule.decided(tol=1e-4),
              execution=Execution(attention_eval="expansion"))
    grid = TimeGrid.make(T=12.0, dt=0.05)
    fast = simulate(p, grid, **kw)
    monkeypatch.setattr(decide, "_DENSE_MAX", 10**9)
    dense = simulate(p, grid, **kw)
    assert (fast.decided_at >= 0).sum() >= 3  # most runs decide before the horizon
    np.testing.assert_array_equal(fast.decided_at, dense.decided_at)
    np.testing.assert_array_equal(fast.x, dense.x)


@pytest.mark.parametrize("d", [2, 3])
def test_token_statistics_match_the_gram_analysis(d):
    g = torch.Generator().manual_seed(2)
    tol = 1e-3
    a = _angle_of_gap(tol)
    n = 300
    x = torch.cat([caps(g, 6, n, d, a * torch.tensor([0.1, 0.2, 0.3, 0.4, 0.45, 5.0], dtype=F64)),
                   caps(g, 2, n, d, a * torch.tensor([0.2, 0.3], dtype=F64), minority=0.0),
                   unit(torch.randn(2, n, d, generator=g, dtype=F64))])
    gram = (x @ x.transpose(-1, -2)).numpy()
    outcome, minor = _tokens_outcome(x, tol)
    done = _dense_decided(x, tol).numpy()
    ref = classify_clusters(gram, tol)
    np.testing.assert_array_equal(outcome[done], ref[done])  # decided runs: single or bipolar
    assert set(outcome[~done]) == {Outcome.UNDECIDED}
    assert set(outcome) == {Outcome.SINGLE, Outcome.BIPOLAR, Outcome.UNDECIDED}
    side = (gram[:, 0] < 0).sum(-1)
    np.testing.assert_array_equal(minor, np.where(outcome == Outcome.BIPOLAR,
                                                  np.minimum(side, n - side), 0))
    merged, anti, mean = _tokens_pair_fractions(x, tol)
    rho = upper_pairs(gram)
    for r in range(len(x)):
        m_ref, a_ref = pair_fractions(rho[r], tol)
        assert merged[r] == pytest.approx(m_ref, abs=1e-12)
        assert anti[r] == pytest.approx(a_ref, abs=1e-12)
    np.testing.assert_allclose(mean, rho.mean(-1), atol=1e-12)
    assert anti[:6].max() > 0.1 and merged.min() >= 0  # the counts are not trivially zero


def test_default_record_is_gram_up_to_the_limit_then_tokens():
    small = simulate(ModelParams(n=8, d=2, beta=1.0), TimeGrid.make(layers=2), runs=2, seed=0)
    assert small.gram is not None and small.tokens is None
    big = simulate(ModelParams(n=_GRAM_RECORD_MAX + 1, d=2, beta=1.0), TimeGrid.make(layers=2),
                   runs=2, seed=0)
    assert big.gram is None and big.tokens is not None
    assert big.tokens.shape == (2, 2, _GRAM_RECORD_MAX + 1, 2)
    np.testing.assert_array_equal(big.tokens[:, -1], big.x)


def test_budget_of_many_tokens_counts_no_n_by_n_array():
    p = ModelParams(n=65536, d=2, beta=6.0)
    grid = TimeGrid.make(T=20.0, dt=0.02)
    fast = simulation_budget(p, grid, 20, stopping=StoppingRule.decided(), recording=Recording(checkpoints=2))
    dense = simulation_budget(p, grid, 20, stopping=StoppingRule.decided(),
                              recording=Recording(checkpoints=2), execution=Execution(attention_eval="dense"))
    state = 20 * 65536 * 2 * 8  # the tokens
    assert 3 * state < fast.memory < 2**30  # state, two records, the layer workspace
    assert dense.memory > 20 * 65536**2 * 8  # the n x n scores of 20 runs
    gram = simulation_budget(p, grid, 20, recording=Recording(checkpoints=2, record=("gram",)))
    assert gram.memory > 2 * 20 * 65536**2 * 8  # two Gram matrices per run
    # per token and layer E R (1 + d) + d^2 (R = 55) against d (n + d) + S n, plus R_u per
    # run and layer (E, S, R_u: the work units of the expansion, the softmax and a run)
    n, d, R = 65536, 2, 55
    fast_per = n * (EXPANSION_UNITS * R * (1 + d) + d * d) + RUN_UNITS
    dense_per = n * (d * (n + d) + SCORE_UNITS * n) + RUN_UNITS
    assert fast.work == pytest.approx(dense.work * fast_per / dense_per)


def test_cli_accepts_65536_tokens_on_the_circle(monkeypatch):
    from tokensde.cli import app

    monkeypatch.setenv("TOKENSDE_MEMORY", "2G")
    base = ["simulate", "--n", "65536", "--d", "2", "--beta", "3", "--runs", "3", "--layers",
            "2", "--checkpoints", "2", "--until", "decided", "--json"]
    out = CliRunner().invoke(app, base)
    assert out.exit_code == 0, out.output
    res = json.loads(out.output)
    assert res["attention_eval"] == "expansion" and res["pairs"] == 65536 * 65535 // 2
    assert res["frac_runs_undecided"] == 1.0 and abs(res["mean_inner_product"]) < 0.01
    dense = CliRunner().invoke(app, [*base, "--attention-eval", "dense"])
    assert dense.exit_code != 0 and "memory" in dense.output
