"""Validation of model parameters and time grids: every bad value names itself and its range."""

import math

import numpy as np
import pytest

from tokensde import ModelParams, ParameterError, TimeGrid


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"d": 1}, "d must be an integer >= 2"),
        ({"d": -3}, "d must be"),
        ({"n": 0}, "n must be an integer >= 1"),
        ({"n": 2.5}, "n must be"),
        ({"beta": -0.1}, "beta must be a finite number >= 0"),
        ({"beta": math.nan}, "beta must be"),
        ({"beta": math.inf}, "beta must be"),
        ({"sigma": -1.0}, "sigma must be"),
        ({"eps": math.nan, "noise": "scalar"}, "eps must be"),
        ({"attention": "linear"}, "attention must be one of softmax, usa"),
        ({"noise": "diagonal"}, "noise must be one of matrix, scalar, symmetric"),
        ({"law": "rademacher"}, "law (for noise=matrix) must be one of gaussian, uniform"),
        ({"mean": "zero"}, "mean must be one of none, identity"),
        ({"Q": np.eye(4)}, "Q must be a 3x3 matrix"),
        ({"mean": np.ones((2, 2))}, "mean must be a 3x3 matrix"),
        ({"attention": "usa", "beta": 1e4}, "beta (attention=usa, float64) must be <= 345"),
    ],
)
def test_invalid_parameters_name_themselves(kwargs, name):
    with pytest.raises(ParameterError) as err:
        ModelParams(**kwargs)
    assert name in str(err.value)


def test_params_round_trip_and_derived_fields():
    m = np.diag([1.0, 2.0, 3.0])
    p = ModelParams(n=4, d=3, beta=2.0, mean=m, Q=2 * np.eye(3))
    q = ModelParams.from_dict(p.to_dict())
    assert q.to_dict() == p.to_dict()
    np.testing.assert_array_equal(q.M, m)
    assert not p.rotation_invariant  # M is not a multiple of I
    assert ModelParams(d=5, mean="identity", Q=3 * np.eye(5)).rotation_invariant
    assert ModelParams(noise="scalar", eps=0.3).noise_scale == 0.3
    assert ModelParams(noise="scalar").noise_scale == 1.0
    with pytest.raises(ParameterError, match="model parameters"):
        ModelParams.from_dict({"n": 2, "colour": "red"})
    with pytest.raises(AttributeError):
        p.n = 3  # frozen


def test_time_grid_both_forms():
    g = TimeGrid.make(layers=100)
    assert g.steps == 100 and g.dt == pytest.approx(0.01) and g.T == pytest.approx(1.0)
    g = TimeGrid.make(layers=10, alpha=0.5)
    assert g.dt == 0.25 and g.T == 2.5
    g = TimeGrid.make(T=2.0, dt=0.1)
    assert g.steps == 20 and g.alpha == pytest.approx(math.sqrt(0.1))
    assert TimeGrid.make(T=1.0, dt=0.3).steps == 4  # horizon reached is at least T
    for kwargs, msg in [
        ({"layers": 0}, "layers must be an integer >= 1"),
        ({"layers": 10, "alpha": -1.0}, "alpha must be a finite number > 0"),
        ({"T": 1.0}, "time must be given"),
        ({"T": 1.0, "dt": 2.0}, "dt must be <= T"),
        ({"T": -1.0, "dt": 0.1}, "T must be"),
        ({"layers": 5, "T": 1.0, "dt": 0.1}, "not both"),
    ]:
        with pytest.raises(ParameterError, match=msg):
            TimeGrid.make(**kwargs)
