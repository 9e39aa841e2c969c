"""The rate fit of the many-token table (`meanfield.absorption.gap_slope`): a bootstrap over
noise paths, every n in the fit."""

from __future__ import annotations

import numpy as np
import pytest

from tokensde.meanfield.absorption import gap_slope
from tokensde.model.checks import ParameterError

NS = [16, 64, 256, 1024, 4096]


def test_a_common_path_factor_cancels_in_every_replicate():
    """`m_rn = 1/2 - c_r n^{-1/2}`: each path scales every n alike, so any resampling of paths
    gives slope -1/2 exactly (a bootstrap over cells, which ignores that path r is shared by every
    n, would scatter); the point estimate too."""
    rng = np.random.default_rng(1)
    c = rng.uniform(0.2, 1.5, 40)
    masses = {n: 0.5 - c * n**-0.5 for n in NS}
    res = gap_slope(masses, boots=300)
    assert res["slope"] == pytest.approx(-0.5, abs=1e-12)
    assert res["lo"] == pytest.approx(-0.5, abs=1e-12) and res["hi"] == pytest.approx(-0.5, abs=1e-12)
    assert res["gap"][0] == pytest.approx(c.mean() / 4)


def test_noisy_paths_cover_the_true_slope_and_keep_every_n():
    """Per-cell noise on top of the path factor: the 95 % interval holds the true -1/2, is not
    degenerate, and every n (including one held by fewer paths, its own stratum) is in the fit."""
    rng = np.random.default_rng(2)
    c = rng.uniform(0.2, 0.9, 60)
    masses = {n: np.clip(0.5 - c * n**-0.5 * np.exp(0.3 * rng.standard_normal(60)), 0, 0.5)
              for n in NS}
    masses[16384] = masses[4096][:20] * 0 + 0.5 - c[:20] * 16384**-0.5  # the first 20 paths
    res = gap_slope(masses, boots=400, seed=3)
    assert res["n"] == [*NS, 16384] and res["paths"] == [60] * 5 + [20]
    assert res["lo"] < -0.5 < res["hi"]
    assert 0.01 < res["hi"] - res["lo"] < 0.3
    assert res["degenerate"] == 0


def test_undecided_runs_and_a_closed_gap_are_refused():
    with pytest.raises(ParameterError, match="masses"):
        gap_slope({16: [0.1, np.nan, 0.2], 64: [0.2, 0.3, 0.4]})
    with pytest.raises(ParameterError, match="masses"):
        gap_slope({16: [0.5, 0.5], 64: [0.2, 0.3]})
    with pytest.raises(ParameterError, match="masses"):
        gap_slope({16: [0.1, 0.2]})
