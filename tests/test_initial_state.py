"""A start as it is (`InitialState.as_is`, `normalize=False`): a pre- or peri-norm residual stream
keeps the radii it is given; post-norm takes only unit tokens that way; and `Observer(check=False)`,
which the predictions of a real network use for an ill-conditioned invariant statistic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokensde import ModelParams, TimeGrid
from tokensde.model.params import ParameterError
from tokensde.sim.observe import Observer
from tokensde.sim.options import Execution, InitialState, Recording
from tokensde.sim.simulate import simulate

N, D = 3, 4


def _stream(seed: int = 1, runs: int = 3) -> np.ndarray:
    """Tokens `(runs, N, D)` with radii between 0.5 and 3 (a residual stream off the sphere)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(runs, N, D))
    return x / np.linalg.norm(x, axis=-1, keepdims=True) * rng.uniform(0.5, 3.0, (runs, N, 1))


def _tokens(p: ModelParams, initial: InitialState, layers: int = 2, sampler: str = "fast",
            runs: int = 3) -> np.ndarray:
    """The tokens `(runs, layers + 1, N, D)` at every layer."""
    r = simulate(p, TimeGrid.make(layers=layers), runs=runs, seed=5, initial=initial,
                 recording=Recording(np.arange(layers + 1), ("tokens",)),
                 execution=Execution(sampler=sampler, dtype="float64"))
    return r.tokens


@pytest.mark.parametrize("norm", ["pre", "peri"])
def test_a_residual_stream_starts_as_it_is(norm):
    p = ModelParams(n=N, d=D, norm=norm)
    x = _stream()
    kept = _tokens(p, InitialState.as_is(x))
    assert np.array_equal(kept[:, 0], x)  # radii kept, bit for bit
    normalised = _tokens(p, InitialState.tokens(x))
    assert np.allclose(np.linalg.norm(normalised[:, 0], axis=-1), 1.0, atol=1e-14)
    # the pre-norm update reads the directions only: the same seed moves a stream scaled by 2
    # by the same increment in its first layer (radii kept: a normalised start would not)
    if norm == "pre":
        twice = _tokens(p, InitialState.as_is(2.0 * x), layers=1)
        once = _tokens(p, InitialState.as_is(x), layers=1)
        assert not np.allclose(twice[:, 0], once[:, 0])
        assert np.allclose(twice[:, 1] - twice[:, 0], once[:, 1] - once[:, 0], atol=1e-12)


def test_the_gram_sampler_starts_from_the_given_radii():
    # an invariant statistic, the radii |x_i|, at the start under the Gram sampler and in R^d
    p = ModelParams(n=N, d=D, norm="pre")
    x = _stream(2)
    radii = Observer("radii", lambda t: torch.linalg.vector_norm(t, dim=-1), invariant=True)
    for sampler in ("gram", "fast"):
        r = simulate(p, TimeGrid.make(layers=2), runs=3, seed=0, initial=InitialState.as_is(x),
                     recording=Recording(3, (), radii),
                     execution=Execution(sampler=sampler, dtype="float64"))
        assert r.sampler == sampler
        np.testing.assert_allclose(r.observed["radii"][:, 0], np.linalg.norm(x, axis=-1),
                                   rtol=1e-13)


def test_post_norm_takes_unit_tokens_as_they_are_and_refuses_others():
    p = ModelParams(n=N, d=D)
    x = _stream(3)
    with pytest.raises(ParameterError, match=r"as_is \(normalize=False\).*unit sphere"):
        simulate(p, TimeGrid.make(layers=1), runs=3, initial=InitialState.as_is(x))
    u = x / np.linalg.norm(x, axis=-1, keepdims=True)
    assert np.array_equal(_tokens(p, InitialState.as_is(u))[:, 0], u)


@pytest.mark.parametrize("make", [
    lambda: InitialState("uniform", normalize=False),
    lambda: InitialState("pair", 0.5, normalize=False),
    lambda: InitialState(np.ones((N, D)), normalize=1),
], ids=["uniform", "pair", "not-bool"])
def test_normalize_false_needs_an_array(make):
    with pytest.raises(ParameterError, match="normalize"):
        make()


def _sqrt_spectrum(x: torch.Tensor) -> torch.Tensor:
    """Square roots of the Gram eigenvalues: invariant, but ill-conditioned at zero."""
    return torch.linalg.eigvalsh(x @ x.transpose(-1, -2)).clamp_min(0.0).sqrt()


def test_an_ill_conditioned_invariant_observer_may_skip_the_check():
    # 6 tokens in R^3: three zero eigenvalues, whose rounding the square root magnifies
    p = ModelParams(n=6, d=3)
    grid, rec = TimeGrid.make(layers=1), lambda o: Recording(2, (), o)
    checked = Observer("s", _sqrt_spectrum, invariant=True)
    with pytest.raises(ParameterError, match="declared invariant=True"):
        simulate(p, grid, runs=4, recording=rec(checked),
                 execution=Execution(sampler="fast", dtype="float64"))
    r = simulate(p, grid, runs=4, recording=rec(Observer("s", _sqrt_spectrum, invariant=True,
                                                         check=False)),
                 execution=Execution(sampler="fast", dtype="float64"))
    # three non-zero singular values, the tokens' directions: their squares sum to n
    s = r.observed["s"]
    assert np.allclose((s ** 2).sum(-1), 6.0) and np.all(s[..., :3] < 1e-7)
    with pytest.raises(ParameterError, match="check=True or False"):
        Observer("s", _sqrt_spectrum, check="no")
