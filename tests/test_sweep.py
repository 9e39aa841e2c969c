"""Sweep engine (config, seeds, resume, backends, bad files, CLI) and the multi-token physics."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from tokensde.cli.sweep import register
from tokensde.io.store import StoreError
from tokensde.model.params import ParameterError
from tokensde.sweep.config import _TIMING_COLUMNS, SweepConfig, SweepError
from tokensde.sweep.engine import run_sweep, sweep_status
from tokensde.sweep.kinds import get_kind
from tokensde.sweep.store import load_table, read_table

ROOT = Path(__file__).resolve().parents[1]

# 10 small multi-token cells (~0.2 s each): long enough to kill a sweep between two of them.
CONFIG = """
name = "engine-test"
kind = "multi_token"
runs = 32
T = 3.0
seed = 7
[params]
dt = 0.01
[grid]
n = [3, 4]
beta = [0.5, 1.0, 2.0, 3.0, 4.0]
d = [3]
"""


def write_config(tmp: Path, text: str = CONFIG, name: str = "sweep.toml") -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=list(_TIMING_COLUMNS)).reset_index(drop=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """The uninterrupted one-worker run every other run is compared with."""
    tmp = tmp_path_factory.mktemp("ref")
    cfg = write_config(tmp)
    summary = run_sweep(cfg, tmp / "out", workers=1)
    assert summary["done"] == summary["total"] == 10 and summary["failed"] == 0
    return cfg, load_table(tmp / "out")


# ----------------------------------------------------------------------------- config and seeds

def test_cells_are_canonical_and_seeds_do_not_depend_on_order():
    a = SweepConfig.from_dict({"kind": "multi_token", "seed": 3, "runs": 8, "T": 1,
                               "params": {"d": 3}, "grid": {"n": [3, 4], "beta": [1, 2.5]}})
    b = SweepConfig.from_dict({"kind": "multi_token", "seed": 3, "runs": 8, "T": 1.0,
                               "params": {"d": 3}, "grid": {"beta": [2.5, 1.0], "n": [4, 3]}})
    key = lambda c: (c.params["n"], c.params["beta"])  # noqa: E731
    sa = {key(c): (c.id, c.seed) for c in a.cells()}
    sb = {key(c): (c.id, c.seed) for c in b.cells()}
    assert sa == sb and len(sa) == 4  # int 1 and float 1.0 are the same cell
    assert len({s for _, s in sa.values()}) == 4
    c = SweepConfig.from_dict({"kind": "multi_token", "seed": 4, "runs": 8, "T": 1,
                               "params": {"d": 3}, "grid": {"n": [3, 4], "beta": [1, 2.5]}})
    assert {key(x): x.seed for x in c.cells()}.keys() == sa.keys()
    assert not {x.seed for x in c.cells()} & {s for _, s in sa.values()}


def test_grid_blocks_are_a_union_without_repeats():
    cfg = SweepConfig.from_dict({"kind": "null", "seed": 0, "grid": [
        {"x": [1.0, 2.0]}, {"x": [2.0, 3.0], "sleep_s": [0.0]}]})
    assert [c.params["x"] for c in cfg.cells()] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("data, match", [
    ({"kind": "null", "seed": 0, "grid": {"x": []}}, "grid.x must be a non-empty list"),
    ({"kind": "null", "seed": 0, "grid": {"x": [1]}, "extra": 1}, "unknown key"),
    ({"kind": "null", "grid": {"x": [1]}}, "missing required key 'seed'"),
    ({"kind": "null", "seed": 0, "params": {"x": 1}, "grid": {"x": [1]}}, "both in a grid"),
    ({"kind": "null", "seed": 0, "runs": 2, "params": {"runs": 3}, "grid": {"x": [1]}},
     "runs given both"),
])
def test_bad_config_is_a_clear_error(data, match):
    with pytest.raises(SweepError, match=match):
        SweepConfig.from_dict(data)


@pytest.mark.parametrize("grid, match", [
    ({"nn": [3]}, "nn: not a parameter of experiment kind 'multi_token'"),
    ({"n": [1]}, "n must be an integer >= 2"),
    ({"model": ["flow"], "sigma": [0.5]}, "sigma must be 0"),
    ({"tol": [1.0]}, "tol must be a number in"),
])
def test_bad_cell_names_the_parameter(grid, match):
    base = {"kind": "multi_token", "seed": 0, "runs": 4, "T": 1.0, "params": {"n": 3, "d": 3,
                                                                               "beta": 1.0}}
    for k in grid:
        base["params"].pop(k, None)
    with pytest.raises(ParameterError, match=match):
        SweepConfig.from_dict({**base, "grid": grid}).cells()


def test_unknown_kind_lists_the_known_ones():
    with pytest.raises(ParameterError, match="multi_token"):
        SweepConfig.from_dict({"kind": "nope", "seed": 0, "grid": {"x": [1]}}).cells()


# ----------------------------------------------------------------------------- equal tables

@pytest.mark.slow  # worker processes start: about 3 s of CPU
def test_two_workers_give_the_same_table(reference, tmp_path):
    cfg, ref = reference
    run_sweep(cfg, tmp_path / "w2", workers=2)
    pd.testing.assert_frame_equal(comparable(load_table(tmp_path / "w2")), comparable(ref))
    assert (ref["status"] == "ok").all() and ref["p_single"].notna().all()

@pytest.mark.slow  # a sweep run twice: about 1.5 s of CPU
def test_order_changes_which_cells_run_first_not_the_table(reference, tmp_path):
    """`order` reverses the cells to run: they finish in that order, the table is the same (in
    grid order); an order that drops a cell is refused before any cell runs."""
    cfg, ref = reference
    seen: list[int] = []
    run_sweep(cfg, tmp_path / "rev", order=lambda todo: todo[::-1],
              on_cell=lambda row, counts: seen.append(row["index"]))
    assert seen == list(range(10))[::-1]
    pd.testing.assert_frame_equal(comparable(load_table(tmp_path / "rev")), comparable(ref))
    with pytest.raises(SweepError, match="permutation"):
        run_sweep(cfg, tmp_path / "drop", order=lambda todo: todo[1:])
    assert not list((tmp_path / "drop" / "cells").glob("*.parquet"))


@pytest.mark.ray
@pytest.mark.slow
def test_ray_backend_gives_the_same_table(reference, tmp_path):
    pytest.importorskip("ray")
    cfg, ref = reference
    run_sweep(cfg, tmp_path / "ray", workers=2, backend="ray")
    pd.testing.assert_frame_equal(comparable(load_table(tmp_path / "ray")), comparable(ref))


KILL_SCRIPT = """
import sys
from tokensde.sweep.engine import run_sweep
if __name__ == "__main__":
    run_sweep(sys.argv[1], sys.argv[2], workers=1)
"""


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(reference, tmp_path):
    cfg, ref = reference
    out = tmp_path / "killed"
    script = tmp_path / "run.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(cfg), str(out)], env=env,
                            start_new_session=True)
    cells = out / "cells"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if cells.is_dir() and len(list(cells.glob("*.parquet"))) >= 3:
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = len(list(cells.glob("*.parquet")))
    assert 3 <= done < 10, f"kill landed outside the sweep ({done} cells done)"
    (cells / ".leftover.parquet.x1y2.tmp").write_bytes(b"half a file")  # an interrupted write
    summary = run_sweep(cfg, out, workers=2)
    assert summary["skipped"] == done and summary["ran"] == 10 - done
    assert not list(cells.glob(".*.tmp"))
    pd.testing.assert_frame_equal(comparable(load_table(out)), comparable(ref))
    pd.testing.assert_frame_equal(comparable(read_table(out)), comparable(ref))


# ----------------------------------------------------------------------------- bad files

@pytest.fixture
def finished(tmp_path) -> tuple[Path, Path]:
    cfg = write_config(tmp_path, CONFIG.replace("n = [3, 4]", "n = [3]").replace(
        "beta = [0.5, 1.0, 2.0, 3.0, 4.0]", "beta = [1.0, 2.0]"))
    run_sweep(cfg, tmp_path / "out")
    return cfg, tmp_path / "out"


def test_truncated_cell_file_is_reported_not_overwritten(finished):
    cfg, out = finished
    part = sorted((out / "cells").glob("*.parquet"))[0]
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])
    for call in (lambda: run_sweep(cfg, out), lambda: sweep_status(out), lambda: load_table(out)):
        with pytest.raises(StoreError, match=f"{part.name}.*truncated or corrupt.*delete"):
            call()
    assert part.read_bytes() == data[: len(data) // 2]


def test_foreign_parquet_in_cells_is_reported(finished):
    cfg, out = finished
    part = sorted((out / "cells").glob("*.parquet"))[0]
    pd.DataFrame({"a": [1]}).to_parquet(part)
    with pytest.raises(StoreError, match="not a tokensde file"):
        run_sweep(cfg, out)
    (out / "cells" / "notes.txt").write_text("mine")
    with pytest.raises(SweepError, match=r"unexpected file .*notes\.txt"):
        sweep_status(out)


def test_corrupt_manifest_and_foreign_directory(finished, tmp_path):
    cfg, out = finished
    (out / "sweep.json").write_text('{"kind": "tokensde.sweep", "sch')
    with pytest.raises(StoreError, match=r"sweep\.json is not a readable sweep manifest"):
        sweep_status(out)
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("1,2\n")
    with pytest.raises(SweepError, match="not empty and is not a sweep directory"):
        run_sweep(cfg, other)
    assert sorted(p.name for p in other.iterdir()) == ["data.csv"]


def test_different_sweep_in_same_directory_is_refused(finished, tmp_path):
    _, out = finished
    cfg2 = write_config(tmp_path, CONFIG.replace("seed = 7", "seed = 8"), "b.toml")
    with pytest.raises(SweepError, match="holds a different sweep"):
        run_sweep(cfg2, out)


def test_foreign_table_file_is_not_overwritten(finished):
    cfg, out = finished
    (out / "table.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(StoreError, match=r"table\.parquet"):
        run_sweep(cfg, out)


# ----------------------------------------------------------------------------- failures, CLI

FAILING = """
kind = "multi_token"
runs = 8
T = 0.5
seed = 1
[params]
n = 3
d = 3
attention = "usa"
[grid]
beta = [1.0, 800.0]
"""


def test_failing_cell_is_recorded_and_retried_on_resume(tmp_path):
    cfg = write_config(tmp_path, FAILING)
    s = run_sweep(cfg, tmp_path / "out")
    assert (s["done"], s["failed"]) == (2, 1)
    df = load_table(tmp_path / "out")
    bad = df[df["beta"] == 800.0].iloc[0]
    assert bad["status"] == "error" and "beta (attention=usa, float64) must be <= 345" in bad["error"]
    assert df[df["beta"] == 1.0].iloc[0]["status"] == "ok"
    st = sweep_status(tmp_path / "out")
    assert (st["failed"], st["pending"], st["failures"][0]["params"]["beta"]) == (1, 0, 800.0)
    s2 = run_sweep(cfg, tmp_path / "out")
    assert (s2["skipped"], s2["ran"], s2["failed"]) == (1, 1, 1)


def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:
        """Test root."""

    return app


def test_cli_run_status_table(tmp_path):
    cfg = write_config(tmp_path, FAILING)
    out = tmp_path / "out"
    r = CliRunner().invoke(cli(), ["sweep", "run", str(cfg), "--out", str(out), "--quiet"])
    assert r.exit_code == 1, r.output  # one cell failed
    summary = json.loads(r.stdout)
    assert (summary["total"], summary["failed"]) == (2, 1)
    r = CliRunner().invoke(cli(), ["sweep", "status", str(out)])
    assert r.exit_code == 0 and json.loads(r.stdout)["failed"] == 1
    r = CliRunner().invoke(cli(), ["sweep", "table", str(out), "--format", "csv", "--output", "-"])
    lines = r.stdout.strip().splitlines()
    assert r.exit_code == 0 and len(lines) == 3 and lines[0].startswith("cell,index,beta,")
    r = CliRunner().invoke(cli(), ["sweep", "table", str(out), "--format", "json"])
    assert json.loads(r.stdout)["path"] == str(out / "table.json")
    assert len(json.loads((out / "table.json").read_text())) == 2
    r = CliRunner().invoke(cli(), ["sweep", "run", str(cfg), "--out", str(out), "--workers", "0"])
    assert r.exit_code == 2 and "workers must be an integer >= 1" in r.output
    r = CliRunner().invoke(cli(), ["sweep", "status", str(tmp_path / "nowhere")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_parameter_of_mixed_type_becomes_text_in_the_table(tmp_path):
    cfg = write_config(tmp_path, """
kind = "multi_token"
runs = 4
T = 0.1
seed = 2
[params]
n = 3
d = 3
beta = 1.0
[grid]
dt = ["auto", 0.05]
""")
    run_sweep(cfg, tmp_path / "out")
    df = read_table(tmp_path / "out")
    assert df["dt"].tolist() == ["auto", "0.05"]
    assert df["layer_dt"].tolist() == [0.02, 0.05] and df["steps"].tolist() == [5, 2]


def test_smoke_example_parses_to_eight_cells():
    cells = SweepConfig.load(ROOT / "examples/sweeps/smoke.toml").cells()
    assert len(cells) == 8


# ----------------------------------------------------------------------------- physics

def multi(seed: int = 5, **cell) -> dict:
    return get_kind("multi_token")(cell, seed)


def test_same_seed_same_numbers_and_hybrid_at_zero_noise_is_the_flow():
    cell = {"n": 4, "d": 3, "beta": 2.0, "runs": 16, "T": 2.0}
    a, b = multi(**cell, model="hybrid", sigma=0.0), multi(**cell, model="flow")
    same = lambda u, v: json.dumps(u) == json.dumps(v)  # noqa: E731  (nan == nan here)
    assert same(a, b)
    assert same(multi(**cell), multi(**cell))
    assert not same(multi(**cell), multi(seed=6, **cell))


def test_deterministic_flow_ends_in_one_cluster():
    s = multi(model="flow", n=8, d=3, beta=1.0, runs=100, T=20.0)
    assert s["k_single"] == 100 and s["minority"] == [0, 0, 0, 0]
    assert s["tol_changed_up"] == 0.0 and math.isnan(s["tol_changed_down"])  # stopped at tol
    assert s["p_decided"] == 1.0 and 0 < s["t_decided_median"] <= s["t_decided_q90"] < 20.0
    assert s["run_layers"] < 100 * s["steps"]
    h = multi(model="flow", n=8, d=3, beta=1.0, runs=100, T=20.0, until="horizon")
    assert h["k_single"] == 100 and h["run_layers"] == 100 * h["steps"]
    assert h["tol_changed_down"] == h["tol_changed_up"] == 0.0


def test_pure_noise_large_beta_is_often_bipolar_and_never_below_beta_c():
    s = multi(n=8, d=3, beta=4.0, runs=100, T=10.0)
    assert s["p_bipolar_lo"] > 0.5
    assert sum(s["minority"]) == s["k_bipolar"] and s["minority_mean"] > 1.5
    # d = 8: beta_c = arccosh(6)/2 = 1.24, so at beta = 0.5 antipodal pairs cannot persist
    s = multi(n=8, d=8, beta=0.5, runs=100, T=10.0)
    assert s["k_bipolar"] == 0 and s["k_single"] == 100


@pytest.mark.slow
def test_two_tokens_bipolar_probability_matches_scale_function():
    # d = 3: rho0 = <x1, x2> of uniform tokens is uniform on [-1, 1]
    from tokensde.theory.two_tokens import p_anti_uniform

    truth = p_anti_uniform(1.5, 3)
    assert truth == pytest.approx(0.3296, abs=1e-3)
    s = multi(seed=11, n=2, d=3, beta=1.5, runs=2000, T=30.0, dt=0.01, tol=1e-6)
    assert s["p_undecided"] < 0.01
    assert s["p_bipolar_lo"] < truth < s["p_bipolar_hi"]


# ----------------------------------------------------------------------------- figures

def test_figures_and_markdown_table_read_the_saved_table(tmp_path):
    from tokensde.plots.multi import _coin_minority_law, _make_all, _markdown_table
    from tokensde.sweep.store import _ok_rows

    np.testing.assert_allclose(_coin_minority_law(4), [8 / 14, 6 / 14])
    np.testing.assert_allclose(_coin_minority_law(5), [10 / 30, 20 / 30])
    cfg = write_config(tmp_path, CONFIG.replace("n = [3, 4]", "n = [4]").replace(
        "beta = [0.5, 1.0, 2.0, 3.0, 4.0]", "beta = [1.0, 4.0]").replace("runs = 32", "runs = 8"))
    run_sweep(cfg, tmp_path / "out")
    made = _make_all(_ok_rows(tmp_path / "out"), tmp_path / "figs")
    assert [p.name for p in made] == ["multi_token_noise.png", "multi_token_minority.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in made)
    df = read_table(tmp_path / "out")
    row = _markdown_table(df).splitlines()[2]
    r = df[df["beta"] == 4.0].iloc[0]
    assert row.startswith("| 4 | 3 |")
    assert f"{r['p_bipolar']:.2f} [{r['p_bipolar_lo']:.2f}, {r['p_bipolar_hi']:.2f}]" in row
    # the command line draws the same figures and prints the README tables (no simulation)
    r = CliRunner().invoke(cli(), ["sweep", "plot", str(tmp_path / "out"), str(tmp_path / "cli"),
                                   "--prefix", "mt"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[:2] == [str(tmp_path / "cli" / "mt_noise.png"),
                         str(tmp_path / "cli" / "mt_minority.png")]
    assert "P(bipolar) [95% Wilson interval] u = P(undecided); model = noise" in r.output
    assert _markdown_table(df) in r.output
    r = CliRunner().invoke(cli(), ["sweep", "plot", str(tmp_path / "nowhere"), str(tmp_path)])
    assert r.exit_code == 2 and r.output.startswith("error:")


LEGACY = Path(__file__).parent / "data" / "legacy-sweep"


def test_a_sweep_written_before_kinds_by_name_still_loads_and_resumes(tmp_path):
    """tests/data/legacy-sweep: a sweep file and directory written by tokensde 0.1.0 with the flat
    layout, whose file and manifest name the module `tokensde.phase_grid` (gone since)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "cells").mkdir()
    (out / "sweep.json").write_bytes((LEGACY / "sweep.json").read_bytes())
    for part in (LEGACY / "cells").iterdir():
        (out / "cells" / part.name).write_bytes(part.read_bytes())
    assert json.loads((out / "sweep.json").read_text())["config"]["module"] == "tokensde.phase_grid"
    status = sweep_status(out)
    assert (status["kind"], status["total"], status["done"]) == ("two_token", 2, 2)
    before = comparable(load_table(out))
    summary = run_sweep(LEGACY / "legacy.toml", out)
    assert (summary["ran"], summary["skipped"]) == (0, 2)
    pd.testing.assert_frame_equal(comparable(load_table(out)), before)
    # the same cells from today's spelling of the file (no module): same ids, nothing re-run
    today = write_config(tmp_path, (LEGACY / "legacy.toml").read_text()
                         .replace('module = "tokensde.phase_grid"\n', ""))
    assert run_sweep(today, out)["ran"] == 0


def test_a_sweep_file_cannot_choose_code_to_import(tmp_path):
    text = (LEGACY / "legacy.toml").read_text().replace("tokensde.phase_grid", "os")
    with pytest.raises(ParameterError, match=r"module 'os' .* is not read: kinds are found by name"):
        run_sweep(write_config(tmp_path, text), tmp_path / "out")
