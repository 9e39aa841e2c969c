"""The opt-in step error (`step_runs`) of the multi-token and two-token sweep kinds: the columns it
adds are the coupled measurement for the cell (`analysis.measure_step_error`, `pair_step`), a cell
without it keeps its id and seed, and a cell with it keeps its seed (measurement-only,
`ExperimentKind.seed_free`) and so its other numbers."""

from __future__ import annotations

import math

import pytest

from tokensde.analysis.pair_monte_carlo import spec_params
from tokensde.analysis.step_coupled import _coupled_seed, _pair_step, measure_step_error
from tokensde.model.params import ModelParams, ParameterError, TimeGrid
from tokensde.sweep.config import SweepConfig
from tokensde.sweep.kinds import get_kind

BASE = {"kind": "multi_token", "seed": 5, "runs": 24, "T": 6.0,
        "params": {"n": 2, "d": 2, "dt": 0.05, "tol": 1e-3}, "grid": {"beta": [1.0]}}


PAIR = {"kind": "two_token", "seed": 5, "runs": 40, "T": 4.0,
        "params": {"d": 3, "rho0": -0.5, "dt": 0.05, "tol": 1e-2, "mlp": "relu"},
        "grid": {"beta": [1.0]}}


def _cell(base=BASE, **params):
    cfg = SweepConfig.from_dict({**base, "params": {**base["params"], **params}})
    (cell,) = cfg.cells()
    return cell


def _main(row):
    """A row without its step columns (its main numbers)."""
    return {k: v for k, v in row.items() if not k.startswith("step_")}


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
    est = measure_step_error(p, grid.T, grid.dt, 16, _coupled_seed(cell.seed), tol=1e-3,
                             until="decided", scheme="network")
    assert row["step_runs"] == 16
    for key in ("p_bipolar", "p_one_cluster"):
        b, se = est[key].estimate()
        assert row[f"step_{key}"] == b and row[f"step_{key}_se"] == se
        assert math.isfinite(se) and se > 0
    assert "step_runs" not in get_kind("multi_token").run(dict(_cell().params), 1)


@pytest.mark.parametrize("base", [BASE, PAIR], ids=["multi_token", "two_token"])
def test_step_runs_leave_the_seed_and_the_main_numbers_of_a_cell(base):
    kind = get_kind(base["kind"])
    plain, measured = _cell(base), _cell(base, step_runs=8)
    assert measured.id != plain.id and measured.seed == plain.seed
    assert _cell(base, tol=0.02, step_runs=8).seed != plain.seed  # the rest still seeds it
    a = kind.run(dict(plain.params), plain.seed)
    b = kind.run(dict(measured.params), measured.seed)
    assert _main(a) == _main(b) and b["step_runs"] == 8 and "step_runs" not in a


def test_the_two_token_step_columns_are_pair_step_for_the_cell():
    cell = _cell(PAIR, step_runs=16)
    row = get_kind("two_token").run(dict(cell.params), cell.seed)
    p = spec_params(1.0, 3, mlp="relu")
    result = {"dt": 0.05, "steps": row["steps"], "T": 4.0, "counts": {"runs": 40}}
    want = _pair_step(p, -0.5, result, "network", 1e-2, "decided", cell.seed, coupled=16)
    assert want.bias is not None and math.isfinite(want.se) and want.se > 0
    assert (row["step_runs"], row["step_p_anti"], row["step_p_anti_se"]) == (16, want.bias,
                                                                             want.se)
    # at most the cell's runs
    assert get_kind("two_token").run(dict(_cell(PAIR, step_runs=400).params), 1)["step_runs"] == 40


def test_two_token_step_runs_refused_where_they_cannot_be_measured():
    with pytest.raises(ParameterError, match="engine 'network' only"):
        _cell(PAIR, step_runs=8, engine="reduced", mlp="none")
    with pytest.raises(ParameterError, match="step_runs must be 0"):
        _cell(PAIR, step_runs=1)
    odd = _cell(PAIR, step_runs=8, dt=4.0 / 81)  # 81 layers: no step doubling
    with pytest.raises(ParameterError, match="even number of layers"):
        get_kind("two_token").run(dict(odd.params), odd.seed)
    peri = _cell(step_runs=8, norm="peri")  # refused as the cell starts, before its runs
    with pytest.raises(ParameterError, match=r"step_runs: .*norm='peri'"):
        get_kind("multi_token").run(dict(peri.params), peri.seed)
