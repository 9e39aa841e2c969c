"""The O(n) attention at the edges of its accuracy: float32 runs, tokens of little or no weight
at large beta, beta = 1000. Truth: the attention pair by pair in numpy float64 with the largest
exponent subtracted (no cancellation, no overflow)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tokensde import Execution, ModelParams, TimeGrid
from tokensde.sim.expansion import (
    _cancellation_limit,
    _log_cancellation,
    auto_uses_expansion,
    default_tol,
    expansion_output,
    unit_roundoff,
)
from tokensde.sim.simulate import simulation_budget

GIB = 2**30


def unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def softmax_rows(x: np.ndarray, beta: float, w: np.ndarray | None, rows: np.ndarray
                 ) -> np.ndarray:
    """Softmax outputs of tokens `rows` of one run `x` `(n, d)`, pair by pair."""
    w = np.ones(x.shape[0]) if w is None else w
    g = beta * (x[rows] @ x.T)
    g = g - np.where(w > 0, g, -np.inf).max(-1, keepdims=True)
    k = w * np.exp(g)
    return (k @ x) / k.sum(-1, keepdims=True)


@pytest.mark.parametrize("d", [2, 3])
def test_float32_runs_take_the_expansion_and_fit_in_memory(d):
    """2 runs of 65536 tokens in float32: the O(n) attention by `auto` and its budget below
    1 GiB (the n x n scores alone would be 34 GB); float32 truncates at u_32 / n."""
    p = ModelParams(n=65536, d=d, beta=3.0)
    assert auto_uses_expansion(p, torch.float32)
    b = simulation_budget(p, TimeGrid.make(T=1.0, dt=0.02), 2, execution=Execution(
        dtype="float32"))
    assert b.memory < GIB and "attention by expansion" in b.detail
    assert 65536 * 65536 * 4 * 2 > 30 * GIB  # what the dense scores of 2 runs would hold
    assert default_tol(torch.float32, math.log(65536)) == pytest.approx(
        unit_roundoff(torch.float32) / 65536)
    assert default_tol(torch.float64, math.log(65536)) == unit_roundoff(torch.float64)


@pytest.mark.parametrize("d", [2, 3])
def test_float32_keeps_float32_accuracy_for_a_lone_token(d):
    """One token against an atom of 2047 (beta = 6): its cancellation scale is ~2048, which cost
    log10(n) digits when the moments were float32 sums; float64 moments and a truncation at
    u_32 / n keep every output within a few float32 roundings of the float64 truth."""
    rng = np.random.default_rng(5 + d)
    pole = unit(rng.standard_normal(d))
    x = unit(pole + 0.01 * rng.standard_normal((2048, d)))
    x[0] = unit(rng.standard_normal(d))
    x = unit(x.astype(np.float32).astype(np.float64))  # the tokens the float32 run holds
    p = ModelParams(n=2048, d=d, beta=6.0)
    y = expansion_output(torch.tensor(x[None], dtype=torch.float32), p)
    assert y.dtype == torch.float32
    rows = np.arange(0, 2048, 129)
    err = np.abs(y[0].double().numpy()[rows] - softmax_rows(x, 6.0, None, rows)).max()
    assert err <= 4 * unit_roundoff(torch.float32)


@pytest.mark.parametrize("d", [2, 3])
def test_weightless_token_opposite_an_atom_is_exact(d):
    """A token of weight 0 (and one of weight 1e-12) opposite an atom at beta = 20: its
    cancellation scale e^40 would leave O(1) error in the harmonic sum; the output comes from
    the dense sum instead (1e-12 of the truth), the other tokens from the expansion."""
    e = np.eye(d)[0]
    f = np.eye(d)[1]
    x = unit(np.stack([e + 0.05 * f, e - 0.05 * f, e + 0.1 * f, -e + 0.3 * f, -e - 0.2 * f]))
    w = np.array([1.0, 1.0, 1.0, 0.0, 1e-12])
    p = ModelParams(n=5, d=d, beta=20.0)
    assert math.exp(_log_cancellation(20.0, w)) > _cancellation_limit()
    y = expansion_output(torch.tensor(x[None]), p, torch.tensor(w)).numpy()[0]
    ref = softmax_rows(x, 20.0, w, np.arange(5))
    assert np.abs(y - ref).max() <= 1e-12
    assert np.abs(ref[3] - ref[0]).max() > 1e-3  # the far token sees the atom's spread side


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_beta_1000_on_the_sphere_has_no_nan(dtype):
    """beta = 1000 on S^2 (every float32 output was NaN when the moments were float32): finite
    outputs within float32 (resp. float64) accuracy of the truth."""
    rng = np.random.default_rng(9)
    x = unit(unit(rng.standard_normal((8, 3))).astype(np.float32).astype(np.float64))
    p = ModelParams(n=8, d=3, beta=1000.0)
    y = expansion_output(torch.tensor(x[None], dtype=dtype), p)
    assert bool(torch.isfinite(y).all())
    err = np.abs(y[0].double().numpy() - softmax_rows(x, 1000.0, None, np.arange(8))).max()
    # float64: the truth's own exponents carry beta u_64 ~ 1e-13
    assert err <= (4 * unit_roundoff(torch.float32) if dtype == torch.float32 else 1e-10)
