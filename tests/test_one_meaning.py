"""One meaning per output: `x`, `tokens` and what an observer sees are coordinates in R^d for
every sampler `auto` can pick; the Gram sampler, which holds the tokens only up to a rotation,
runs only when every output is a function of the inner products, and refuses the others."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from tokensde import Execution, ModelParams, ParameterError, Recording, TimeGrid, simulate
from tokensde.sim.observe import Observer
from tokensde.sim.simulate import resolve_sampler

GRID = TimeGrid.make(layers=2)


def _first_coordinate(x: torch.Tensor) -> torch.Tensor:
    return x[..., 0]


def _width(x: torch.Tensor) -> torch.Tensor:
    return torch.full((x.shape[0],), float(x.shape[-1]), dtype=x.dtype)


def _mass(x: torch.Tensor) -> torch.Tensor:  # |sum_i x_i|^2 = sum_ij G_ij: a Gram-level quantity
    return x.sum(-2).pow(2).sum(-1)


RECORDINGS = {
    "default": Recording(),
    "gram": Recording(record=("gram",)),
    "tokens": Recording(record=("tokens",)),
    "both": Recording(record=("gram", "tokens")),
    "coordinate observer": Recording(record=("gram",), observe=[Observer("x0", _first_coordinate),
                                                                Observer("w", _width)]),
    "invariant observer": Recording(record=(), observe=[Observer("mass", _mass, invariant=True)]),
}


def test_every_sampler_auto_picks_returns_coordinates_in_r_d_or_refuses_x():
    # over a grid of (n, d) on both sides of d = 4 n (where `auto` can take the Gram sampler)
    # and every recording option: x, tokens and coordinate observers are in R^d, or `x` is
    # refused by name; the Gram sampler never ran with a coordinate output
    picked: set[str] = set()
    for (n, d), (name, rec) in itertools.product(
            [(2, 2), (2, 8), (3, 16), (4, 12), (6, 4)], RECORDINGS.items()):
        p = ModelParams(n=n, d=d, beta=1.0)
        res = simulate(p, GRID, runs=2, seed=1, recording=rec)
        picked.add(res.sampler)
        coords = name in ("tokens", "both", "coordinate observer")
        assert not (coords and res.sampler == "gram"), (n, d, name)
        if res.sampler == "gram":
            with pytest.raises(ParameterError, match=r"sampler='gram'.*no coordinates in R\^d"):
                _ = res.x
            assert res.state.shape[:2] == (2, n) and res.state.shape[-1] <= n
        else:
            assert res.x.shape == (2, n, d), (n, d, name)
        if res.tokens is not None:
            assert res.tokens.shape[-1] == d
        if name == "coordinate observer":
            np.testing.assert_array_equal(res.observed["w"], float(d))
            np.testing.assert_array_equal(res.observed["x0"][:, -1], res.x[..., 0])
        # the final Gram matrix is the same whatever holds the state
        np.testing.assert_allclose(np.diagonal(res.final_gram(), axis1=-2, axis2=-1), 1.0,
                                   atol=1e-12)
    assert picked == {"fast", "full", "gram"}  # the grid reaches every sampler auto can pick


def test_auto_takes_gram_only_for_gram_level_outputs():
    p = ModelParams(n=4, d=16, beta=1.0)
    assert resolve_sampler(p, Execution(), RECORDINGS["default"]) == "gram"
    assert resolve_sampler(p, Execution(), RECORDINGS["invariant observer"]) == "gram"
    for name in ("tokens", "both", "coordinate observer"):
        assert resolve_sampler(p, Execution(), RECORDINGS[name]) == "fast", name


@pytest.mark.parametrize(("name", "named"), [("tokens", "'tokens'"), ("both", "'tokens'"),
                                             ("coordinate observer", "'x0', 'w'")])
def test_an_explicit_gram_sampler_refuses_coordinate_outputs_by_name(name, named):
    p = ModelParams(n=4, d=16, beta=1.0)
    with pytest.raises(ParameterError, match=f"cannot record {named}"):
        simulate(p, GRID, runs=2, recording=RECORDINGS[name],
                 execution=Execution(sampler="gram"))


def test_an_invariant_observer_under_gram_reads_what_the_gram_record_holds():
    # the observer sees the state in a frame of the span (width <= n), and its Gram-level value
    # |sum x_i|^2 equals the sum of the recorded Gram entries at every checkpoint
    p = ModelParams(n=4, d=16, beta=1.0)
    rec = Recording(checkpoints=3, record=("gram",),
                    observe=[Observer("mass", _mass, invariant=True),
                             Observer("w", _width, invariant=True)])
    res = simulate(p, GRID, runs=3, seed=2, recording=rec)
    assert res.sampler == "gram"
    assert float(res.observed["w"].max()) <= 4
    np.testing.assert_allclose(res.observed["mass"], res.gram.sum((-2, -1)), rtol=1e-12)
    fast = simulate(p, GRID, runs=3, seed=2, recording=rec, execution=Execution(sampler="fast"))
    np.testing.assert_array_equal(fast.observed["w"], 16.0)  # the same observer sees R^d there


def test_observer_invariance_must_be_a_bool():
    with pytest.raises(ParameterError, match="invariant=True or False"):
        Observer("m", _mass, invariant="yes")  # type: ignore[arg-type]
