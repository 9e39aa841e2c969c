"""Token weights in the attention: `A_ij ∝ w_j exp(beta <x_i, x_j>)` (issue 23, item 1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokensde import Execution, InitialState, Recording, TimeGrid
from tokensde.model.params import ModelParams, ParameterError
from tokensde.sim.layers import _attention_output
from tokensde.sim.simulate import simulate


def _tokens(n: int, d: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed).standard_normal((n, d))
    return g / np.linalg.norm(g, axis=-1, keepdims=True)


@pytest.mark.parametrize("sampler", ["fast", "full"])
def test_unit_weights_bit_for_bit(sampler: str) -> None:
    """weights=None and equal weights 1 (log 1 = 0 added to the logits) give identical bits."""
    p = ModelParams(n=5, d=7, beta=2.0)
    a = simulate(p, TimeGrid.make(layers=30), runs=4, seed=3, recording=Recording(record=("gram", "tokens")),
                 execution=Execution(sampler=sampler))
    b = simulate(p, TimeGrid.make(layers=30), runs=4, seed=3, initial=InitialState(weights=np.ones(5)),
                 recording=Recording(record=("gram", "tokens")), execution=Execution(sampler=sampler))
    assert np.array_equal(a.x, b.x) and np.array_equal(a.gram, b.gram)


@pytest.mark.parametrize("attention", ["softmax", "usa"])
@pytest.mark.parametrize("scheme", ["network", "sde"])
def test_integer_weights_equal_repeated_tokens(attention: str, scheme: str) -> None:
    """Nodes with weights (1, 3, 2) move exactly as 6 tokens with those repetitions, on the same
    value matrices (sampler 'full' draws V independently of n)."""
    d, reps = 3, np.array([1, 3, 2])
    x0 = _tokens(3, d, 1)
    rep = np.repeat(x0, reps, axis=0)
    kw = dict(runs=3, seed=11, execution=Execution(sampler="full"), scheme=scheme)
    pw = ModelParams(n=3, d=d, beta=1.5, attention=attention)
    pr = ModelParams(n=6, d=d, beta=1.5, attention=attention)
    grid = TimeGrid.make(layers=40)
    a = simulate(pw, grid, initial=InitialState.tokens(x0, reps), **kw)
    b = simulate(pr, grid, initial=InitialState.tokens(rep), **kw)
    first = np.concatenate([[0], np.cumsum(reps)[:-1]])
    assert float(np.abs(a.x - b.x[:, first]).max()) < 1e-12
    # the tokens moved (the comparison is not vacuous)
    assert float(np.abs(a.x - x0).max()) > 1e-1


def test_weighted_attention_closed_form() -> None:
    """Two tokens, weights (w, 1): y_1 = (x_1 w e^beta + x_2 e^{beta rho}) / (w e^beta + e^{beta rho})."""
    p = ModelParams(n=2, d=2, beta=0.7)
    x = torch.tensor([[[1.0, 0.0], [0.6, 0.8]]], dtype=torch.float64)
    w = torch.tensor([2.5, 1.0], dtype=torch.float64)
    y = _attention_output(x, p, weights=w)
    a, b = 2.5 * np.exp(0.7), np.exp(0.7 * 0.6)
    want = (a * np.array([1.0, 0.0]) + b * np.array([0.6, 0.8])) / (a + b)
    assert np.allclose(y[0, 0].numpy(), want, rtol=0, atol=1e-15)


def test_gram_sampler_refuses_weights() -> None:
    with pytest.raises(ParameterError, match="sampler='gram'"):
        simulate(ModelParams(n=2, d=16), TimeGrid.make(layers=2), initial=InitialState(weights=[1.0, 2.0]),
                 execution=Execution(sampler="gram"))


@pytest.mark.parametrize("w", [[1.0, -1.0, 1.0], [0.0, 0.0, 0.0], [1.0, np.nan, 1.0], [1.0, 2.0]])
def test_bad_weights(w: list[float]) -> None:
    with pytest.raises(ParameterError, match="weights"):
        simulate(ModelParams(n=3, d=4), TimeGrid.make(layers=2), initial=InitialState(weights=w))
