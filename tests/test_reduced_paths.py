"""The reduced two-token paths (`sim.reduced`): stepped by the run core, recorded at the run's
checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

from tokensde.model.params import ParameterError
from tokensde.sim.options import _resolve_checkpoints
from tokensde.sim.reduced import reduced_diffusion, z_paths
from tokensde.theory.coefficients import _SpecPair


def test_checkpoints_are_the_runs_own_and_a_subset_of_every_step():
    kw = {"T": 0.5, "dt": 0.05, "runs": 64, "seed": 3}
    model = _SpecPair(1.5, 4, 1.0)
    every = z_paths(model, -0.2, checkpoints=11, **kw)  # all 10 steps and the start
    assert every.z.shape == (64, 11) and np.allclose(every.times, 0.05 * np.arange(11))
    # the start, then one Euler step of the model's z-coefficients from it
    drift, noise = model.z_coefficients(every.z[:, 0])
    step = (every.z[:, 1] - every.z[:, 0] - 0.05 * drift) / (noise * np.sqrt(0.05))
    assert np.all(every.z[:, 0] == np.arctanh(-0.2)) and abs(step.mean()) < 0.5
    assert 0.6 < step.std() < 1.4
    # a count C rounds as a run's `Recording.checkpoints`, and indices pick the same columns
    four = z_paths(model, -0.2, checkpoints=4, **kw)
    idx = _resolve_checkpoints(4, 10)
    assert list(idx) == [0, 3, 7, 10] and np.array_equal(four.z, every.z[:, idx])
    picked = z_paths(model, -0.2, checkpoints=[2, 10], **kw)
    assert np.array_equal(picked.z, every.z[:, [2, 10]]) and np.allclose(picked.times, [0.1, 0.5])
    ends = reduced_diffusion(1.5, 4, -0.2, sigma=1.0, **kw)
    assert np.array_equal(ends.z, every.z[:, [0, 10]])


@pytest.mark.parametrize(("kw", "name"), [({"checkpoints": 12}, "checkpoints"),
                                          ({"dt": 0.3}, "dt"), ({"runs": 0}, "runs")])
def test_bad_arguments_name_the_parameter(kw, name):
    args = {"T": 0.5, "dt": 0.05, "runs": 4, **kw}
    with pytest.raises(ParameterError, match=name):
        reduced_diffusion(1.0, 3, 0.0, **args)
