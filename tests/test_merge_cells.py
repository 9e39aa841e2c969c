"""Node merging on the sphere by certified cubes (`merge._sphere_leads`): the same groups as the
pair test of every node pair in neighbouring cubes (the counting before the cubes were
certified) and as scipy's connected components, and work linear in n on a decided state."""

from __future__ import annotations

import math

import pytest
import torch

from tokensde.meanfield import merge
from tokensde.meanfield.statistics import _atom_count, minority_mass
from tokensde.sim.decide import decided_tokens

F64 = torch.float64


def caps(g: torch.Generator, runs: int, n: int, radius: float, minority: float
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Two antipodal caps of angular `radius` about a random axis, `minority` of the nodes on
    the far side; equal weights."""
    axis = torch.randn(runs, 1, 3, generator=g, dtype=F64)
    axis = axis / axis.norm(dim=-1, keepdim=True)
    r = radius * torch.rand(runs, n, 1, generator=g, dtype=F64).sqrt()
    v = torch.randn(runs, n, 3, generator=g, dtype=F64)
    v = v - (v * axis).sum(-1, keepdim=True) * axis
    v = v / v.norm(dim=-1, keepdim=True)
    x = torch.cos(r) * axis + torch.sin(r) * v
    side = torch.where(torch.rand(runs, n, generator=g) < minority, -1.0, 1.0).to(x)
    return x * side.unsqueeze(-1), torch.full((runs, n), 1.0 / n, dtype=F64)


def pair_tested(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
    """The groups by testing every pair in neighbouring cubes of side `sqrt(2 tol)`."""
    h = math.sqrt(2.0 * tol) * (1.0 + 1e-6) + 1e-15
    bits = max(1, math.ceil(math.log2(2 * (math.ceil(1.0 / h) + 2) + 3)))
    return merge._pair_leads(x, w, tol, h, bits)


def components(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
    """scipy's connected components of the pairs with `1 - <x_i, x_j> < tol`, led by their
    smallest index (dead nodes alone)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components
    out = []
    for xr, wr in zip(x.numpy(), w.numpy(), strict=True):
        live = wr > 0
        adj = (1.0 - xr @ xr.T < tol) & live[:, None] & live[None, :]
        _, lab = connected_components(csr_matrix(adj), directed=False)
        first: dict[int, int] = {}
        for i, c in enumerate(lab):
            first.setdefault(int(c), i)
        out.append([first[int(c)] for c in lab])
    return torch.tensor(out)


@pytest.mark.parametrize("radius", [0.004, 0.02, 0.05, 0.2])
def test_certified_cubes_give_the_pair_tested_groups(radius):
    """Caps tighter than, near and wider than the merge distance (0.045 at tol 1e-3: one atom a
    side, atoms split along chains, many groups), dead nodes included: the groups of the pair
    test and of scipy, node for node."""
    g = torch.Generator().manual_seed(3)
    tol = 1e-3
    x, w = caps(g, 2, 600, radius, 0.3)
    w = torch.where(torch.rand(w.shape, generator=g) < 0.1, 0.0, w)
    want = components(x, w, tol)
    got = merge._sphere_leads(x, w, tol)
    assert torch.equal(got, want)
    assert torch.equal(pair_tested(x, w, tol), want)
    groups = int((got == torch.arange(x.shape[1])).sum())
    if radius == 0.004:
        assert groups == 2 * 2 + int((w == 0).sum())  # two atoms a run, dead nodes alone


def test_decided_state_is_counted_without_its_pairs(monkeypatch):
    """On a decided state of 1200 nodes every cube is settled by its box: no node pair is
    tested (the pair test enumerates about n^2 / 2 of them), and the atoms and minority mass are
    those of the pair test."""
    g = torch.Generator().manual_seed(4)
    x, w = caps(g, 2, 1200, 0.004, 0.25)
    assert bool(decided_tokens(x, 1e-4).all())
    tested = []
    real = merge.is_merged

    def counting(gram, tol):
        tested.append(gram.numel())
        return real(gram, tol)

    monkeypatch.setattr(merge, "is_merged", counting)
    atoms = _atom_count(x, w)
    assert sum(tested) == 0
    assert atoms.tolist() == [2, 2]
    want = pair_tested(x, w, 1e-3)
    assert sum(tested) > 1200 ** 2 // 4  # the old counting's pairs, for contrast
    assert (want == torch.arange(1200)).sum(-1).tolist() == [2, 2]
    far = ((x @ x[:, :1].transpose(-1, -2)).squeeze(-1) < 0).double().mean(-1)  # equal weights
    assert minority_mass(x, w).tolist() == pytest.approx(torch.minimum(far, 1 - far).tolist())


def test_boxes_that_do_not_decide_fall_back_to_pairs():
    """Two small clusters whose boxes straddle the merge distance (one pair close, the rest
    not): joined only through that pair, as scipy finds."""
    tol = 1e-3
    h = math.sqrt(2 * tol)
    base = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    pts = [base + torch.tensor([dx, 0.0, 0.0], dtype=F64)
           for dx in (0.0, -0.2 * h, 0.98 * h, 1.3 * h, 3.0 * h, 4.1 * h)]
    x = torch.stack(pts)
    x = (x / x.norm(dim=-1, keepdim=True)).unsqueeze(0).repeat(1, 60, 1)[:, :300]
    w = torch.ones(1, x.shape[1], dtype=F64)
    want = components(x, w, tol)
    assert torch.equal(merge._sphere_leads(x, w, tol), want)
    assert int((want == torch.arange(x.shape[1])).sum()) == 3
