"""Validation of model parameters and time grids: every bad value names itself and its range."""

import math

import numpy as np
import pytest

from tokensde import ModelParams, ParameterError, TimeGrid


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"d": 1}, "d must be an integer from 2 to 2147483647"),
        ({"d": -3}, "d must be"),
        ({"n": 0}, "n must be an integer from 1 to 2147483647"),
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
    assert TimeGrid.make(T=1.0, dt=0.3, exact=False).steps == 4  # horizon reached is at least T
    for kwargs, msg in [
        ({"layers": 0}, "layers must be an integer from 1 to 9007199254740992"),
        ({"layers": 10, "alpha": -1.0}, "alpha must be a finite number > 0"),
        ({"T": 1.0}, "time must be given"),
        ({"T": 1.0, "dt": 2.0}, "dt must be <= T"),
        ({"T": -1.0, "dt": 0.1}, "T must be"),
        ({"layers": 5, "T": 1.0, "dt": 0.1}, "not both"),
    ]:
        with pytest.raises(ParameterError, match=msg):
            TimeGrid.make(**kwargs)


@pytest.mark.parametrize(
    ("name", "law", "sigma2", "rate"),
    [("pytorch", "uniform", lambda d: 1 / (3 * d), lambda d: 1 / 3),
     ("gpt2", "gaussian", lambda d: 0.02 ** 2, lambda d: 0.0004 * d),
     ("gaussian", "gaussian", lambda d: 1 / d, lambda d: 1.0)],
)
@pytest.mark.parametrize("d", [2, 64, 768])
def test_value_init_presets_closed_form(name, law, sigma2, rate, d):
    from tokensde.model.params import VALUE_INIT_PRESETS

    preset = VALUE_INIT_PRESETS[name]
    assert preset.sigma(d) == pytest.approx(math.sqrt(sigma2(d)), rel=1e-14)
    assert preset.depth_rate(d) == pytest.approx(rate(d), rel=1e-14)
    p = ModelParams.from_preset(name, d=d, n=3, beta=2.0)
    assert (p.noise, p.law, p.d, p.n, p.beta) == ("matrix", law, d, 3, 2.0)
    assert p.sigma == preset.sigma(d)
    # pytorch: U(-1/sqrt(d), 1/sqrt(d)), the half-width a = sigma sqrt(3) of the uniform law
    if name == "pytorch":
        assert p.sigma * math.sqrt(3) == pytest.approx(1 / math.sqrt(d), rel=1e-14)


@pytest.mark.parametrize(
    ("name", "kwargs", "msg"),
    [("gpt3", {}, "value_init must be one of pytorch, gpt2, gaussian; got 'gpt3'"),
     ("gpt2", {"sigma": 1.0}, "value_init must be given without sigma"),
     ("gpt2", {"law": "uniform", "sigma": 1.0}, "value_init must be given without law/sigma"),
     ("gpt2", {"eps": 0.5}, "value_init must be given without eps"),
     ("pytorch", {"noise": "scalar"}, "value_init must be used with noise='matrix'"),
     ("gaussian", {"d": 1}, "d must be an integer >= 2")],
)
def test_value_init_bad_input_names_the_parameter(name, kwargs, msg):
    with pytest.raises(ParameterError, match=msg.replace("(", r"\(")):
        ModelParams.from_preset(name, **kwargs)
