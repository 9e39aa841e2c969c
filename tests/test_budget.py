"""Memory and time estimates before a run (issue 24): the estimates against the arrays a run
really holds, the work by hand, the refusals by name before any work, the sweep's memory-based
worker cap, and the SDE step warning as the command line shows it (the time model itself:
tests/test_estimate.py)."""

from __future__ import annotations

import math
import os
import time
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from tokensde import Execution, Recording
from tokensde.cli import app
from tokensde.model.params import ModelParams, ParameterError, TimeGrid
from tokensde.sim.budget import (
    CPU_RATE,
    GIB,
    Budget,
    BudgetError,
    BudgetWarning,
    TimeModel,
    available_memory,
    cgroup_room,
    check_budget,
    cpu_rate,
    estimate_memory,
    estimate_work,
    max_hours,
    meminfo_available,
    parse_bytes,
)
from tokensde.sim.sde import _check_sde_step
from tokensde.sim.simulate import simulate, simulation_budget

runner = CliRunner()
SIM = ["simulate", "--json", "--n", "8", "--d", "3", "--runs", "1000", "--layers", "10"]


def invoke(args: list[str], env: dict[str, str] | None = None) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = runner.invoke(app, args, env=env)
    return out, time.perf_counter() - t0


def refused(args: list[str], env: dict[str, str], *needles: str) -> str:
    """The CLI refuses `args` in under a second (the second time: the modules are imported):
    exit 2, one `error:` line naming every needle, no traceback."""
    invoke(args, env)
    out, wall = invoke(args, env)
    text = out.output.strip()
    assert out.exit_code == 2, out.output
    assert "Traceback" not in out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert text.startswith("error: ") and "\n" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    assert wall < 1.0, wall
    return text


# ----------------------------------------------------------------------------- the estimates

def test_estimate_memory_by_hand():
    # 10 runs, n = 4, width 3, 5 checkpoints: state 10*12, Gram 10*5*16 = 920 numbers kept;
    # workspace of 10 runs: 4*12 + 16 + 2*4*4 = 96 numbers each
    m = estimate_memory(10, 4, 3, 5, block=10)
    assert m == (920 * 8, 960 * 8) and m.total == 1880 * 8
    # tokens too, float32: + 10*5*4*3 = 600 numbers kept
    assert estimate_memory(10, 4, 3, 5, block=10, record=("gram", "tokens"), itemsize=4).kept \
        == 1520 * 4
    # the full sampler holds width^2 per run, two heads one more output and noise each
    assert estimate_memory(1, 4, 3, 2, block=1, full=True, heads=2).workspace \
        == (48 + 16 + 9 + 12 + 9) * 8


def test_kept_memory_is_what_a_run_holds():
    """The kept part of the estimate is exactly the bytes of the arrays a simulation returns."""
    p = ModelParams(n=5, d=4)
    res = simulate(p, TimeGrid.make(layers=6), runs=7, seed=1,
                   recording=Recording(checkpoints=3, record=("gram", "tokens")),
                   execution=Execution(sampler="fast"))
    b = estimate_memory(7, 5, 4, 3, block=0, record=("gram", "tokens"))
    assert b.kept == res.x.nbytes + res.gram.nbytes + res.tokens.nbytes
    budget = simulation_budget(p, TimeGrid.make(layers=6), 7,
                               recording=Recording(checkpoints=3, record=("gram", "tokens")),
                               execution=Execution(sampler="fast"))
    # the fast sampler with n >= d draws V itself (d x d per run), no n x n factor
    assert budget.memory - budget.per_run * 7 == estimate_memory(7, 5, 4, 3, block=7,
                                                                 full=True).workspace
    small = simulation_budget(p.with_(n=3), TimeGrid.make(layers=6), 7,
                              recording=Recording(checkpoints=3, record=("gram", "tokens")),
                              execution=Execution(sampler="fast"))
    assert small.memory - small.per_run * 7 == estimate_memory(7, 3, 4, 3, block=7).workspace


def test_work_and_steps_by_hand():
    # per run and layer: heads n (w (n + w) + 25 n) + 1500 + mlp
    assert estimate_work(3, 10, 4, 5) == 3 * 10 * (4 * (5 * 9 + 25 * 4) + 1500)
    assert estimate_work(1, 1, 2, 2, heads=3, mlp=7) == 3 * 2 * (2 * 4 + 25 * 2) + 1500 + 7
    # the O(n) attention of R basis functions: n (8 R (1 + w) + w^2)
    assert estimate_work(2, 3, 100, 3, basis=10) == 6 * (100 * (8 * 10 * 4 + 9) + 1500)
    # a layer step per layer and batch of runs, 3 with the Gram and fast (n < d) samplers
    p = ModelParams(n=8, d=3)
    assert simulation_budget(p, TimeGrid.make(layers=50), 10, execution=Execution(sampler="full")).steps == 50
    assert simulation_budget(p, TimeGrid.make(layers=50), 10,
                             execution=Execution(sampler="gram")).steps == 150
    assert simulation_budget(p.with_(n=2), TimeGrid.make(layers=50), 10,
                             execution=Execution(sampler="fast")).steps == 150
    assert cpu_rate(3) == 3 * CPU_RATE


def test_available_memory_reads_meminfo_cgroup_and_the_override(tmp_path, monkeypatch):
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable:   2048 kB\n")
    assert meminfo_available(str(tmp_path / "meminfo")) == 2048 * 1024
    assert meminfo_available(str(tmp_path / "none")) is None
    (tmp_path / "memory.max").write_text("1000000\n")
    (tmp_path / "memory.current").write_text("400000\n")
    assert cgroup_room(str(tmp_path)) == 600000
    (tmp_path / "memory.max").write_text("max\n")
    assert cgroup_room(str(tmp_path)) is None
    monkeypatch.setenv("TOKENSDE_MEMORY", "1.5G")
    assert available_memory() == 3 * 2**29
    assert [parse_bytes(t) for t in ("512", "2K", "3MiB", "1gb")] == [512, 2048, 3 * 2**20, 2**30]
    for bad in ("0", "-1G", "x", "nanG", "1Q"):
        with pytest.raises(ParameterError, match="TOKENSDE_MEMORY must be a positive byte count"):
            parse_bytes(bad)
    monkeypatch.delenv("TOKENSDE_MEMORY")
    assert 0 < available_memory() <= 2**60


def test_max_hours(monkeypatch):
    assert max_hours() == 24.0
    monkeypatch.setenv("TOKENSDE_MAX_HOURS", "inf")
    assert max_hours() == math.inf
    for bad in ("0", "-2", "x", "nan"):
        monkeypatch.setenv("TOKENSDE_MAX_HOURS", bad)
        with pytest.raises(ParameterError, match="TOKENSDE_MAX_HOURS must be a number of hours"):
            max_hours()


# ----------------------------------------------------------------------------- the check

B = Budget("this run", memory=10 * GIB + 100, per_run=GIB, runs=10, work=7.2e13,
           detail="10 runs", lower=("runs", "n"), longer=("runs", "layers"))


def test_memory_refusal_names_the_numbers_and_how_many_runs_fit():
    with pytest.raises(BudgetError) as err:
        check_budget(B, have=int(4.5 * GIB), flag=lambda k: "--" + k)
    assert str(err.value) == ("this run needs at least 10 GiB of cpu memory (10 runs), more "
                              "than the 4.5 GiB available: lower --runs (4 fit at these sizes), --n")
    with pytest.raises(BudgetError, match=r"lower runs \(not even one fits\)"):
        check_budget(B, have=GIB)
    assert B.most_runs(10 * GIB + 100) == 10  # exactly the memory: all of them


def test_time_refusal_and_warning():
    # 7.2e13 units at 1e10/s: 7200 s = 2 h
    with pytest.raises(BudgetError, match=r"would take about 2 h \(7\.2e\+13 work units at "
                                          r"1e\+10/s; 10 runs\), more than the 1 h limit "
                                          r"\(TOKENSDE_MAX_HOURS\): lower runs or layers, or "
                                          r"pass --yes"):
        check_budget(B, have=11 * GIB, rate=1e10, limit_h=1.0)
    with pytest.warns(BudgetWarning, match=r"will take about 2 h"):
        assert check_budget(B, have=11 * GIB, rate=1e10, limit_h=3.0) == pytest.approx(7200)
    # a model: c0 x steps + c1 x work, 3600 + 3600 s
    timed = Budget(**{**B.__dict__, "steps": 3600 / 1e-4})
    model = TimeModel(1e-4, 1 / 2e10, "a test model")
    with pytest.raises(BudgetError, match=r"would take about 2 h \(a test model; 10 runs\)"):
        check_budget(timed, have=11 * GIB, model=model, limit_h=1.0)
    assert check_budget(timed, have=11 * GIB, model=model, limit_h=1.0, yes=True,
                        warn=False) == pytest.approx(7200)
    unbounded = Budget(**{**B.__dict__, "bounded": False})
    with pytest.warns(BudgetWarning, match="will take up to about 2 h"):
        check_budget(unbounded, have=11 * GIB, rate=1e10, limit_h=1.0)  # a bound: not refused
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_budget(B, have=11 * GIB, rate=1e12, limit_h=1.0)  # 72 s: silent


# ----------------------------------------------------------------------------- the commands

def test_simulate_memory_refusal_before_any_work(tmp_path):
    have = 2**20
    text = refused([*SIM, "--out", str(tmp_path / "r.npz")], {"TOKENSDE_MEMORY": "1M"},
                   "this simulation needs at least", "GiB of cpu memory", "(1000 runs, n = 8, "
                   "d = 3", "more than the 0.000977 GiB available: lower --runs (",
                   "--n, --d or --checkpoints")
    k = int(text.split("lower --runs (")[1].split()[0])
    b = simulation_budget(ModelParams(n=8, d=3), TimeGrid.make(layers=10), 1000,
                          recording=Recording(checkpoints=11))
    # k runs, with the workspace of 1000, fit; k + 1 do not
    assert b.memory - b.per_run * (1000 - k) <= have < b.memory - b.per_run * (999 - k)
    assert not list(tmp_path.iterdir())
    ok, _ = invoke([*SIM[:7], str(k), *SIM[8:]], {"TOKENSDE_MEMORY": "1M"})
    assert ok.exit_code == 0, ok.output  # the number it names does fit


def test_simulate_time_refusal_and_the_undecided_bound(tmp_path):
    out = tmp_path / "r.npz"
    refused([*SIM, "--out", str(out)], {"TOKENSDE_MAX_HOURS": "1e-9"},
            "this simulation would take about ", "calibrated on this machine", "more than the "
            "1e-09 h limit (TOKENSDE_MAX_HOURS): lower --runs, --layers (or --time / --dt), --n "
            "or --d, or pass --yes (or set TOKENSDE_MAX_HOURS=inf) to run it anyway")
    ok = runner.invoke(app, [*SIM, "--yes"], env={"TOKENSDE_MAX_HOURS": "1e-9"})
    assert ok.exit_code == 0 and "error" not in ok.stderr, ok.output  # --yes: run anyway
    assert not out.exists()
    # with --until decided the layers are a maximum, its work a bound: not refused
    res = runner.invoke(app, [*SIM, "--until", "decided", "--out", str(out)],
                        env={"TOKENSDE_MAX_HOURS": "1e-9"})
    assert res.exit_code == 0 and "error" not in res.stderr, res.output
    assert out.exists()


def test_two_token_and_meanfield_refusals(tmp_path):
    env = {"TOKENSDE_MEMORY": "1K"}
    refused(["two-token", "mc", "--beta", "1", "--d", "3", "--runs", "100", "--time", "1",
             "--out", str(tmp_path / "m.json")], env,
            "this Monte Carlo needs at least", "lower --runs (", "), --d")
    refused(["two-token", "mc", "--beta", "1", "--d", "3", "--runs", "100", "--time", "1",
             "--engine", "reduced"], env, "(100 runs, 60 layers, reduced engine)",
            "lower --runs (16 fit at these sizes)")  # 1024 bytes // 64 a run; dt = 0.05 / 3
    refused(["two-token", "hybrid", "--beta", "1", "--eps", "0.5", "--runs", "100"], env,
            "this Monte Carlo needs at least")
    refused(["two-token", "mc", "--beta", "1", "--d", "3", "--runs", "100", "--time", "1",
             "--until", "horizon"], {"TOKENSDE_MAX_HOURS": "1e-12"},
            "lower --runs, --time or --d")
    refused(["meanfield", "table", "--runs", "4", "--K", "16", "--out", str(tmp_path / "mf")],
            env, "this table needs at least", "lower --runs (not even one fits), --K, --n or --d")
    assert not list(tmp_path.iterdir())


def test_real_refusal(tmp_path):
    refused(["real", "torch-encoder", "--inits", "4", "--out", str(tmp_path / "r")],
            {"TOKENSDE_MEMORY": "10M"}, "this torch-encoder run needs at least 0.0419 GiB",
            "(4 inits x 2 inputs, 12 layers, width 256, 64 tokens, vocabulary 1024)",
            "lower --inits (not even one fits), --inputs, --layers, --width, --ctx, --vocab or "
            "--sde-runs")
    assert not list(tmp_path.iterdir())


def test_normal_sizes_are_not_refused(monkeypatch):
    """The sizes of the quick reproduction and the docs pass the checks with room to spare."""
    from tokensde.sweep.kinds import get_kind

    monkeypatch.delenv("TOKENSDE_MEMORY", raising=False)
    monkeypatch.delenv("TOKENSDE_MAX_HOURS", raising=False)
    have = available_memory()
    p = ModelParams(n=32, d=64)
    b = simulation_budget(p, TimeGrid.make(layers=1000), 1000, recording=Recording(checkpoints=11))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_budget(b, have)
    k = get_kind("multi_token")
    cell = k.normalize({"n": 32, "d": 16, "beta": 1.0, "runs": 2000, "T": 10.0})
    assert k.budget(cell).memory < 2**30


# ----------------------------------------------------------------------------- sweeps

SWEEP = ("kind = 'multi_token'\nruns = 20\nT = 0.1\nseed = 3\n[grid]\nn = [4]\nd = [3]\n"
         "beta = [1.0, 2.0, 3.0]\n")


def test_worker_bounds():
    from tokensde.sweep.backends import _worker_bounds, _worker_cap

    b = _worker_bounds(8, 5, cell_bytes=100, have=250)
    assert b["asked"] == 8 and b["cells"] == 5 and b["memory"] == 2
    assert _worker_cap(8, 5, cell_bytes=100, have=250) == min(2, b["cpus"])
    assert _worker_cap(8, 5, cell_bytes=100, have=50) == 1  # never 0
    assert "memory" not in _worker_bounds(8, 5, "ray", "1.2.3.4:6379", cell_bytes=100, have=50)


def test_sweep_workers_capped_by_memory_and_reported(tmp_path, monkeypatch):
    from tokensde.sweep.config import SweepConfig
    from tokensde.sweep.engine import _cell_budgets, run_sweep

    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    c = SweepConfig.load(cfg)
    need = max(b.memory for _, b in _cell_budgets(c, c.cells()))
    monkeypatch.setenv("TOKENSDE_MEMORY", str(need + need // 2))  # one cell at a time
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s = run_sweep(cfg, tmp_path / "out", workers=4)
    said = [str(w.message) for w in seen if issubclass(w.category, BudgetWarning)]
    if (os.cpu_count() or 1) > 1:  # memory, not the CPUs, set the count: said so
        assert said == [f"1 worker of 4 asked: a cell needs up to {need / GIB:.3g} GiB, "
                        f"{(need + need // 2) / GIB:.3g} GiB available"], said
    assert s["workers"] == 1 and s["workers_asked"] == 4 and s["workers_bounds"]["memory"] == 1
    assert s["done"] == 3 and s["cell_memory_gib"] == pytest.approx(need / GIB)


def test_sweep_refuses_a_cell_that_cannot_fit_before_making_its_directory(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP.replace("runs = 20", "runs = 100000"))
    out = tmp_path / "out"
    text = refused(["sweep", "run", str(cfg), "--out", str(out)], {"TOKENSDE_MEMORY": "1M"},
                   "error: cell 0 (", "this simulation needs at least", "lower runs (")
    assert text.endswith("fit at these sizes), n or d")  # the parameters of a sweep cell
    assert not out.exists()


# ----------------------------------------------------------------------------- the SDE step

def test_sde_step_warning_names_the_number_the_threshold_and_dt():
    p = ModelParams(n=3, d=40)
    with pytest.warns(RuntimeWarning, match=r"sigma\^2 \(d - 1\) dt = 0\.39 .* > 0\.2: the Euler "
                                            r"step is biased .*choose dt <= 0\.00513 \(--dt"):
        assert _check_sde_step(p, 0.01) == pytest.approx(0.39)
    with pytest.warns(RuntimeWarning, match=r"= 3\.9 .*reverses the token"):
        _check_sde_step(p, 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _check_sde_step(p, 0.005) == pytest.approx(0.195)  # below 0.2: silent


def test_cli_shows_the_sde_warning_as_one_line_before_the_run():
    out = runner.invoke(app, ["simulate", "--json", "--scheme", "sde", "--n", "3", "--d", "40",
                              "--dt", "0.01", "--time", "0.02", "--runs", "4"])
    assert out.exit_code == 0, out.output
    assert out.stderr.strip().splitlines() == [
        "warning: scheme='sde' with sigma^2 (d - 1) dt = 0.39 (noise scale^2 1, d = 40, dt = "
        "0.01) > 0.2: the Euler step is biased (too little motion); choose dt <= 0.00513 (--dt: "
        "more layers for the same depth time)"]
    assert np.isfinite(__import__("json").loads(out.stdout)["mean_inner_product"])
