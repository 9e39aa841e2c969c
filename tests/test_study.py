"""The study as a library: it imports without the command line, `reproduce` runs from Python, a
failing figure becomes a 'failed' section, the sweep files ship with the package, and drawing
never switches matplotlib's backend."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tokensde.study as study
from tokensde.model.params import ParameterError
from tokensde.study import context, multi
from tokensde.sweep.config import SweepConfig

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, **env})
    return out.stdout.strip()


@pytest.mark.slow
def test_study_imports_without_the_command_line():
    code = ("import sys, tokensde.study; assert 'typer' not in sys.modules, 'typer'; "
            "print(sorted(m for m in sys.modules if m.startswith('tokensde.cli')))")
    assert _python(code) == "[]"


@pytest.mark.slow
def test_reproduce_runs_from_python_and_reuses_saved_results(tmp_path):
    path, sections, record = study.reproduce(tmp_path, size="tiny", workers=1,
                                             only=["histograms"])
    assert path == tmp_path / "report.html" and path.read_text().endswith("</html>\n")
    assert [s.key for s in sections] == ["histograms"] and sections[0].status == "ok"
    assert sections[0].provenance["reused"] is False
    assert (tmp_path / "figures" / "histograms.png").exists()
    assert sorted(p.name for p in (tmp_path / "data" / "histograms-tiny").iterdir()) == [
        "beta0.3.npz", "beta2.npz"]
    saved = json.loads((tmp_path / "reproduce.json").read_text())
    assert saved["kind"] == "tokensde.reproduce" and saved["size"] == "tiny"
    assert saved["sections"]["histograms"]["status"] == "ok" == record["sections"]["histograms"][
        "status"]
    assert saved["command"] == f"tokensde reproduce --size tiny --out {tmp_path} --only histograms"
    rows = sections[0].tables[1].rows
    _, again, _ = study.reproduce(tmp_path, size="tiny", workers=1, only=["histograms"])
    assert again[0].provenance["reused"] is True and again[0].tables[1].rows == rows


def test_a_failing_figure_becomes_a_failed_section_and_the_report_is_still_written(
        tmp_path, monkeypatch):
    def boom(ctx):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(study.FIGURES, "trajectories",
                        dataclasses.replace(study.FIGURES["trajectories"], data=boom))
    path, sections, record = study.reproduce(tmp_path, "tiny", workers=1, only=["trajectories"])
    assert sections[0].status == "failed" and "RuntimeError: disk on fire" in sections[0].note
    assert record["sections"]["trajectories"]["status"] == "failed"
    assert 'data-status="failed"' in path.read_text()

@pytest.mark.slow  # a sweep run twice: about 1.6 s of CPU
def test_interrupted_phase_grid_resumes_from_its_saved_cells(tmp_path, monkeypatch):
    from tokensde.study.phase import _phase_data
    from tokensde.sweep import two_token as phase_grid

    real, ran = phase_grid.monte_carlo, []

    def flaky(beta, d, *a, **k):
        if len(ran) == 2:
            raise KeyboardInterrupt
        ran.append((beta, d))
        return real(beta, d, *a, **k)

    monkeypatch.setattr(phase_grid, "monte_carlo", flaky)
    ctx = study.Context(tmp_path / "a", "tiny", workers=1)
    with pytest.raises(KeyboardInterrupt):
        _phase_data(ctx)
    monkeypatch.setattr(phase_grid, "monte_carlo",
                        lambda beta, d, *a, **k: (ran.append((beta, d)), real(beta, d, *a, **k))[1])
    resumed, reused = _phase_data(ctx)
    assert not reused and len(ran) == 6 and len(set(ran)) == 6  # each of the 6 cells ran once
    again, reused = _phase_data(ctx)
    assert reused and len(ran) == 6
    straight, _ = _phase_data(study.Context(tmp_path / "b", "tiny", workers=1))
    cols = [c for c in straight.table.columns if c != "wall_s"]
    order = ["d", "beta"]
    for run in (resumed, again):
        assert run.table.sort_values(order, ignore_index=True)[cols].equals(
            straight.table.sort_values(order, ignore_index=True)[cols])


@pytest.mark.slow  # the study loads: about 2 s of CPU
def test_reproduce_rejects_unknown_figures(tmp_path):
    with pytest.raises(ParameterError, match="only must name figures"):
        study.reproduce(tmp_path, "tiny", only=["nope"])
    with pytest.raises(ParameterError, match="skip must name figures"):
        study.reproduce(tmp_path, "tiny", skip=["vit", "nope"])
    with pytest.raises(ParameterError, match="leave no figure"):
        study.reproduce(tmp_path, "tiny", only=["vit"], skip=["vit"])
    assert not (tmp_path / "report.html").exists()
    _, sections, record = study.reproduce(tmp_path, "tiny", workers=1,
                                          only=["histograms", "vit"], skip=["vit"])
    assert [s.key for s in sections] == ["histograms"] and list(record["sections"]) == [
        "histograms"]
    assert record["command"].endswith("--only histograms,vit --skip vit")


def test_sweep_files_are_package_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # never looked up in the working directory
    monkeypatch.delenv(context._SWEEPS_ENV, raising=False)
    here = Path(study.__file__).resolve().parent / "sweeps"
    assert context.SWEEP_DIR.resolve() == here
    for size, name in (("tiny", "smoke"), ("quick", "multi-token-quick"),
                       ("full", "multi-token-full")):
        path = multi._sweep_config(study.Context(tmp_path, size))
        assert path.resolve() == here / f"{name}.toml"
        assert SweepConfig.load(path).name == name
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "study/sweeps/*.toml" in setup["package-data"]["tokensde"]
    # moved, not copied; the example links to the packaged file
    assert not list((ROOT / "examples" / "sweeps").glob("multi-token-*.toml"))
    example = ROOT / "examples" / "sweeps" / "smoke.toml"
    assert example.resolve() == here / "smoke.toml"


def test_sweeps_directory_can_be_overridden(tmp_path, monkeypatch):
    (tmp_path / "quick.toml").write_text((context.SWEEP_DIR / "smoke.toml").read_text())
    monkeypatch.setenv(context._SWEEPS_ENV, str(tmp_path))
    assert multi._sweep_config(study.Context(tmp_path, "quick")) == tmp_path / "quick.toml"
    # what the directory lacks comes from the package
    assert multi._sweep_config(study.Context(tmp_path, "tiny")) == context.SWEEP_DIR / "smoke.toml"
    with pytest.raises(FileNotFoundError, match=r"nope\.toml in .*sweeps"):
        context._sweep_file(("nope",))


@pytest.mark.slow
def test_plot_modules_leave_the_matplotlib_backend_alone():
    code = ("import importlib, pkgutil, sys, matplotlib, tokensde.plots as p\n"
            "for m in pkgutil.iter_modules(p.__path__):\n"
            "    importlib.import_module(f'tokensde.plots.{m.name}')\n"
            "import tokensde.study\n"
            "print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules)")
    assert _python(code, MPLBACKEND="svg") == "svg False"


@pytest.mark.slow  # a statistical check of tens of seconds: runs with the slow set
def test_variants_section_labels_every_arm_and_checks_the_spec_model(tmp_path):
    from tokensde.plots.variants import _arm
    from tokensde.theory import decision_time as absorption
    from tokensde.theory.redrawn_forms import p_first_forms

    _, sections, _ = study.reproduce(tmp_path, "tiny", workers=1, only=["variants"])
    sec = sections[0]
    assert sec.status == "ok", sec.note
    (table,) = sec.tables
    assert len(table.rows) == 18  # 2 betas x (spec, 4 head counts, redrawn, 3 norms)
    arms = {r[0] for r in table.rows}
    assert {"spec model (Q = K = I), H = 1", "goe forms (s = 0.5) fixed per run, H = 8",
            "goe forms (s = 0.5) redrawn every layer, H = 1", "pre-norm", "peri-norm",
            "post-norm"} == arms - {f"goe forms (s = 0.5) fixed per run, H = {h}" for h in (1, 2, 4)}
    th = table.columns.index("theory")
    spec = [r for r in table.rows if r[0].startswith("spec model")]
    for r in spec:  # theory at the tolerance, beside the Monte Carlo
        assert r[th] == pytest.approx(absorption.p_anti_at_tol(r[1], 4, "uniform", 1e-8))
    redrawn = [r for r in table.rows if "redrawn every layer" in r[0]]
    for r in redrawn:  # the exact curve of GOE forms redrawn every layer
        assert r[th] == pytest.approx(p_first_forms(r[1], 4, "uniform", 1e-8, 0.5))
    assert all(r[th] is None for r in table.rows if r not in spec and r not in redrawn)
    # the tiny sweep asks for no step error: the column beside P(antipodal) says so
    assert {r[table.columns.index("step error ± se")] for r in table.rows} == {"not measured"}
    assert _arm({"until": "decided", "heads": float("nan"), "qk": None}) == (
        "spec model (Q = K = I), H = 1")
    assert (tmp_path / "figures" / "variants.png").stat().st_size > 20_000


@pytest.mark.slow
def test_mlp_section_checks_every_cell_against_the_first_passage_theory(tmp_path):
    from tokensde.plots.mlp import _arm, _mlp_rows
    from tokensde.theory import decision_time as absorption
    from tokensde.theory.mlp_block import p_first

    _, sections, _ = study.reproduce(tmp_path, "tiny", workers=1, only=["mlp"])
    sec = sections[0]
    assert sec.status == "ok", sec.note
    (table,) = sec.tables
    assert len(table.rows) == 6  # beta panel: 2 arms at beta 2; tol panel: 2 arms x 2 tols
    at_tol, limit = table.columns.index("theory at tol"), table.columns.index("tol -> 0")
    for name, beta, tol, *_, r in [(r[0], r[1], r[2], r) for r in table.rows]:
        want = (p_first(beta, 4, -0.5, tol, mlp="relu", mlp_sigma=0.3) if name.startswith("relu")
                else absorption.p_anti_at_tol(beta, 4, -0.5, tol))
        assert r[at_tol] == pytest.approx(want, rel=1e-6)
        assert r[limit] == (0.0 if name.startswith("relu") else pytest.approx(0.5, abs=0.1))
        assert r[table.columns.index("step error ± se")] == "not measured"  # tiny: none asked
        assert r[4] == 60.0  # the maximum horizon is in the table
    assert _arm({"mlp": float("nan")}) == "spec model (no MLP)"
    assert set(_mlp_rows(sec_table_frame(table)).panel) == {"beta", "tol"}
    assert (tmp_path / "figures" / "mlp.png").stat().st_size > 20_000


def sec_table_frame(table):
    """A report table's rows as the columns `mlp_rows` reads."""
    import pandas as pd

    return pd.DataFrame([{"beta": r[1], "tol": r[2], "mlp": "relu" if r[0][0] == "r" else "none",
                          "mlp_sigma": 0.3} for r in table.rows])


def _saved_tables(out: Path) -> dict[str, object]:
    """Every saved sweep table under `out/sweeps/` (less its timing columns) and every saved
    array under `out/data/`, by path."""
    import numpy as np
    import pandas as pd

    found: dict[str, object] = {}
    for table in sorted((out / "sweeps").glob("*/table.parquet")):
        df = pd.read_parquet(table)
        found[str(table.relative_to(out))] = df.drop(
            columns=[c for c in df.columns if c.startswith("wall") or c in ("time", "host")])
    def untimed(value: object) -> object:  # a saved JSON header less its wall times
        if isinstance(value, dict):
            return {k: untimed(v) for k, v in value.items() if not k.startswith("wall")}
        return value

    for npz in sorted((out / "data").rglob("*.npz")):
        with np.load(npz) as z:
            found[str(npz.relative_to(out))] = {
                k: np.array(json.dumps(untimed(json.loads(str(z[k]))), sort_keys=True))
                if z[k].dtype.kind == "U" and str(z[k]).startswith("{") else z[k]
                for k in z.files}
    return found


@pytest.mark.slow
def test_sections_on_a_pool_save_what_one_process_saves(tmp_path):
    import numpy as np

    names = ["phase-diagram", "theory-vs-simulation", "decision-times", "histograms", "mlp"]
    one = study.reproduce(tmp_path / "one", "tiny", workers=1, only=names)
    two = study.reproduce(tmp_path / "two", "tiny", workers=2, only=names)
    for _, sections, record in (one, two):
        assert [s.key for s in sections] == names  # report order, whatever finished first
        assert list(record["sections"]) == names and not record["failed"]
        assert all(record["sections"][n]["wall_s"] > 0 for n in names)
    a, b = _saved_tables(tmp_path / "one"), _saved_tables(tmp_path / "two")
    assert sorted(a) == sorted(b) and len(a) >= 5  # 2 sweeps, 3 arrays at least
    for key, left in a.items():
        right = b[key]
        if isinstance(left, dict):
            assert left.keys() == right.keys()
            for k in left:
                assert np.array_equal(left[k], right[k], equal_nan=left[k].dtype.kind == "f"), (
                    key, k)
        else:
            assert left.equals(right), key
    # the tables the report shows are the same, value for value
    for s1, s2 in zip(one[1], two[1], strict=True):
        shown = [json.dumps([t.rows for t in s.tables], default=str) for s in (s1, s2)]
        assert shown[0] == shown[1], s1.key  # NaN written as NaN on both sides


def test_the_pool_plan_runs_the_costliest_first_and_shares_saved_results(tmp_path, monkeypatch):
    rep = importlib.import_module("tokensde.study.reproduce")  # the module, not the function
    monkeypatch.setattr(rep, "_machine_speed", lambda: (1.0, "test"))
    monkeypatch.setattr(rep, "_SECTION_CPU_S", {**rep._SECTION_CPU_S, "tiny": {
        "phase-diagram": 30.0, "theory-vs-simulation": 1.0, "histograms": 5.0,
        "multi-token": 20.0, "mlp": 200.0, "decision-times": 8.0}})
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    names = ["phase-diagram", "theory-vs-simulation", "decision-times", "histograms",
             "multi-token", "mlp"]
    ctx = study.Context(tmp_path, "tiny", workers=2)
    cost = rep._section_cpu(names, ctx)
    solo, pooled, processes = rep._plan(names, ctx, cost)
    # mlp (200 of 264 s, a sweep) is more than a process's share: alone, on both workers
    assert solo == [["mlp"]] and processes == 2
    assert pooled == [["phase-diagram", "theory-vs-simulation"], ["multi-token"],
                      ["decision-times"], ["histograms"]]
    # 200/2 alone; then each group on the process free first: 31 | 20 + 8 + 5 (28 < 31)
    seconds, _ = rep._estimate(names, ctx)
    assert seconds == pytest.approx(100 + rep._START_S + 33)
    # one process: everything here, in report order; the estimate is the sum
    ctx1 = study.Context(tmp_path, "tiny", workers=1)
    solo, pooled, processes = rep._plan(names, ctx1, cost)
    assert [n for g in solo for n in g] == names and pooled == []
    assert rep._estimate(names, ctx1)[0] == pytest.approx(sum(cost.values()))
    # an earlier run of this size and seed: its ok sections only redraw
    (tmp_path / "reproduce.json").write_text(json.dumps(
        {"size": "tiny", "seed": 0, "sections": {"mlp": {"status": "ok"},
                                                 "multi-token": {"status": "failed"}}}))
    again = rep._section_cpu(names, ctx)
    assert again["mlp"] == rep._REUSED_CPU_S and again["multi-token"] == 20.0


def test_quick_sweeps_aim_for_their_stated_half_width():
    """Each quick two-token or multi-token sweep states the 95% Wilson half-width its runs give
    (at p = 1/2, the widest); the runs must give it, and each d of the phase grid must have beta
    on both sides of beta_c(d)."""
    import math
    import re

    from tokensde.theory.two_tokens import beta_c

    for name in ("phase-quick", "phase-d-quick", "variants-quick", "mlp-quick",
                 "multi-token-quick"):
        path = context.SWEEP_DIR / f"{name}.toml"
        text = re.sub(r"\s*\n#\s*", " ", path.read_text())  # comment lines joined
        aim = float(re.search(r"half-width of at most ([0-9.]*[0-9])", text).group(1))
        runs = tomllib.loads(path.read_text())["runs"]
        z = 1.959964
        widest = z * math.sqrt(0.25 / runs + z * z / (4 * runs * runs)) / (1 + z * z / runs)
        assert widest <= aim < widest + 0.01, (name, runs, widest, aim)
    grid = tomllib.loads((context.SWEEP_DIR / "phase-quick.toml").read_text())["grid"]
    for d in grid["d"]:
        assert min(grid["beta"]) < beta_c(d) - 0.3 or beta_c(d) == 0
        assert max(grid["beta"]) > beta_c(d) + 0.3
