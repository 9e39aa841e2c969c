"""`meanfield table` never loses finished work: it runs as a `meanfield` sweep, resumes cell by
cell after SIGINT / SIGTERM with the finished cells unchanged, refuses an --out that holds other
results unless --force, and reports P(bipolar) by the rule for undecided runs."""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.io.outputs import _clear_results, _enclosing_sweep, _guard_output
from tokensde.io.store import header, write_parquet
from tokensde.meanfield.absorption import _bipolar_text, run_table
from tokensde.meanfield.kind import table_config, table_frame
from tokensde.model.params import ParameterError
from tokensde.sweep import load_table, run_sweep, sweep_status

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
# 6 cells (iid, d = 2; beta 3 then 0.5; the limit, n = 8, n = 12), each well under a second
SMALL = ["--start", "iid", "--beta", "3", "--beta", "0.5", "--n", "8", "--n", "12", "--K", "16",
         "--runs", "4", "--time", "30", "--dt", "0.05"]


def _table(*args: str) -> list[str]:
    return ["meanfield", "table", *SMALL, *args]


def _cells(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "cells").glob("*.parquet"))}


def test_sweep_table_equals_the_coupled_table(tmp_path) -> None:
    """Each system run alone on its (d, beta)'s `path_seed` gives the numbers of the coupled run
    of every system on one set of paths (`run_table`): the sweep is the same table."""
    args = dict(ds=[3], betas=[3.0], ns=[8], K=16, runs=3, seed=5, T=6.0, dt=0.05)
    old, _ = run_table(**args)
    run_sweep(table_config(**args), tmp_path / "mf")
    new = table_frame(load_table(tmp_path / "mf"))
    assert list(new.columns) == list(old.columns)
    assert new["k_decided"].sum() > 0 and (new["p_decided"] < 1).any()  # both kinds of run
    for col in old.columns.drop("wall_s"):
        a, b = old[col].to_numpy(), new[col].to_numpy()
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(a, b.astype(float), err_msg=col)
        else:
            assert list(a) == list(b), col


def _start(out: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from tokensde.cli import main; main()", *_table("--out", str(out))],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "cells").is_dir() and list((out / "cells").glob("*.parquet")):
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the table finished before it could be interrupted"
    return proc


@pytest.mark.parametrize(("sig", "code", "name"), [(signal.SIGINT, 130, "SIGINT"),
                                                   (signal.SIGTERM, 143, "SIGTERM")])
@pytest.mark.slow
def test_interrupted_table_resumes_with_finished_cells_unchanged(tmp_path, sig, code, name):
    out = tmp_path / "mf"
    proc = _start(out)
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err
    saved = _cells(out)
    assert 1 <= len(saved) < 6
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err, err
    assert last.startswith(f"error: interrupted by {name}: {len(saved)} finished cells are saved "
                           f"in {out}; cells in progress were stopped: to resume, run: "), last
    command = shlex.split(last.split("to resume, run: ", 1)[1])
    assert command[:3] == ["tokensde", "meanfield", "table"]
    if sig != signal.SIGINT:
        return
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.parquet")}
    res = runner.invoke(app, command[1:])  # the printed command, as printed
    assert res.exit_code == 0, res.output
    after = _cells(out)
    assert len(after) == 6
    assert {k: after[k] for k in saved} == saved  # the finished cells are not rewritten
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.parquet")
            if p.name in saved} == stamps
    assert f"{6 - len(saved)} systems run, {len(saved)} reused" in res.output
    st = sweep_status(out)
    assert st["done"] == 6 and st["failed"] == 0


@pytest.mark.slow
def test_existing_out_refused_without_force(tmp_path) -> None:
    # a folder with other results: an older table (a tokensde file) is refused, kept, then replaced
    old = tmp_path / "old"
    write_parquet(pd.DataFrame({"x": [1.0]}), old / "table.parquet", header("meanfield_table"))
    before = (old / "table.parquet").read_bytes()
    res = runner.invoke(app, _table("--runs", "1", "--out", str(old)))
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.output.strip().count("\n") == 0, res.output
    assert f"error: --out: {old} is not empty (it holds table.parquet); choose another --out, " \
           "or pass --force" in res.output
    assert (old / "table.parquet").read_bytes() == before
    res = runner.invoke(app, _table("--runs", "1", "--out", str(old), "--force"))
    assert res.exit_code == 0, res.output
    assert sweep_status(old)["done"] == 6 and set(load_table(old)["runs"]) == {1}

    # the same table resumes; a different one is refused, and replaced with --force
    res = runner.invoke(app, _table("--runs", "1", "--out", str(old)))
    assert res.exit_code == 0 and "0 systems run, 6 reused" in res.output, res.output
    res = runner.invoke(app, _table("--runs", "2", "--out", str(old)))
    assert res.exit_code == 2 and "holds a different sweep" in res.output and "--out" in res.output
    assert set(load_table(old)["runs"]) == {1}
    res = runner.invoke(app, _table("--runs", "2", "--out", str(old), "--force"))
    assert res.exit_code == 0, res.output
    assert set(load_table(old)["runs"]) == {2}

    # files tokensde did not write are never deleted, --force or not
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    for extra in ([], ["--force"]):
        res = runner.invoke(app, _table("--runs", "1", "--out", str(mine), *extra))
        assert res.exit_code == 2 and "--out" in res.output and "notes.txt" in res.output
        assert res.output.strip().count("\n") == 0, res.output
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]

    # a file, and a folder inside a sweep's own folder, are refused
    res = runner.invoke(app, _table("--out", str(mine / "notes.txt")))
    assert res.exit_code == 2 and "--out must be a directory" in res.output
    res = runner.invoke(app, _table("--out", str(old / "cells" / "more"), "--force"))
    assert res.exit_code == 2 and f"lies inside the sweep folder {old}" in res.output
    assert not (old / "cells" / "more").exists()


def test_guard_for_files_and_clearing(tmp_path) -> None:
    f = tmp_path / "r.json"
    assert _guard_output(f, "--output") == f
    f.write_text("{}")
    with pytest.raises(ParameterError, match=r"--output: .*r\.json exists; choose another "
                                             r"--output, or pass --force"):
        _guard_output(f, "--output")
    assert _guard_output(f, "--output", force=True) == f
    sweep = tmp_path / "s"
    run_sweep(table_config([2], [3.0], [8], 16, ["iid"], runs=1, T=2.0, dt=0.05), sweep)
    assert _enclosing_sweep(sweep / "cells" / "x.png") == sweep and _enclosing_sweep(sweep) is None
    with pytest.raises(ParameterError, match="inside the sweep folder"):
        _guard_output(sweep / "fig.png", "--figure", force=True)
    removed = _clear_results(sweep, "--out")
    assert {p.name for p in removed} >= {"sweep.json", "cells", "table.parquet"}
    assert not list(sweep.iterdir())


def test_all_undecided_cell_says_undecided() -> None:
    """No run decided: 'undecided' and no probability; some undecided: the bounds are given."""
    res = runner.invoke(app, ["meanfield", "table", "--start", "iid", "--beta", "0.5", "--n", "8",
                              "--K", "16", "--runs", "3", "--time", "1", "--dt", "0.05"])
    assert res.exit_code == 0, res.output
    rows = [ln.split() for ln in res.stdout.splitlines() if ln.split()[:3] == ["2", "0.5", "iid"]]
    assert len(rows) == 2 and all(r[6] == "undecided" for r in rows), res.stdout
    assert "P(bipolar) undecided" in res.output and "0.000" not in res.stdout
    js = runner.invoke(app, ["meanfield", "table", "--start", "iid", "--beta", "0.5", "--n", "8",
                             "--K", "16", "--runs", "3", "--time", "1", "--dt", "0.05", "--json"])
    rec = json.loads(js.stdout)
    assert all(r["p_bipolar"] is None and r["k_decided"] == 0 for r in rec)
    assert all(r["p_bipolar_bound_lo"] == 0.0 and r["p_bipolar_bound_hi"] == 1.0 for r in rec)
    # the rule on rows: partly undecided gives the estimate, its interval and the bounds
    part = {"k_bipolar": 2, "k_decided": 3, "runs": 6}
    assert _bipolar_text({**part, "k_decided": 0, "k_bipolar": 0}) == "undecided"
    text = _bipolar_text(part)
    assert text.startswith("0.") and " bounds [" in text
    lo, hi = (float(v) for v in text.split("bounds [")[1].rstrip("]").split(", "))
    assert lo < 2 / 6 and hi > 5 / 6 and not math.isnan(lo)
    assert " bounds " not in _bipolar_text({"k_bipolar": 3, "k_decided": 3, "runs": 3})


@pytest.mark.parametrize(("args", "message"), [
    (["--runs", "0"], "--runs must be an integer >= 1; got 0"),
    (["--beta", "-1"], "--beta must be a finite number >= 0; got -1.0"),
    (["--time", "nan"], "--time must be a finite number > 0; got nan"),
    (["--tol", "0"], "--tol must be a finite number > 0; got 0.0"),
    (["--n", "1"], "--n must be an integer from 2 to 2147483647; got 1"),
    (["--start", "grid"], "--start must be one of iid, quasi, mixture; got 'grid'"),
    (["--device", "tpu"], "--device must be cpu, cuda or cuda:N; got 'tpu'"),
])
def test_bad_input_is_named(tmp_path, args, message) -> None:
    res = runner.invoke(app, ["meanfield", "table", *args, "--out", str(tmp_path / "mf")])
    assert res.exit_code == 2 and res.output.strip() == f"error: {message}", res.output
    assert not list(tmp_path.iterdir())
