"""An observer declared invariant is checked: one extra call on a rotated state."""

from __future__ import annotations

import pytest
import torch

from tokensde import ModelParams, TimeGrid, simulate
from tokensde.model.params import ParameterError
from tokensde.sim.observe import Observer, _check_invariance, _random_rotation
from tokensde.sim.options import Execution, Recording


def _gram_trace(x: torch.Tensor) -> torch.Tensor:
    return (x @ x.transpose(-1, -2)).pow(2).sum((-1, -2))


def test_random_rotation_is_orthogonal_and_seeded():
    o = _random_rotation(5, torch.float64)
    assert torch.allclose(o @ o.T, torch.eye(5, dtype=torch.float64), atol=1e-14)
    assert torch.equal(o, _random_rotation(5, torch.float64))
    assert not torch.allclose(o, torch.eye(5, dtype=torch.float64), atol=0.1)


def test_an_observer_declared_invariant_that_reads_coordinates_is_refused_by_name():
    p = ModelParams(n=4, d=16)  # auto picks the Gram sampler when every output is invariant
    res = simulate(p, TimeGrid.make(layers=2), runs=3, recording=Recording(
        observe=[Observer("tr", _gram_trace, invariant=True)]))
    assert res.sampler == "gram" and res.observed["tr"].shape == (3, 2)
    for sampler in ("auto", "full"):
        with pytest.raises(ParameterError, match=r"observer 'first' is declared invariant=True"):
            simulate(p, TimeGrid.make(layers=2), runs=3, execution=Execution(sampler=sampler),
                     recording=Recording(observe=[Observer("first", lambda x: x[..., 0, 0],
                                                           invariant=True)]))
    # float32 rounding is not a change; an integer output must match exactly
    x = torch.randn(3, 4, 6, dtype=torch.float32, generator=torch.Generator().manual_seed(2))
    _check_invariance([Observer("tr", _gram_trace, invariant=True)], x)
    with pytest.raises(ParameterError, match="'sign'"):
        _check_invariance([Observer("sign", lambda t: (t[..., 0] > 0).sum(-1), invariant=True)], x)
    # undeclared observers are not called
    _check_invariance([Observer("first", lambda t: t[..., 0, 0])], x)
