"""The bad-input probe of issue 15: every bad input ends in one clear line (exit 2, no traceback)
that names the input and what is allowed, and nothing already computed is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tokensde import Execution, InitialState, Recording
from tokensde.cli import app
from tokensde.io.store import StoreError, load_result, save_result
from tokensde.model.params import ModelParams, ParameterError, TimeGrid
from tokensde.sim.simulate import _resolve_checkpoints, simulate
from tokensde.sweep.config import SweepError
from tokensde.sweep.engine import run_sweep, sweep_status

runner = CliRunner()
S = ["simulate", "--json", "--n", "3", "--d", "3", "--runs", "10"]
T1 = ["--time", "1", "--dt", "0.1"]
ROOT = Path(__file__).resolve().parents[1]
SMALL = """
kind = "multi_token"
runs = 16
T = 0.5
seed = 3
[params]
dt = 0.05
[grid]
n = [3]
beta = [1.0, 2.0]
d = [3]
"""


def error_line(args: list[str], *needles: str, code: int = 2) -> str:
    """Run the CLI; check the exit code and that the output is one `error:` line holding every
    needle; return that line."""
    out = runner.invoke(app, args)
    text = out.output.strip()
    assert out.exit_code == code, out.output
    assert "Traceback" not in out.output, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert text.startswith("error: ") and "\n" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


# ----------------------------------------------------------------------------- silently wrong

@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--checkpoints", "1"], ["checkpoints", "[2, layers + 1", "got 1"]),
        (["--tol", "2"], ["tol must be a number in [1e-12, 0.5]", "got 2.0"]),
        (["--tol", "nan"], ["tol must be a finite number", "nan"]),
        (["--dtype", "float32", "--tol", "1e-9"], ["tol must be a number in [0.000119209",
                                                   "float32", "got 1e-09"]),
        (["--eps", "0.5"], ["--eps applies only with --noise scalar", "got --noise matrix"]),
    ],
)
def test_simulate_rejects_silently_wrong_options(extra, needles):
    error_line([*S, *T1, *extra], *needles)


def test_horizon_is_never_changed_silently():
    error_line([*S, "--time", "1", "--dt", "0.3"], "T = 1", "dt = 0.3", "T = 1.2", "0.25")
    error_line([*S, "--alpha", "0.3"], "--alpha applies only with --layers", "got no --layers")
    error_line([*S, "--dt", "0.1"], "--dt applies only with --time", "got no --time")
    with pytest.raises(ParameterError, match=r"time must be given as \(layers, alpha\) or "
                       r"\(T, dt\); got \{'dt': 0.1\}"):
        TimeGrid.make(dt=0.1)  # the library names what it got, and no layers
    with pytest.raises(ParameterError, match=r"T must be a whole number of layer steps"):
        TimeGrid.make(T=1.0, dt=0.3)  # the library refuses it too, unless asked to round up
    assert TimeGrid.make(T=1.0, dt=0.3, exact=False).steps == 4
    assert TimeGrid.make(T=1.0, dt=0.1, exact=False) == TimeGrid.make(T=1.0, dt=0.1)


def test_valid_float32_tolerance_still_runs():
    out = runner.invoke(app, [*S, *T1, "--dtype", "float32", "--tol", "1e-3"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["layers"] == 10


def test_inputs_are_not_changed_silently(tmp_path):
    np.save(tmp_path / "c.npy", np.eye(3) * (1 + 1j))
    error_line([*S, *T1, "--mean", str(tmp_path / "c.npy")], "mean", "c.npy", "complex")
    with pytest.raises(ParameterError, match="mean must be an array of real numbers"):
        ModelParams(n=3, d=3, mean=np.eye(3) * (1 + 1j))
    p = ModelParams(n=3, d=3)
    with pytest.raises(ParameterError, match=r"checkpoints must be layer indices .*2\.5"):
        simulate(p, TimeGrid.make(layers=5), recording=Recording(checkpoints=[2.5]))
    assert _resolve_checkpoints([2.0, 5], 5).tolist() == [2, 5]  # whole numbers are fine
    # batch 0 is rejected like -5, before any data set is read
    for bad in ("0", "-5"):
        error_line(["vit", "compare", "--batch-size", bad, "--out", str(tmp_path / "vit")],
                   "batch_size must be an integer >= 1", f"got {bad}")
    assert not (tmp_path / "vit").exists()


# ----------------------------------------------------------------------------- raw tracebacks

@pytest.mark.parametrize("extra", [["--n", "100000000"], ["--d", "100000", "--sampler", "full"]])
def test_sizes_too_large_name_the_memory_needed(extra):
    error_line([*S, *T1, *extra], "this simulation needs at least", "GiB of cpu memory",
               "GiB available: lower --runs (", "--n, --d or --checkpoints")


def test_gram_sampler_from_a_uniform_start_is_not_refused_for_a_huge_d():
    """The Gram sampler from a uniform start holds nothing of size d (issue 13), so the memory
    bound must not count d; from a given pair it does hold d-vectors, and is refused."""
    from tokensde import ModelParams, ParameterError, simulate

    p = ModelParams(n=8, d=10**9)
    res = simulate(p, TimeGrid.make(layers=3), runs=2000, seed=0, execution=Execution(sampler="gram"))
    assert res.gram.shape == (2000, 2, 8, 8)  # start and end
    np.testing.assert_allclose(np.diagonal(res.gram, axis1=-2, axis2=-1), np.ones((2000, 2, 8)))
    with pytest.raises(ParameterError, match="needs at least"):
        simulate(ModelParams(n=2, d=10**9), TimeGrid.make(layers=3), runs=2000,
                 initial=InitialState.pair(0.5), execution=Execution(sampler="gram"))


@pytest.fixture
def paths(tmp_path):
    """A directory, and a file with content that must survive."""
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("keep me")
    yield tmp_path
    assert (tmp_path / "afile").read_text() == "keep me"
    assert not any((tmp_path / "adir").iterdir())


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    cfg = tmp / "small.toml"
    cfg.write_text(SMALL)
    run_sweep(cfg, tmp / "out")
    return cfg, tmp / "out"


def test_output_paths_that_are_a_directory_or_under_a_file(paths, finished_sweep):
    d, f = str(paths / "adir"), str(paths / "afile" / "x")
    for opt in ("--out", "--plot"):
        error_line([*S, *T1, opt, d], f"{opt} must be a file path", "is a directory")
        error_line([*S, *T1, opt, f], f"{opt} must be a file path", "which is a file")
    cfg, out = finished_sweep
    table = (out / "table.parquet").read_bytes()
    error_line(["sweep", "table", str(out), "--output", d], "--output must be a file path")
    error_line(["sweep", "table", str(out), "--format", "csv", "--output", f], "--output",
               "which is a file")
    assert (out / "table.parquet").read_bytes() == table
    error_line(["sweep", "run", str(cfg), "--out", f], "--out must be a directory",
               "which is a file")
    error_line(["sweep", "run", str(cfg), "--out", str(paths / "afile")],
               "--out must be a directory", "is a file")
    error_line(["figure", "theory-vs-simulation", "--out", str(paths / "afile")],
               "--out must be a directory")
    error_line(["figure", "theory-vs-simulation", "--out", f], "--out must be a directory")


def test_sweep_config_that_is_not_a_sweep_file(tmp_path):
    bad = tmp_path / "p5.toml"
    bad.write_text('kind = "multi_token"\nseed = 1\nparams = 5\n[grid]\nn = [3]\n')
    error_line(["sweep", "run", str(bad), "--out", str(tmp_path / "o")],
               "p5.toml: params must be a table ([params])", "got 5")
    error_line(["sweep", "run", str(tmp_path), "--out", str(tmp_path / "o")],
               "is a directory; give the sweep's TOML file")
    assert not (tmp_path / "o").exists()


def test_load_result_with_missing_fields(tmp_path):
    res = simulate(ModelParams(n=3, d=3), TimeGrid.make(layers=5), runs=2)
    save_result(res, tmp_path / "r.npz")
    z = dict(np.load(tmp_path / "r.npz"))
    meta = json.loads(str(z["meta"]))
    del meta["seed"]
    np.savez(tmp_path / "m.npz", **{**z, "meta": np.array(json.dumps(meta))})
    with pytest.raises(StoreError, match=r"m\.npz lacks the field 'seed'"):
        load_result(tmp_path / "m.npz")
    del z["checkpoints"]
    np.savez(tmp_path / "c.npz", **z)
    with pytest.raises(StoreError, match=r"c\.npz lacks the field 'checkpoints'"):
        load_result(tmp_path / "c.npz")


def test_api_misuse_gets_clear_errors():
    p = ModelParams(n=3, d=3)
    with pytest.raises(TypeError, match=r"params must be a ModelParams .* got dict"):
        simulate({"n": 3}, TimeGrid.make(layers=5))
    with pytest.raises(TypeError, match=r"grid must be a TimeGrid: .*layers=L.* got 10"):
        simulate(p, 10)
    with pytest.raises(TypeError, match="progress must be None or a callable"):
        simulate(p, TimeGrid.make(layers=5), progress=True)
    with pytest.raises(ParameterError, match="Q must be an array of real numbers"):
        ModelParams(n=3, d=3, Q=[[1, 0, 0], [0, 1], [0, 0, 1]])
    with pytest.raises(ParameterError, match=r"checkpoints must be layer indices .*'all'"):
        simulate(p, TimeGrid.make(layers=5), recording=Recording(checkpoints="all"))
    # a horizon that is not a whole number of steps is refused where it is made
    with pytest.raises(ParameterError, match=r"T = 1, dt = 0.3 .*T = 1.2.*0.25 \(4 layers\)"):
        TimeGrid.make(T=1.0, dt=0.3)
    assert TimeGrid.make(T=1.0, dt=0.3, exact=False).steps == 4  # rounding up, when asked for
    assert simulate(p, TimeGrid.make(T=1.0, dt=0.25)).gram.shape[1] == 2  # a whole number of steps runs
    with pytest.raises(ParameterError, match=r"checkpoints .* from 2|checkpoints .*\[2, layers"):
        simulate(p, TimeGrid.make(layers=3), recording=Recording(checkpoints=10))
    with pytest.raises(ParameterError, match="pairs must be True or False; got 'no'"):
        simulate(p, TimeGrid.make(layers=2)).to_pandas(pairs="no")


# ----------------------------------------------------------------------------- misleading

def test_usa_beta_bound_matches_the_dtype():
    error_line([*S, *T1, "--attention", "usa", "--beta", "400"],
               "beta (attention=usa, float64) must be <= 345", "got 400.0")
    line = error_line([*S, *T1, "--attention", "usa", "--beta", "100", "--dtype", "float32",
                       "--tol", "1e-3"],  # the default tol, 1e-8, is below float32's floor
                      "beta (attention=usa, float32) must be <= 39", "float64 allows <= 345")
    assert "use float64" not in line
    # at the bounds the runs stay finite
    for beta, dtype in ((345.0, "float64"), (39.0, "float32")):
        res = simulate(ModelParams(n=3, d=3, beta=beta, attention="usa"), TimeGrid.make(T=1.0, dt=0.1),
                       runs=20, seed=1, execution=Execution(dtype=dtype))
        assert bool(np.isfinite(res.gram).all())


def test_bad_array_files_name_the_option_and_the_file(tmp_path):
    (tmp_path / "bad.npy").write_text("garbage")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object))
    np.savez(tmp_path / "z.npz", a=np.eye(3))
    for opt in ("--mean", "--init"):
        for name in ("bad.npy", "obj.npy", "z.npz"):
            line = error_line([*S, *T1, opt, str(tmp_path / name)], opt[2:], name)
            assert "pickle" not in line


def test_truncated_saved_files_name_the_file_and_the_remedy(tmp_path, finished_sweep):
    (tmp_path / "summary.json").write_text('{"kind": "tokensde.vit')
    error_line(["vit", "plot", "--out", str(tmp_path)], "summary.json",
               "truncated or corrupt", "re-run `tokensde vit compare --out")
    _, out = finished_sweep
    copy = tmp_path / "sw"
    copy.mkdir()
    for p in out.rglob("*"):
        if p.is_file():
            (copy / p.relative_to(out)).parent.mkdir(exist_ok=True)
            (copy / p.relative_to(out)).write_bytes(p.read_bytes())
    data = (copy / "table.parquet").read_bytes()
    (copy / "table.parquet").write_bytes(data[:300])
    error_line(["sweep", "table", str(copy)], "table.parquet", "delete it",
               f"tokensde sweep table {copy}")
    assert (copy / "table.parquet").read_bytes() == data[:300]  # not replaced silently
    (copy / "table.parquet").unlink()
    out2 = runner.invoke(app, ["sweep", "table", str(copy)])
    assert out2.exit_code == 0 and json.loads(out2.output)["rows"] == 2


def test_two_token_prob_wording():
    out = runner.invoke(app, ["two-token", "prob", "--beta", "0.1", "--d", "4", "--rho0", "-1"])
    assert out.exit_code == 0, out.output
    assert "= 1\n" in out.output and "pairs merge almost surely" not in out.output
    assert "stays antipodal" in out.output
    from tokensde.theory.two_tokens import beta_c

    for d in (4.0, 3.5):  # one ulp above beta_c: P_anti is 0 to rounding (not -0.0, not nan)
        above = float(np.nextafter(beta_c(d), 10.0))
        for extra in ([], ["--json"]):
            out = runner.invoke(app, ["two-token", "prob", "--beta", repr(above), "--d", str(d),
                                      "--rho0", "0", *extra])
            assert out.exit_code == 0, out.output
            assert "= -0" not in out.output and "nan" not in out.output.lower(), out.output
            value = (json.loads(out.output)["p_anti"] if extra else
                     float(out.output.split(" = ")[1].split()[0]))
            assert 0.0 <= value < 1e-12, out.output


# ----------------------------------------------------------------------------- interruptions

SLOW = """
kind = "multi_token"
runs = 2048
T = 6.0
seed = 5
[params]
dt = 0.02
[grid]
n = [3, 4, 5, 6]
d = [3, 8]
beta = [0.5, 1.0, 4.0]
"""


def _session(pgid: int) -> list[str]:
    """Live (not zombie) processes of session/group `pgid`."""
    ps = subprocess.run(["ps", "-eo", "pgid=,stat=,pid="], capture_output=True, text=True).stdout
    return [ln for ln in ps.splitlines()
            if ln.split()[0] == str(pgid) and not ln.split()[1].startswith("Z")]


def _start_sweep(tmp: Path) -> tuple[subprocess.Popen, Path]:
    cfg = tmp / "slow.toml"
    cfg.write_text(SLOW)
    out = tmp / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from tokensde.cli import main; main()", "sweep", "run", str(cfg),
         "--out", str(out), "--workers", "2", "--quiet"], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list((out / "cells").glob("*.parquet"))) >= 2 if (out / "cells").is_dir() else 0:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep finished before it could be interrupted"
    return proc, out


def _gone(pgid: int, within: float = 10.0) -> list[str]:
    deadline = time.monotonic() + within
    while _session(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _session(pgid)


@pytest.mark.parametrize(("sig", "group", "code", "name"), [
    (signal.SIGTERM, False, 143, "SIGTERM"),
    (signal.SIGINT, True, 130, "SIGINT"),
    (signal.SIGKILL, False, -signal.SIGKILL, None),
])
@pytest.mark.slow
def test_interrupted_sweep_keeps_cells_and_leaves_no_process(tmp_path, sig, group, code, name):
    proc, out = _start_sweep(tmp_path)
    try:
        (os.killpg if group else os.kill)(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
        left = _gone(proc.pid)
    finally:
        if _session(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err
    assert not left, f"processes outlived the sweep: {left}"
    done = len(list((out / "cells").glob("*.parquet")))
    assert done >= 2
    if name is not None:
        assert err.strip().count("\n") == 0 and "Traceback" not in err, err
        assert f"interrupted by {name}: {done} finished cells are saved" in err
    st = sweep_status(out)
    assert st["done"] == done and st["failed"] == 0


def test_lost_manifest_is_rebuilt_from_the_config(tmp_path, finished_sweep):
    cfg, _ = finished_sweep
    out = tmp_path / "out"
    run_sweep(cfg, out)
    cells = sorted(p.name for p in (out / "cells").iterdir())
    for damage in ("delete", "truncate"):
        if damage == "delete":
            (out / "sweep.json").unlink()
            with pytest.raises(SweepError, match=r"no sweep\.json.*tokensde sweep run CONFIG"):
                sweep_status(out)
        else:
            (out / "sweep.json").write_text('{"kind": "tokensde.sw')
            with pytest.raises(StoreError, match=r"truncated or corrupt.*tokensde sweep run "
                                                 r"CONFIG"):
                sweep_status(out)
        summary = run_sweep(cfg, out)
        assert summary["skipped"] == summary["total"] == 2 and summary["ran"] == 0
        assert sorted(p.name for p in (out / "cells").iterdir()) == cells
        assert sweep_status(out)["done"] == 2
    other = tmp_path / "other.toml"
    other.write_text(SMALL.replace("seed = 3", "seed = 4"))
    (out / "sweep.json").unlink()
    with pytest.raises(SweepError, match="not all cells of this sweep"):
        run_sweep(other, out)
    assert sorted(p.name for p in (out / "cells").iterdir()) == cells


def test_backend_problems_fail_before_the_directory_exists(tmp_path, finished_sweep, monkeypatch):
    cfg, _ = finished_sweep
    error_line(["sweep", "run", str(cfg), "--out", str(tmp_path / "a"), "--address", "1.2.3.4"],
               "--address applies only with --backend ray (got --backend local)")
    assert not (tmp_path / "a").exists()
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    error_line(["sweep", "run", str(cfg), "--out", str(tmp_path / "b"), "--backend", "ray"],
               "backend 'ray' needs Ray", "pip install")
    assert not (tmp_path / "b").exists()


def test_vit_options_that_would_be_ignored_or_misread_are_refused(tmp_path):
    # a sweep size that is neither a packaged size nor a file names the option
    error_line(["vit", "depth", "--size", "huge", "--out", str(tmp_path / "d")],
               "size must be one of tiny, quick, full", "'huge'")
    error_line(["vit", "fair", "--size", "huge", "--out", str(tmp_path / "f")],
               "size must be one of", "'huge'")
    # the digits come with scikit-learn: a data folder for them would be ignored
    from tokensde.vit.data import _read_arrays

    with pytest.raises(ParameterError, match=r"data_dir must be left out for the digits"):
        _read_arrays("digits", tmp_path)
    assert not (tmp_path / "d").exists() and not (tmp_path / "f").exists()


def test_monte_carlo_refuses_network_options_for_the_reduced_engine():
    from tokensde.analysis.pair_monte_carlo import monte_carlo

    for how in (Execution(sampler="fast"), Execution(batch_size=10)):
        with pytest.raises(ParameterError, match="applies only with engine='network'"):
            monte_carlo(2.0, 3, 0.0, runs=4, engine="reduced", execution=how)


def test_simulate_refuses_qk_samples_outside_the_sde_scheme():
    p = ModelParams(n=3, d=4, qk="goe", qk_redraw="layer", qk_samples=3)
    with pytest.raises(ParameterError, match=r"qk_samples .* applies only with scheme='sde'"):
        simulate(p, TimeGrid.make(layers=2), runs=2)


def test_vit_config_refuses_an_mlp_ratio_without_an_mlp():
    from tokensde.vit.model import ViTConfig

    with pytest.raises(ParameterError, match=r"mlp_ratio applies only with block='standard'"):
        ViTConfig(block="attention-only", mlp_ratio=4)
    assert ViTConfig(block="attention-only").mlp_ratio == 2
