"""One outcome rule for clusters: the same states fed to every caller that names an outcome
(`analyze` / `classify_clusters` on Gram matrices, `tokens_outcome` on tokens, the command line's
two summaries, the mean-field statistics) get the same outcome: single or bipolar only when every
pair is within tol of +1 or -1."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tokensde.analysis.clusters import (
    Outcome,
    _outcome_codes,
    _pair_summary,
    analyze,
    classify_clusters,
)
from tokensde.analysis.token_clusters import _token_summary, _tokens_outcome
from tokensde.meanfield.absorption import _system_stats
from tokensde.meanfield.flow import decided
from tokensde.model.params import TimeGrid

TOL = 0.1  # neighbours of 20 tokens round the circle are 1 - cos(2 pi / 20) = 0.049 apart


def _circle(n: int, phase: float = 0.0) -> np.ndarray:
    a = phase + 2 * math.pi * np.arange(n) / n
    return np.stack([np.cos(a), np.sin(a)], -1)


def _poles(n: int, minority: int, d: int, seed: int) -> np.ndarray:
    """`n - minority` tokens near e_1 and `minority` near -e_1, each within 1e-3 of its pole."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, d))
    x[:, 0] = np.where(np.arange(n) < minority, -1.0, 1.0)
    x += 1e-3 / math.sqrt(d) * rng.uniform(-1, 1, (n, d))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _states(n: int, d: int) -> tuple[np.ndarray, list[int]]:
    """(runs, n, d) states and their outcomes: chained circle (d = 2 only), spread, single,
    bipolar."""
    rng = np.random.default_rng(7)
    spread = rng.normal(size=(n, d))
    states = [spread / np.linalg.norm(spread, axis=-1, keepdims=True), _poles(n, 0, d, 1),
              _poles(n, 3, d, 2)]
    want = [Outcome.UNDECIDED, Outcome.SINGLE, Outcome.BIPOLAR]
    if d == 2:
        states.insert(0, _circle(n, 0.3))
        want.insert(0, Outcome.UNDECIDED)
    return np.stack(states), [int(o) for o in want]


def _every_caller(x: np.ndarray, tol: float, gram: bool = True) -> dict[str, np.ndarray]:
    """The outcome codes each caller gives the runs `x` `(runs, n, d)` (`gram=False`: only the
    callers that take tokens)."""
    g = x @ np.swapaxes(x, -1, -2)
    out = {"tokens_outcome": _tokens_outcome(x, tol)[0]}
    summaries = [("cli tokens", _token_summary(x, tol))]
    if gram:
        out |= {"analyze": analyze(g, tol).outcome, "classify_clusters": classify_clusters(g, tol)}
        summaries.append(("cli gram", _pair_summary(g, tol)))
    for name, summary in summaries:
        runs = len(x)
        out[name] = np.array([summary["frac_runs_one_cluster"] * runs,
                              summary["frac_runs_bipolar"] * runs,
                              summary["frac_runs_undecided"] * runs])
    # the mean-field statistics: one system of equal weights, decided by the flow's own test
    xt = torch.from_numpy(x)
    w = torch.full(xt.shape[:2], 1.0 / x.shape[1], dtype=torch.float64)
    at = np.where(decided(xt, w, tol).numpy(), 0, -1)
    row = _system_stats(SimpleNamespace(x=[xt], w=[w], decided_at=at[None], grid=TimeGrid(1, 1.0)),
                       0)
    out["meanfield"] = np.array([row["k_decided"] - row["k_bipolar"], row["k_bipolar"],
                                 row["runs"] - row["k_decided"]])
    return out


@pytest.mark.parametrize(("n", "d", "gram"), [
    (20, 2, True), (12, 3, True),
    # n = 300 > DENSE_MAX: the token-level and mean-field tests take their O(n log n) paths
    (300, 2, False), (300, 3, False),
    pytest.param(300, 2, True, marks=pytest.mark.slow),
    pytest.param(300, 3, True, marks=pytest.mark.slow)])
def test_every_caller_gives_the_same_outcome(n, d, gram):
    x, want = _states(n, d)
    got = _every_caller(x, TOL, gram)
    assert len(got) == (6 if gram else 3)
    counts = np.array([want.count(Outcome.SINGLE), want.count(Outcome.BIPOLAR),
                       want.count(Outcome.UNDECIDED)])
    for name, codes in got.items():
        if name.startswith("cli") or name == "meanfield":
            np.testing.assert_array_equal(codes, counts, err_msg=name)
        else:
            np.testing.assert_array_equal(codes, want, err_msg=name)


def test_the_chained_circle_is_one_component_but_not_decided():
    # the case two rules used to disagree on: one component of the merged graph, yet the pair of
    # opposite tokens is antipodal-far from merged and the quarter-turn pairs are neither
    x = _circle(20)
    g = x @ x.T
    rep = analyze(g, TOL)
    assert rep.n_clusters[0] == 1 and 1 - g[0, 5] > TOL and 1 - abs(g[0, 5]) > TOL
    assert rep.outcome[0] == Outcome.UNDECIDED
    assert _tokens_outcome(x, TOL)[0][0] == Outcome.UNDECIDED


def test_the_bipolar_minority_is_the_same_from_gram_and_tokens():
    x = _poles(12, 5, 3, 3)
    rep = analyze(x @ x.T, TOL)
    assert rep.outcome[0] == Outcome.BIPOLAR
    np.testing.assert_array_equal(rep.sides, [[7, 5]])
    assert _tokens_outcome(x, TOL)[1][0] == 5


def test_outcome_codes_table():
    got = _outcome_codes([True, True, False, False], [False, True, True, False],
                        [False, False, True, False])
    np.testing.assert_array_equal(got, [Outcome.SINGLE, Outcome.BIPOLAR, Outcome.OTHER,
                                        Outcome.UNDECIDED])
