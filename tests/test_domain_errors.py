"""Every public function of `tokensde.theory` refuses an argument outside its documented range
with ValueError (ParameterError) or TypeError, never a nan or a silently changed value: each
parameter in turn gets nan, inf, a value below or above its range and a string, the others
staying valid; hypothesis adds random values outside each range."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokensde.theory as th

nan, inf = math.nan, math.inf
VALID = {"beta": 1.0, "d": 3, "tol": 1e-8, "sigma": 1.0, "nodes": 200, "eps": 0.5, "rho0": 0.0,
         "t_max": 100.0, "rho": 0.3, "T": 0.1, "dt": 0.01, "runs": 4, "seed": 0,
         "times": np.array([0.5, 1.0]), "checkpoints": None}
# values outside each parameter's documented range
BAD = {"beta": [nan, inf, -1.0, "x"], "d": [nan, inf, 1, -1, "x"], "rho": [nan, 2.0, -1.5, "x"],
       "rho0": [nan, 2.0, -1.5, "x"], "sigma": [nan, inf, -1.0, 0.0, "x"],
       "eps": [nan, inf, -1.0, "x"], "tol": [nan, 0.0, -1.0, 2.0, "x"],
       "t_max": [nan, inf, 0.0, -1.0], "T": [nan, inf, 0.0, -1.0], "dt": [nan, inf, 0.0, -1.0],
       "nodes": [0, -1, 1.5, "x"], "runs": [0, -1, 1.5, "x"], "seed": [-1, 1.5, "x"],
       "times": [np.array([nan]), np.array([-1.0]), "x"], "checkpoints": [1, -1, 1.5, "x", 10**6]}
# (lower end, strict) of the parameters whose range is a half-line of reals
HALF_LINES = {"beta": (0.0, False), "sigma": (0.0, True), "eps": (0.0, False), "d": (2.0, False),
              "t_max": (0.0, True), "T": (0.0, True), "dt": (0.0, True)}
FUNCTIONS = [name for name in th.__all__ if inspect.isfunction(getattr(th, name))]


def _call(name: str, **changed):
    f = getattr(th, name)
    params = inspect.signature(f).parameters
    return f(**{**{k: VALID[k] for k in params if k in VALID}, **changed})


def test_every_parameter_has_a_valid_value_and_a_bad_one():
    for name in FUNCTIONS:
        for k in inspect.signature(getattr(th, name)).parameters:
            assert k in VALID and k in BAD, f"{name}({k}): add it to VALID and BAD"
        _call(name)  # the valid arguments are valid


CASES = [(name, k, v) for name in FUNCTIONS
         for k in inspect.signature(getattr(th, name)).parameters for v in BAD[k]]


@pytest.mark.parametrize(("name", "param", "value"), CASES,
                         ids=[f"{n}-{k}-{v!r}" for n, k, v in CASES])
def test_a_value_outside_the_range_is_refused(name, param, value):
    with pytest.raises((ValueError, TypeError)) as err:
        _call(name, **{param: value})
    if isinstance(err.value, ValueError):
        assert param in str(err.value).split()[0] or param in str(err.value), str(err.value)


SCALAR = [(name, k) for name in FUNCTIONS for k in inspect.signature(getattr(th, name)).parameters
          if k in HALF_LINES]


@settings(max_examples=80, deadline=None, derandomize=True)
@given(case=st.sampled_from(SCALAR), gap=st.floats(1e-9, 1e6))
def test_random_values_below_a_half_line_are_refused(case, gap):
    name, param = case
    low, strict = HALF_LINES[param]
    value = low if strict and gap > 1e5 else low - gap
    with pytest.raises(ValueError, match=param):
        _call(name, **{param: value})
