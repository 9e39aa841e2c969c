"""Cluster analysis (spec §7) on exact configurations with known counts, and its invariances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokensde.analysis.clusters import (
    _LOG_GAP_FLOOR,
    Outcome,
    _antipodal,
    _cluster_labels,
    _log_gaps,
    _merged,
    _pole_labels,
    analyze,
    antipodal_fraction,
    classify_clusters,
    effective_rank,
    inner_product_histogram,
    is_antipodal,
    is_merged,
    minority_law,
    pair_fractions,
    tolerance_report,
    upper_pairs,
)
from tokensde.model.params import ParameterError

TOL = 1e-3


def random_rotation(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def formation(assign: list[tuple[int, int]], d: int, seed: int, jitter: float = 1e-6
              ) -> np.ndarray:
    """Gram matrix of tokens `sign * e_pole` (rotated, jittered by `jitter`): poles are known."""
    rng = np.random.default_rng(seed)
    x = np.zeros((len(assign), d))
    for i, (pole, sign) in enumerate(assign):
        x[i, pole] = sign
    x = x @ random_rotation(d, rng).T + jitter * rng.standard_normal(x.shape)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x @ x.T


assignments = st.integers(1, 4).flatmap(
    lambda k: st.lists(st.tuples(st.integers(0, k - 1), st.sampled_from([-1, 1])),
                       min_size=1, max_size=12))


@settings(max_examples=60, deadline=None)
@given(assign=assignments, seed=st.integers(0, 2**31))
def test_known_formations(assign, seed):
    g = formation(assign, d=5, seed=seed)
    n = len(assign)
    poles = {p for p, _ in assign}
    sides = {(p, s) for p, s in assign}
    size = {key: sum(1 for a in assign if a == key) for key in sides}
    pole_size = {p: sum(1 for q, _ in assign if q == p) for p in poles}
    anti = sum(size.get((p, 1), 0) * size.get((p, -1), 0) for p in poles)

    rep = analyze(g, TOL, before=g)
    assert rep.n_clusters[0] == len(sides)
    assert rep.n_poles[0] == len(poles)
    assert sorted(size.values(), reverse=True) == [s for s in rep.cluster_sizes[0] if s]
    if n > 1:
        assert rep.antipodal_fraction[0] == pytest.approx(anti / (n * (n - 1) / 2))
    # one pole of size s has Gram eigenvalue s: participation ratio n^2 / sum s^2
    assert rep.effective_rank[0] == pytest.approx(n * n / sum(v * v for v in pole_size.values()),
                                                  rel=1e-6)
    expect = (Outcome.SINGLE if len(sides) == 1 else
              Outcome.BIPOLAR if len(poles) == 1 else Outcome.OTHER)
    assert rep.outcome[0] == expect
    # without an earlier checkpoint a multi-pole state cannot be called frozen
    no_before = Outcome.UNDECIDED if expect == Outcome.OTHER else expect
    assert classify_clusters(g, TOL)[0] == no_before


@settings(max_examples=40, deadline=None)
@given(assign=assignments, seed=st.integers(0, 2**31))
def test_invariant_under_permutation_and_sign_flips(assign, seed):
    rng = np.random.default_rng(seed)
    g = formation(assign, d=5, seed=seed, jitter=1e-3 * rng.random())
    n = g.shape[0]
    perm = rng.permutation(n)
    gp = g[np.ix_(perm, perm)]
    a, b = analyze(g, TOL), analyze(gp, TOL)
    for field in ("n_clusters", "n_poles", "cluster_sizes", "outcome"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    np.testing.assert_allclose(a.effective_rank, b.effective_rank, rtol=1e-12)
    signs = rng.choice([-1.0, 1.0], n)
    gs = g * np.outer(signs, signs)
    c = analyze(gs, TOL)
    np.testing.assert_array_equal(a.n_poles, c.n_poles)  # poles are clusters up to sign
    np.testing.assert_allclose(a.effective_rank, c.effective_rank, rtol=1e-12)
    np.testing.assert_allclose(np.sort(_log_gaps(g)), np.sort(_log_gaps(gs)), atol=1e-9)
    # relabelling by the sign flip: pole partitions are identical, not just their number
    same_pole = lambda lab: lab[:, :, None] == lab[:, None, :]  # noqa: E731
    np.testing.assert_array_equal(same_pole(_pole_labels(g, TOL)), same_pole(_pole_labels(gs, TOL)))


def test_single_linkage_chain():
    # angles 0, t, 2t with 1 - cos t < tol < 1 - cos 2t: one cluster through the middle token
    t = np.arccos(1 - 0.6 * TOL)
    x = np.stack([np.array([np.cos(a), np.sin(a), 0.0]) for a in (0.0, t, 2 * t)])
    g = x @ x.T
    assert 1 - g[0, 2] > TOL
    np.testing.assert_array_equal(_cluster_labels(g, TOL), [[0, 0, 0]])


def test_orthonormal_and_batched_counts():
    eye = np.eye(4)
    bip = formation([(0, 1), (0, 1), (0, -1), (0, 1)], d=4, seed=1)
    batch = np.stack([eye, bip])
    rep = analyze(batch, TOL, before=batch)
    np.testing.assert_array_equal(rep.n_clusters, [4, 2])
    np.testing.assert_array_equal(rep.n_poles, [4, 1])
    np.testing.assert_allclose(rep.effective_rank, [4.0, 1.0], rtol=1e-9)
    np.testing.assert_array_equal(rep.outcome, [Outcome.OTHER, Outcome.BIPOLAR])
    np.testing.assert_array_equal(rep.sides, [[0, 0], [3, 1]])
    np.testing.assert_allclose(antipodal_fraction(batch, TOL), [0.0, 3 / 6])
    assert rep.counts() == {"single": 0, "bipolar": 1, "other": 1, "undecided": 0}


def test_minority_law_counts_bipolar_runs_only():
    n = 6
    grams = [formation([(0, 1)] * (n - m) + [(0, -1)] * m, d=3, seed=m) for m in (1, 2, 2, 3, 0)]
    grams.append(formation([(0, 1), (1, 1), (0, -1), (0, 1), (2, 1), (1, -1)], d=3, seed=9))
    rep = analyze(np.stack(grams), TOL)
    np.testing.assert_array_equal(minority_law(rep, n), [1, 2, 1])


def test_motion_decides_other_versus_undecided():
    g = np.eye(3)[None]
    moved = g.copy()
    moved[0, 0, 1] = moved[0, 1, 0] = 0.02
    assert classify_clusters(g, TOL, before=moved)[0] == Outcome.UNDECIDED
    assert classify_clusters(g, TOL, before=moved, move_tol=0.05)[0] == Outcome.OTHER
    assert analyze(g, TOL, before=moved).moved[0] == pytest.approx(0.02)


def test_log_space_gaps_below_float_resolution():
    # merged to machine precision: raw inner products are exactly +-1, gaps hit the floor
    x = np.array([[1.0, 0, 0], [1.0, 1e-12, 0], [-1.0, 0, 1e-13]])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    g = x @ x.T
    assert g[0, 1] == 1.0 and g[0, 2] == -1.0
    np.testing.assert_array_equal(_log_gaps(g), [[_LOG_GAP_FLOOR] * 3])
    assert classify_clusters(g, 1e-12)[0] == Outcome.BIPOLAR


def test_tolerance_report_moves_only_the_marginal_runs():
    # run 0: gaps ~1e-12 (robust); run 1: a pair at gap 5e-4, merged at tol 1e-3 only
    robust = formation([(0, 1), (0, 1), (0, -1)], d=3, seed=0, jitter=1e-7)
    c = 1 - 5e-4
    marginal = np.array([[1, c, -1 + 1e-9], [c, 1, -c], [-1 + 1e-9, -c, 1.0]])
    rep = tolerance_report(np.stack([robust, marginal]), TOL)
    assert rep["counts"] == {"single": 0, "bipolar": 2, "other": 0, "undecided": 0}
    assert rep["changed_down"] == 0.5 and rep["changed_up"] == 0.0
    assert rep["counts_down"]["undecided"] == 1


def test_inner_product_histogram():
    g = formation([(0, 1), (0, -1), (1, 1)], d=3, seed=2, jitter=0.0)
    counts, edges = inner_product_histogram(np.stack([g, g]), bins=4)
    np.testing.assert_array_equal(edges, [-1, -0.5, 0, 0.5, 1])
    # pairs per run: <+e0,-e0> = -1, <+-e0, e1> = 0 twice (|0| may land either side of 0)
    assert counts.sum() == 6 and counts[0] == 2 and counts[1] + counts[2] == 4


@pytest.mark.parametrize("tol", [0.0, 1e-14, 0.9, float("nan"), "a"])
def test_bad_tolerance_names_parameter(tol):
    with pytest.raises(ParameterError, match="tol"):
        analyze(np.eye(2), tol)


def test_bad_gram_shape():
    with pytest.raises(ParameterError, match="gram"):
        analyze(np.ones((2, 3)), TOL)
    with pytest.raises(ParameterError, match="before"):
        analyze(np.eye(3), TOL, before=np.eye(2))


def test_effective_rank_of_random_tokens_between_one_and_n():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 6, 4))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    r = effective_rank(x @ np.swapaxes(x, -1, -2))
    assert np.all(r >= 1.0) and np.all(r <= 4.0 + 1e-12)  # rank <= d


# --- the one definition of pairs, merged / antipodal and the outcome classes, at the boundary --
# A dyadic tol makes 1 - tol and -1 + tol exact: a gap equal to tol is not within tol (strict <).

DY = 2.0**-10
IN = 2.0**-20  # a hair inside the tolerance, exact in float64 and float32


def test_upper_pairs_are_row_major_for_numpy_and_torch():
    import torch

    g = np.arange(16.0).reshape(1, 4, 4)
    np.testing.assert_array_equal(upper_pairs(g), [[1, 2, 3, 6, 7, 11]])
    t = torch.arange(32.0).reshape(2, 4, 4)
    out = upper_pairs(t)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 6)
    assert torch.equal(out, t[:, [0, 0, 0, 1, 1, 2], [1, 2, 3, 2, 3, 3]])
    assert upper_pairs(np.eye(1)[None]).shape == (1, 0)


def test_merged_and_antipodal_are_strict_at_the_tolerance():
    g = np.array([1.0, 1.0 - DY + IN, 1.0 - DY, 0.0, -1.0 + DY, -1.0 + DY - IN, -1.0])
    np.testing.assert_array_equal(is_merged(g, DY), [1, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(is_antipodal(g, DY), [0, 0, 0, 0, 0, 1, 1])
    assert pair_fractions(g, DY) == (2 / 7, 2 / 7)
    assert pair_fractions(g.astype(np.float32), DY) == (2 / 7, 2 / 7)  # exact in float32 too


def test_gram_level_masks_and_fraction_use_the_same_rule():
    m, a = 1.0 - DY + IN, -1.0 + DY - IN
    g = np.array([[1.0, m, a], [m, 1.0, -1.0 + DY], [a, -1.0 + DY, 1.0]])
    np.testing.assert_array_equal(_merged(g, DY)[0], [[1, 1, 0], [1, 1, 0], [0, 0, 1]])
    np.testing.assert_array_equal(_antipodal(g, DY)[0], [[0, 0, 1], [0, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(antipodal_fraction(g, DY), [1 / 3])
    assert pair_fractions(upper_pairs(g), DY) == (1 / 3, 1 / 3)


@pytest.mark.parametrize(("merge", "anti", "outcome"), [
    (1.0 - DY + IN, -1.0 + DY - IN, Outcome.BIPOLAR),  # {0, 1} antipodal to {2}: one pole
    (1.0 - DY + IN, -1.0 + DY, Outcome.OTHER),         # antipodal gaps at tol: two poles
    (1.0 - DY, -1.0 + DY - IN, Outcome.OTHER),         # merged gap at tol: three clusters
    (1.0 - DY + IN, 1.0 - DY + IN, Outcome.SINGLE),    # every pair merged
])
def test_outcome_classes_of_three_tokens_at_the_tolerance(merge, anti, outcome):
    g = np.array([[1.0, merge, anti], [merge, 1.0, anti], [anti, anti, 1.0]])
    assert classify_clusters(g, DY, before=g)[0] == outcome
    undecided = Outcome.UNDECIDED if outcome == Outcome.OTHER else outcome
    assert classify_clusters(g, DY)[0] == undecided  # no earlier checkpoint: not known to be frozen
