"""The same seed gives the same run on any CPU: no sampler branches on a rounding-level quantity.

A factor of a singular Gram matrix chosen by whether Cholesky happens to succeed (a pivot at
rounding level) differs by O(1) between machines, and between an input and the same input moved by
one rounding error. Here every factor is continuous in its input: an input moved by rounding error
moves every sample by rounding error only, and each run's numbers depend on that run alone.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from tokensde import Execution, InitialState, ModelParams, Recording, TimeGrid, simulate
from tokensde.sim.gram import frame_coordinates
from tokensde.sim.rng import RunStreams
from tokensde.sim.samplers import PIVOT_MARGIN, _gaussian_image, _gram_factor, _psd_factor, _sym_root

ROUND = 1e-15  # relative size of the perturbation: a few units in the last place
MOVE = 1e-9    # what such a perturbation may move a sample by (rounding times the margin's bound)


def _unit(a: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(a, dim=-1)


def configurations(n: int, d: int, runs: int = 64, seed: int = 0) -> torch.Tensor:
    """`(runs, n, d)` unit tokens: generic runs, then runs with merged and antipodal tokens
    (singular Gram matrices, the case that used to branch), then runs with all tokens merged."""
    g = torch.Generator().manual_seed(seed)
    x = _unit(torch.randn(runs, n, d, generator=g, dtype=torch.float64))
    third = runs // 3
    x[third:2 * third, 1] = x[third:2 * third, 0]
    x[third:2 * third, -1] = -x[third:2 * third, 0]
    x[2 * third:] = x[2 * third:, :1]
    return x


def nudged(x: torch.Tensor, seed: int = 1) -> torch.Tensor:
    """`x` moved by a relative rounding-level amount, entry by entry."""
    g = torch.Generator().manual_seed(seed)
    return x * (1 + ROUND * torch.randn(x.shape, generator=g, dtype=x.dtype))


@pytest.mark.parametrize("n,k", [(4, 9), (6, 6), (9, 4), (2, 3)])
def test_gram_factor_is_exact_and_moves_by_rounding_only(n, k):
    y = configurations(n, k)
    c, c2 = _gram_factor(y), _gram_factor(nudged(y))
    gram = y @ y.transpose(-1, -2)
    assert float((c @ c.transpose(-1, -2) - gram).abs().max()) < 1e-13
    assert float((c - c2).abs().max()) < MOVE
    # merged tokens get the same factor row (the same noise), antipodal ones the opposite row
    mid = slice(y.shape[0] // 3, 2 * (y.shape[0] // 3))
    if n > 2:
        assert float((c[mid, 1] - c[mid, 0]).abs().max()) < 1e-12
    assert float((c[mid, -1] + c[mid, 0]).abs().max()) < 1e-12


def test_the_old_rule_was_not_continuous():
    """The check above can fail: the factor chosen by whether Cholesky succeeds (QR otherwise)
    differs by O(1) between an all-merged input and that input moved by rounding."""
    def old(y: torch.Tensor) -> torch.Tensor:
        c, info = torch.linalg.cholesky_ex(y @ y.transpose(-1, -2))
        r = torch.linalg.qr(y.transpose(-1, -2), mode="r")[1].transpose(-1, -2)
        return torch.where((info == 0)[:, None, None], c, r)

    y = configurations(4, 6, runs=300)[200:]
    moved = max(float((old(y) - old(nudged(y, s))).abs().max()) for s in range(1, 6))
    assert moved > 1e-3
    assert max(float((_gram_factor(y) - _gram_factor(nudged(y, s))).abs().max())
               for s in range(1, 6)) < MOVE


def test_sym_root_keeps_the_precision_of_the_rows():
    """Two rows 1e-12 apart: the root's rows are 1e-12 apart too (square roots of the Gram
    matrix's eigenvalues would give about 1e-8)."""
    g = torch.Generator().manual_seed(3)
    y = _unit(torch.randn(1, 3, 5, generator=g, dtype=torch.float64))
    y[0, 1] = y[0, 0] + 1e-12 * _unit(torch.randn(5, generator=g, dtype=torch.float64))
    r = _sym_root(y)
    gap = float(torch.linalg.vector_norm(r[0, 1] - r[0, 0]))
    assert gap == pytest.approx(float(torch.linalg.vector_norm(y[0, 1] - y[0, 0])), rel=1e-3)
    np.testing.assert_allclose(r @ r.transpose(-1, -2), y @ y.transpose(-1, -2), atol=1e-14)
    torch.testing.assert_close(r, r.transpose(-1, -2), rtol=0, atol=1e-15)


def test_margin_sends_near_singular_runs_to_the_root():
    """A run whose second row lies closer to the first than the margin takes the symmetric root;
    a run just outside takes Cholesky (lower triangular)."""
    base = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    close = base.clone()
    close[1, 1] = 0.3 * PIVOT_MARGIN**0.5
    far = base.clone()
    far[1, 1] = 3.0 * PIVOT_MARGIN**0.5
    c = _gram_factor(torch.stack([close, far]))
    assert float(c[0, 0, 1].abs()) > 0  # symmetric root: not lower triangular
    assert float(c[1, 0, 1]) == 0.0  # Cholesky


def test_each_run_factor_depends_on_that_run_alone():
    y = configurations(5, 7, runs=30)
    whole = _gram_factor(y)
    for i in (0, 12, 25):
        torch.testing.assert_close(_gram_factor(y[i:i + 1])[0], whole[i], rtol=0, atol=1e-15)
    k = y @ y.transpose(-1, -2)
    whole = _psd_factor(k)
    for i in (0, 12, 25):
        torch.testing.assert_close(_psd_factor(k[i:i + 1])[0], whole[i], rtol=0, atol=1e-15)


def test_frame_coordinates_are_continuous_and_isometric():
    z = configurations(4, 9)
    u, u2 = frame_coordinates(z), frame_coordinates(nudged(z))
    np.testing.assert_allclose(u @ u.transpose(-1, -2), z @ z.transpose(-1, -2), atol=1e-13)
    assert float((u - u2).abs().max()) < MOVE
    # a sign flip of a token's leading coordinate does not flip the frame
    flipped = z.clone()
    flipped[:, :, 0] = 0.0
    f1 = flipped.clone()
    f1[:, 0, 0] = 1e-17
    f2 = flipped.clone()
    f2[:, 0, 0] = -1e-17
    assert float((frame_coordinates(f1) - frame_coordinates(f2)).abs().max()) < MOVE


def test_gaussian_image_has_the_law_of_y_times_a_gaussian_matrix():
    """Both branches (rows fewer and more than columns): the covariance of `Y G` across tokens is
    `Y Y^T` per column, measured on 4096 runs to within 5 standard errors."""
    for n, k in ((3, 5), (5, 3)):
        y1 = configurations(n, k, runs=3)[0]
        runs = 4096
        y = y1.expand(runs, n, k).contiguous()
        s = _gaussian_image(y, 2, RunStreams(5, runs))
        cov = torch.einsum("ria,rja->ij", s, s) / (2 * runs)
        want = y1 @ y1.T
        se = ((want.diagonal()[:, None] * want.diagonal()[None, :] + want**2) / (2 * runs)).sqrt()
        assert float(((cov - want).abs() / se).max()) < 5


CASES = {
    "fast, n < d": (dict(n=4, d=7, beta=1.0), "fast"),
    "fast, n > d": (dict(n=7, d=3, beta=1.0), "fast"),
    "fast, n < d, mlp": (dict(n=4, d=7, beta=1.0, mlp="relu", mlp_sigma=1.0), "fast"),
    "fast, n > d, mlp": (dict(n=6, d=3, beta=2.0, mlp="gelu", mlp_sigma=1.0), "fast"),
    "fast, pre-norm": (dict(n=4, d=7, beta=1.0, norm="pre"), "fast"),
    "fast, pre-norm, mlp": (dict(n=5, d=4, beta=1.0, norm="pre", mlp="relu", mlp_sigma=1.0), "fast"),
    "gram": (dict(n=4, d=16, beta=1.0), "gram"),
    "gram, mlp": (dict(n=3, d=16, beta=1.0, mlp="relu", mlp_sigma=1.0), "gram"),
    "gram, pre-norm": (dict(n=4, d=16, beta=1.0, norm="pre"), "gram"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_run_moved_by_rounding_stays_within_rounding(case):
    """Merged and antipodal starts included: 12 layers from `x0` and from `x0` moved by rounding
    end within 1e-9 of each other (the same seed)."""
    kw, sampler = CASES[case]
    p = ModelParams(**kw)
    x0 = configurations(p.n, p.d, runs=24, seed=4)
    grid = TimeGrid.make(layers=12, alpha=0.3)
    kwargs = dict(runs=24, seed=7, execution=Execution(sampler=sampler),
                  recording=Recording(record=()))
    a = simulate(p, grid, initial=InitialState.tokens(x0), **kwargs).state
    b = simulate(p, grid, initial=InitialState.tokens(_unit(nudged(x0))), **kwargs).state
    if sampler == "gram":  # the state in a frame: compare the Gram matrices
        a, b = a @ a.transpose(0, 2, 1), b @ b.transpose(0, 2, 1)
    assert np.isfinite(a).all()
    assert float(np.abs(a - b).max()) < 1e-9


@pytest.mark.parametrize("sampler", ["fast", "full", "gram"])
def test_a_batch_gives_each_run_the_result_it_has_alone(sampler):
    """300 runs in batches of 256 and of 512 (two blocks at once) give the same numbers."""
    p = ModelParams(n=3, d=16, beta=1.5)
    grid, how = TimeGrid.make(layers=10, alpha=0.3), Execution(sampler=sampler)
    a = simulate(p, grid, runs=300, seed=3, execution=replace(how, batch_size=256)).gram
    b = simulate(p, grid, runs=300, seed=3, execution=replace(how, batch_size=512)).gram
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)


def test_two_row_root_in_closed_form_equals_the_svd_root():
    """Two rows (the two-token case) take a closed form; it equals `U diag(s) U^T` from the SVD,
    merged, antipodal, one-zero and all-zero rows included."""
    g = torch.Generator().manual_seed(8)
    y = torch.randn(50, 2, 5, generator=g, dtype=torch.float64)
    y[10:20, 1] = y[10:20, 0]
    y[20:30, 1] = -y[20:30, 0]
    y[30:35] = 0.0
    y[35:40, 0] = 0.0
    u, s, _ = torch.linalg.svd(y, full_matrices=False)
    want = (u * s.unsqueeze(-2)) @ u.transpose(-1, -2)
    torch.testing.assert_close(_sym_root(y), want, rtol=0, atol=1e-14)
