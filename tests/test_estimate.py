"""The central time estimate: the fit of `c0 x steps + c1 x work`, its predictions, the refusal
of a run estimated longer than TOKENSDE_MAX_HOURS (and --yes), the announcement on stderr, and
the calibration cache (corrupt, outdated, unwritable). No wall-time assertions: speed is
measured in benchmarks/bench_estimate.py."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from tokensde import Execution
from tokensde.cli import app
from tokensde.cli._common import check_run
from tokensde.io import calibration
from tokensde.io.calibration import cache_dir, cache_key, calibration_samples, time_model
from tokensde.model.params import ModelParams, ParameterError, TimeGrid
from tokensde.sim.budget import (
    CUDA_TIME_MODEL,
    DEFAULT_TIME_MODEL,
    Budget,
    BudgetError,
    TimeModel,
    check_budget,
    fit_time_model,
    format_seconds,
)
from tokensde.sim.simulate import simulation_budget

runner = CliRunner()
TRUE = TimeModel(4e-5, 3e-10)
# (steps, work) from fixed-cost-bound to work-bound, as the calibration's
DESIGN = [(400, 7e5), (300, 2e5), (80, 7e7), (100, 3e7), (16, 3e7), (1000, 1e9)]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder of this test only, calibration on."""
    monkeypatch.setenv("TOKENSDE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TOKENSDE_CALIBRATE", raising=False)
    return tmp_path / "cache" / "estimate.json"


def fake(model: TimeModel = TRUE, calls: list[int] | None = None):
    def samples():
        if calls is not None:
            calls.append(1)
        return [(s, w, model.seconds(s, w)) for s, w in DESIGN]
    return samples


# ----------------------------------------------------------------------------- the fit

def test_fit_recovers_known_coefficients():
    m = fit_time_model([(s, w, TRUE.seconds(s, w)) for s, w in DESIGN])
    assert m.c0 == pytest.approx(4e-5, rel=1e-9) and m.c1 == pytest.approx(3e-10, rel=1e-9)
    assert m.source == "calibrated on this machine"
    # multiplicative noise of +-20 %, alternating: still within 30 %
    noisy = [(s, w, TRUE.seconds(s, w) * (1.2 if i % 2 else 0.8))
             for i, (s, w) in enumerate(DESIGN)]
    m = fit_time_model(noisy)
    assert m.c0 == pytest.approx(4e-5, rel=0.3) and m.c1 == pytest.approx(3e-10, rel=0.3)


def test_fit_keeps_coefficients_non_negative_and_checks_its_samples():
    # times that fall with the work: the unconstrained c1 would be negative
    m = fit_time_model([(100, 1e6, 1e-2), (100, 1e8, 0.9e-2)])
    assert m.c1 == 0.0 and m.c0 == pytest.approx(0.95e-4, rel=0.1)
    m = fit_time_model([(0, 1e6, 1e-3), (0, 2e6, 2e-3)])  # no steps at all: c1 alone
    assert m.c0 == 0.0 and m.c1 == pytest.approx(1e-9)
    with pytest.raises(ParameterError, match="samples must hold at least 2 timed runs; got 1"):
        fit_time_model([(1, 1, 1)])
    for bad in [(1, 1, 0), (-1, 1, 1), (1, math.nan, 1)]:
        with pytest.raises(ParameterError, match=r"samples must be \(steps >= 0, work >= 0, "
                                                 r"seconds > 0\)"):
            fit_time_model([bad, (1, 1, 1)])


def test_prediction_grows_with_layers_and_n():
    def sec(n: int, layers: int, sampler: str = "auto") -> float:
        b = simulation_budget(ModelParams(n=n, d=3), TimeGrid.make(layers), 100,
                              execution=Execution(sampler=sampler))
        return DEFAULT_TIME_MODEL.seconds(b.steps, b.work)

    for sampler in ("auto", "full", "gram"):
        by_layers = [sec(8, L, sampler) for L in (1, 10, 100, 10_000)]
        assert by_layers == sorted(by_layers) and len(set(by_layers)) == 4
        # from n = d = 3 up: below it 'auto' takes the fast sampler, whose layer step costs more
        # (SAMPLER_STEPS) than the full one's it takes from n = d on
        by_n = [sec(n, 100, sampler) for n in (3, 4, 16, 64, 256)]
        assert by_n == sorted(by_n) and len(set(by_n)) == 5
    by_n = [sec(n, 100, "gram") for n in (2, 3)]
    assert by_n == sorted(by_n) and len(set(by_n)) == 2
    # the fixed cost per layer: 1e12 layers of a tiny run take years, not hours
    assert sec(2, 10**12) > 1e12 * DEFAULT_TIME_MODEL.c0


def test_format_seconds():
    assert [format_seconds(s) for s in (3.0, 192.0, 7200.0, 8.64e7)] == [
        "3 s", "3.2 min", "2 h", "1e+03 days"]


# ----------------------------------------------------------------------------- the check

def deep(layers: int = 10**12) -> Budget:
    return simulation_budget(ModelParams(n=2, d=3), TimeGrid.make(layers), 1,
                             execution=Execution(sampler="full"))


def test_a_trillion_layers_are_refused_naming_the_option_and_yes_lets_them_pass():
    b = deep()
    spell = {"layers": "--layers (or --time / --dt)"}
    with pytest.raises(BudgetError) as err:
        check_budget(b, flag=lambda k: spell.get(k, "--" + k), model=DEFAULT_TIME_MODEL)
    text = str(err.value)
    assert text.startswith("this simulation would take about ")
    days = float(text.split("about ")[1].split(" days")[0])
    assert 100 < days < 1e5  # 1e12 x 35 us: about 400 days on the default coefficients
    for needle in ("more than the 24 h limit (TOKENSDE_MAX_HOURS)", "--layers (or --time / --dt)",
                   "pass --yes", "TOKENSDE_MAX_HOURS=inf", "1000000000000 layers"):
        assert needle in text, (needle, text)
    seconds = check_budget(b, model=DEFAULT_TIME_MODEL, yes=True, warn=False)  # not refused
    assert seconds == pytest.approx(DEFAULT_TIME_MODEL.seconds(b.steps, b.work))
    # the limit in hours is the one compared
    small = deep(10**6)  # about 35 s
    with pytest.raises(BudgetError, match=r"more than the 0\.001 h limit"):
        check_budget(small, model=DEFAULT_TIME_MODEL, limit_h=1e-3)
    assert check_budget(small, model=DEFAULT_TIME_MODEL, limit_h=1.0, warn=False) < 3600


def test_the_command_refuses_a_trillion_layers_before_any_work():
    out = runner.invoke(app, ["simulate", "--n", "2", "--d", "3", "--runs", "1", "--layers",
                              "1000000000000"], env={"TOKENSDE_CALIBRATE": "0"})
    assert out.exit_code == 2, out.output
    text = out.output.strip()
    assert text.startswith("error: this simulation would take about ") and "days" in text
    assert "lower --runs, --layers (or --time / --dt), --n or --d, or pass --yes" in text


def test_check_run_prints_the_estimate_on_stderr(capsys, monkeypatch):
    monkeypatch.setenv("TOKENSDE_CALIBRATE", "0")
    b = deep(10**7)  # about 6 min on the default coefficients
    seconds = check_run(b, yes=False, flags={})
    err = capsys.readouterr().err.strip()
    assert err == (f"estimate: about {format_seconds(seconds)} (default coefficients "
                   "(TOKENSDE_CALIBRATE=0); measured/estimated within 3x in "
                   "benchmarks/bench_estimate.py)")
    check_run(deep(1000))  # well under a few seconds: nothing said
    assert capsys.readouterr().err == ""
    with pytest.raises(BudgetError, match="pass --yes"):
        check_run(deep())
    assert check_run(deep(), yes=True) > 86400 * 100
    assert capsys.readouterr().err.startswith("estimate: about ")


# ----------------------------------------------------------------------------- the cache

def test_calibrates_once_then_reads_the_cache(cache):
    calls: list[int] = []
    m = time_model(calibrate=fake(calls=calls))
    assert (m.c0, m.c1) == pytest.approx((TRUE.c0, TRUE.c1))
    assert m.source == "calibrated on this machine"
    doc = json.loads(cache.read_text())
    assert list(doc) == [cache_key()] and len(doc[cache_key()]["samples"]) == len(DESIGN)
    again = time_model(calibrate=fake(calls=calls))
    assert calls == [1] and (again.c0, again.c1) == pytest.approx((m.c0, m.c1))
    assert cache.parent == cache_dir()


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"%s": {"c0": -1, "c1": 1}}',
                                     '{"%s": {"c0": "x"}}', "\x00\xff"])
def test_a_corrupt_cache_is_replaced_not_a_crash(cache, content):
    cache.parent.mkdir(parents=True)
    cache.write_text(content.replace("%s", cache_key()) if "%s" in content else content)
    calls: list[int] = []
    m = time_model(calibrate=fake(calls=calls))
    assert calls == [1] and (m.c0, m.c1) == pytest.approx((TRUE.c0, TRUE.c1))
    doc = json.loads(cache.read_text())  # rewritten, readable
    assert doc[cache_key()]["c0"] == pytest.approx(TRUE.c0)
    if not content.startswith("{\""):
        assert "was replaced" in m.source


def test_a_version_change_recalibrates_and_drops_the_old_entries(cache, monkeypatch):
    calls: list[int] = []
    time_model(calibrate=fake(calls=calls))
    old = cache_key()
    monkeypatch.setattr(calibration, "__version__", "99.0")
    assert cache_key() != old and "tokensde 99.0" in cache_key()
    m = time_model(calibrate=fake(TimeModel(1e-4, 1e-9), calls=calls))
    assert calls == [1, 1] and m.c0 == pytest.approx(1e-4)
    assert list(json.loads(cache.read_text())) == [cache_key()]


def test_failures_fall_back_to_the_defaults_and_say_so(cache, monkeypatch):
    def broken():
        raise RuntimeError("no clock")

    m = time_model(calibrate=broken)
    assert (m.c0, m.c1) == (DEFAULT_TIME_MODEL.c0, DEFAULT_TIME_MODEL.c1)
    assert m.source == "default coefficients; calibration failed: RuntimeError: no clock"
    assert not cache.exists()
    m = time_model(calibrate=lambda: [(1, 0, 1.0), (2, 0, 2.0)])  # c1 = 0 is kept, a valid fit
    assert m.c0 == pytest.approx(1.0)
    monkeypatch.setenv("TOKENSDE_CALIBRATE", "0")
    assert time_model().source == "default coefficients (TOKENSDE_CALIBRATE=0)"
    assert time_model("cuda:0") == CUDA_TIME_MODEL


def test_an_unwritable_cache_still_gives_a_model(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TOKENSDE_CACHE_DIR", str(blocker / "sub"))  # a folder under a file
    m = time_model(calibrate=fake())
    assert m.c0 == pytest.approx(TRUE.c0) and m.source == "calibrated on this machine"

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(calibration, "cache_dir", no_home)
    assert time_model(calibrate=fake()).c0 == pytest.approx(TRUE.c0)


def test_cache_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("TOKENSDE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "tokensde"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir().parts[-2:] == (".cache", "tokensde")


def test_the_real_calibration_gives_positive_samples_and_a_fit(cache):
    samples = calibration_samples(repeats=1)
    assert len(samples) == len(calibration._CASES)
    assert all(s > 0 and w > 0 and t > 0 for s, w, t in samples)
    m = fit_time_model(samples)
    assert m.c0 > 0 or m.c1 > 0


def test_a_sweep_cell_estimated_too_long_is_refused_unless_yes():
    from tokensde.sweep.config import Cell
    from tokensde.sweep.engine import _check_cells

    cell = Cell(0, "c0", {"n": 2, "T": 1e9}, 0)
    budgets = [(cell, deep())]
    with pytest.raises(BudgetError, match=r"cell 0 \(c0, .*\): this simulation would take about "
                                          r".* days .*pass --yes"):
        _check_cells(budgets, 1, have=2**40, model=DEFAULT_TIME_MODEL)
    one = DEFAULT_TIME_MODEL.seconds(budgets[0][1].steps, budgets[0][1].work)
    # the cells' sum over the workers, and never less than the longest cell
    two = [*budgets, (Cell(1, "c1", {"n": 2, "T": 1e9}, 1), deep())]
    for cells, workers, want in [(budgets, 2, one), (two, 1, 2 * one), (two, 2, one),
                                 (two, 4, one)]:
        assert _check_cells(cells, workers, have=2**40, model=DEFAULT_TIME_MODEL, yes=True,
                           warn=False) == pytest.approx(want)


@pytest.mark.parametrize("command", [["simulate"], ["two-token", "mc"], ["two-token", "hybrid"],
                                     ["sweep", "run"], ["meanfield", "table"],
                                     ["real", "torch-encoder"], ["figure"], ["reproduce"]])
def test_the_long_commands_take_yes(command):
    out = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "--yes" in out.output and "TOKENSDE_MAX_HOURS" in out.output
