"""The sweep kind `token_noise` (docs/token-noise.md): canonical cells, a tiny sweep that runs,
is interrupted and resumes to the same table, and the packaged sweep files."""

from __future__ import annotations

import pytest

import tokensde.study.noise_threshold as tn
from tokensde.model.params import ParameterError
from tokensde.study.context import SWEEP_DIR
from tokensde.sweep.config import _TIMING_COLUMNS, SweepConfig
from tokensde.sweep.engine import run_sweep
from tokensde.sweep.kinds import get_kind, kind_names
from tokensde.sweep.store import load_table

TINY = {"name": "token-noise-test", "kind": "token_noise", "runs": 2, "T": 2.0, "seed": 3,
        "params": {"n": 8, "burn": 1.0, "dt": 0.1, "samples": 5},
        "grid": {"ratio": [0.6, 1.5], "start": ["uniform", "ordered"]}}


def test_cells_are_canonical():
    kind = get_kind("token_noise")
    assert "token_noise" in kind_names()
    tau_c = tn.critical_token_noise(1.0, 2, "usa")
    cell = kind.normalize({"ratio": 0.5, "n": 16, "runs": 2, "T": 4.0})
    assert cell["tau"] == pytest.approx(0.5 * tau_c, abs=1e-9) and cell["burn"] == 2.0
    assert kind.normalize(cell) == cell  # idempotent
    assert kind.normalize({"tau": 0.3, "n": 16, "runs": 2, "T": 4.0})["ratio"] is None
    for bad, match in [({"n": 4, "runs": 2, "T": 4.0}, "exactly one of tau"),
                       ({"tau": 1, "ratio": 1, "n": 4, "runs": 2, "T": 4.0}, "exactly one"),
                       ({"tau": 1, "n": 4, "runs": 2, "T": 4.0, "burn": 4.0}, "burn must be"),
                       ({"tau": 1, "n": 4, "runs": 1, "T": 4.0}, "runs"),
                       ({"tau": 1, "n": 4, "runs": 2, "T": 4.0, "start": "x"}, "start"),
                       ({"tau": -1, "n": 4, "runs": 2, "T": 4.0}, "tau")]:
        with pytest.raises(ParameterError, match=match):
            kind.normalize(bad)


def test_tiny_sweep_runs_and_resumes(tmp_path, monkeypatch):
    cfg = SweepConfig.from_dict(TINY, where="test")
    real, ran = tn.stationary_order, []

    def flaky(tau, *a, **k):
        if len(ran) == 2:
            raise KeyboardInterrupt
        ran.append(tau)
        return real(tau, *a, **k)

    monkeypatch.setattr(tn, "stationary_order", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, tmp_path / "a", workers=1)
    monkeypatch.setattr(tn, "stationary_order", lambda tau, *a, **k: (ran.append(tau),
                                                                      real(tau, *a, **k))[1])
    summary = run_sweep(cfg, tmp_path / "a", workers=1)
    assert summary["ran"] == 2 and len(ran) == 4  # the two saved cells are not run again
    assert run_sweep(cfg, tmp_path / "a", workers=1)["ran"] == 0
    monkeypatch.setattr(tn, "stationary_order", real)
    run_sweep(cfg, tmp_path / "b", workers=1)
    order = ["ratio", "start"]
    resumed, straight = (load_table(tmp_path / w).drop(columns=list(_TIMING_COLUMNS))
                         .sort_values(order, ignore_index=True) for w in ("a", "b"))
    cols = [c for c in straight.columns if c not in ("sim_wall_s",)]
    assert resumed[cols].equals(straight[cols])
    assert set(straight["status"]) == {"ok"}
    assert ((straight["r"] > 0) & (straight["r"] <= 1)).all()
    assert (straight["tau"] / straight["tau_c"]).round(6).tolist() == [0.6, 0.6, 1.5, 1.5]


@pytest.mark.parametrize("size", ["tiny", "quick", "full"])
def test_packaged_sweeps_parse(size):
    cfg = SweepConfig.load(SWEEP_DIR / f"token-noise-{size}.toml")
    assert cfg.name == f"token-noise-{size}" and cfg.kind == "token_noise"
    assert all(c.params["tau"] > 0 for c in cfg.cells())


@pytest.mark.parametrize("size", ["tiny", "quick", "full"])
def test_packaged_sweeps_meet_the_step_rule(size):
    """Every packaged cell's scheme and step keep the threshold's step shift within the 1 % rule
    (the network scheme at the same dt = 0.05 breaks it: +1.3 % at beta = 1) and, for the SDE,
    the simulator's Euler bound tau^2 (d - 1) dt <= STEP_WARN at the cell's tau."""
    from tokensde.sim.sde import _STEP_WARN

    for c in SweepConfig.load(SWEEP_DIR / f"token-noise-{size}.toml").cells():
        p = c.params
        plan = tn._step_plan(p["beta"], p["d"], p["attention"], p["scheme"], p["dt"],
                            token_noise=p["tau"])
        assert plan.warning == "" and abs(plan.shift) <= tn._STEP_TOL, (p, plan)
        assert p["scheme"] == "network" or p["tau"] ** 2 * (p["d"] - 1) * p["dt"] <= _STEP_WARN
    net = tn._step_plan(1.0, 2, "usa", "network", 0.05)
    assert net.warning and net.shift == pytest.approx(0.0129, abs=5e-4)


@pytest.mark.slow
def test_report_section_at_tiny_size_checks_and_resumes(tmp_path):
    """The `token-noise` section (about 3 s at tiny size): ok, every row checked against the
    side of tau_c it lies on, the figure drawn; a second call reuses every cell."""
    import tokensde.study as study

    _, sections, _ = study.reproduce(tmp_path, "tiny", workers=1, only=["token-noise"])
    sec = sections[0]
    assert sec.status == "ok", sec.note
    (table,) = sec.tables
    assert [r[2] for r in table.rows] == [0.6, 1.0, 1.5] and not table.flagged
    assert table.rows[0][7] == pytest.approx(tn.mean_field_order(0.6 * tn.critical_token_noise(
        1.0, 2), 1.0, 2), rel=1e-9)
    assert (tmp_path / "figures" / "token-noise.png").stat().st_size > 20_000
    _, again, _ = study.reproduce(tmp_path, "tiny", workers=1, only=["token-noise"])
    assert again[0].provenance["reused"] is True and again[0].tables[0].rows == table.rows


def test_section_checks_fail_on_the_wrong_side():
    from tokensde.study.token_noise_section import _check_rows

    row = {"n": 256, "start": "uniform", "beta": 1.0, "d": 2, "attention": "usa", "se": 0.01}
    good = [{**row, "ratio": 0.6, "r": 0.95, "r2": 0.9, "n_r2": 230.0, "r_limit": 0.946},
            {**row, "ratio": 1.5, "r": 0.07, "r2": 0.007, "n_r2": 1.7, "r_limit": 0.0}]
    assert _check_rows(good) == ["", ""]
    bad = [{**good[0], "r": 0.2, "r2": 0.05, "n_r2": 12.0},
           {**good[1], "r": 0.8, "r2": 0.64, "n_r2": 160.0},
           {**good[1], "start": "ordered", "r": 0.3, "r2": 0.09, "n_r2": 4.0}]
    said = _check_rows(bad)
    assert "E r^2" in said[0] and "limit" in said[0] and "n E r^2" in said[1]
    assert "starts differ" in said[2]
