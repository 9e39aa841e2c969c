"""Wilson and t intervals against closed-form values."""

import math

import numpy as np
import pytest

from tokensde.analysis.stats import t_interval, wilson


def test_wilson_known_values_and_edges():
    lo, hi = wilson(50, 100)
    # closed form at p = 1/2, n = 100, z = 1.959964: centre 0.5, half-width 0.09617
    assert float(lo) == pytest.approx(0.40383, abs=1e-5) and float(hi) == pytest.approx(0.59617, abs=1e-5)
    lo, hi = wilson(0, 20)
    assert float(lo) == 0.0 and float(hi) == pytest.approx(3.8415 / (20 + 3.8415), rel=1e-4)
    lo, hi = wilson(np.array([20]), np.array([20]))
    assert float(hi[0]) == 1.0 and float(lo[0]) == pytest.approx(20 / 23.8415, rel=1e-4)
    with pytest.raises(ValueError, match="successes <= trials"):
        wilson(5, 4)


def test_t_interval_closed_form() -> None:
    m, lo, hi = t_interval(np.array([1.0, 2.0, 3.0]))
    half = 4.302652729911275 / math.sqrt(3)  # t_{0.975, 2} * sd(=1) / sqrt(3)
    assert (m, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert math.isnan(t_interval(np.array([0.5]))[1])
