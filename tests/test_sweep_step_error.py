"""The multi-token sweep's opt-in step error (`step_runs`): the columns it adds are the coupled
measurement of `analysis.measure_step_error` for the cell, and a cell without it keeps its id and
seed (and so its numbers)."""

from __future__ import annotations

import math

import pytest

from tokensde.analysis.step_coupled import coupled_seed, measure_step_error
from tokensde.model.params import ModelParams, ParameterError, TimeGrid
from tokensde.sweep.config import SweepConfig
from tokensde.sweep.kinds import get_kind

BASE = {"kind": "multi_token", "seed": 5, "runs": 24, "T": 6.0,
        "params": {"n": 2, "d": 2, "dt": 0.05, "tol": 1e-3}, "grid": {"beta": [1.0]}}


def _cell(**params):
    cfg = SweepConfig.from_dict({**BASE, "params": {**BASE["params"], **params}})
    (cell,) = cfg.cells()
    return cell


def test_a_cell_without_step_runs_keeps_its_id_and_seed():
    plain, zero = _cell(), _cell(step_runs=0)
    assert (plain.id, plain.seed) == (zero.id, zero.seed)
    assert "step_runs" not in plain.params
    assert _cell(step_runs=16).id != plain.id
    with pytest.raises(ParameterError, match="step_runs must be 0"):
        _cell(step_runs=1)


def test_the_step_columns_are_the_coupled_measurement_of_the_cell():
    cell = _cell(step_runs=16)
    row = get_kind("multi_token").run(dict(cell.params), cell.seed)
    p = ModelParams(n=2, d=2, beta=1.0)
    grid = TimeGrid.make(T=6.0, dt=0.05)
    est = measure_step_error(p, grid.T, grid.dt, 16, coupled_seed(cell.seed), tol=1e-3,
                             until="decided", scheme="network")
    assert row["step_runs"] == 16
    for key in ("p_bipolar", "p_one_cluster"):
        b, se = est[key].estimate()
        assert row[f"step_{key}"] == b and row[f"step_{key}_se"] == se
        assert math.isfinite(se) and se > 0
    assert "step_runs" not in get_kind("multi_token").run(dict(_cell().params), 1)
