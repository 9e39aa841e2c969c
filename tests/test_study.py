"""The study as a library: it imports without the command line, `reproduce` runs from Python, a
failing figure becomes a 'failed' section, the sweep files ship with the package, and drawing
never switches matplotlib's backend."""

from __future__ import annotations

import dataclasses
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


def test_study_imports_without_the_command_line():
    code = ("import sys, tokensde.study; assert 'typer' not in sys.modules, 'typer'; "
            "print(sorted(m for m in sys.modules if m.startswith('tokensde.cli')))")
    assert _python(code) == "[]"


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


def test_interrupted_phase_grid_resumes_from_its_saved_cells(tmp_path, monkeypatch):
    from tokensde.study.phase import phase_data
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
        phase_data(ctx)
    monkeypatch.setattr(phase_grid, "monte_carlo",
                        lambda beta, d, *a, **k: (ran.append((beta, d)), real(beta, d, *a, **k))[1])
    resumed, reused = phase_data(ctx)
    assert not reused and len(ran) == 6 and len(set(ran)) == 6  # each of the 6 cells ran once
    again, reused = phase_data(ctx)
    assert reused and len(ran) == 6
    straight, _ = phase_data(study.Context(tmp_path / "b", "tiny", workers=1))
    cols = [c for c in straight.table.columns if c != "wall_s"]
    order = ["d", "beta"]
    for run in (resumed, again):
        assert run.table.sort_values(order, ignore_index=True)[cols].equals(
            straight.table.sort_values(order, ignore_index=True)[cols])


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
    monkeypatch.delenv(context.SWEEPS_ENV, raising=False)
    here = Path(study.__file__).resolve().parent / "sweeps"
    assert context.SWEEP_DIR.resolve() == here
    for size, name in (("tiny", "smoke"), ("quick", "multi-token-quick"),
                       ("full", "multi-token-full")):
        path = multi.sweep_config(study.Context(tmp_path, size))
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
    monkeypatch.setenv(context.SWEEPS_ENV, str(tmp_path))
    assert multi.sweep_config(study.Context(tmp_path, "quick")) == tmp_path / "quick.toml"
    # what the directory lacks comes from the package
    assert multi.sweep_config(study.Context(tmp_path, "tiny")) == context.SWEEP_DIR / "smoke.toml"
    with pytest.raises(FileNotFoundError, match=r"nope\.toml in .*sweeps"):
        context.sweep_file(("nope",))


def test_plot_modules_leave_the_matplotlib_backend_alone():
    code = ("import importlib, pkgutil, sys, matplotlib, tokensde.plots as p\n"
            "for m in pkgutil.iter_modules(p.__path__):\n"
            "    importlib.import_module(f'tokensde.plots.{m.name}')\n"
            "import tokensde.study\n"
            "print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules)")
    assert _python(code, MPLBACKEND="svg") == "svg False"


@pytest.mark.slow  # a statistical check of tens of seconds: runs with the slow set
def test_variants_section_labels_every_arm_and_checks_the_spec_model(tmp_path):
    from tokensde.plots.variants import arm
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
    spec = [r for r in table.rows if r[0].startswith("spec model")]
    for r in spec:  # theory at the tolerance, beside the Monte Carlo
        assert r[8] == pytest.approx(absorption.p_anti_at_tol(r[1], 4, "uniform", 1e-8))
    redrawn = [r for r in table.rows if "redrawn every layer" in r[0]]
    for r in redrawn:  # the exact curve of GOE forms redrawn every layer
        assert r[8] == pytest.approx(p_first_forms(r[1], 4, "uniform", 1e-8, 0.5))
    assert all(r[8] is None for r in table.rows if r not in spec and r not in redrawn)
    assert arm({"until": "decided", "heads": float("nan"), "qk": None}) == (
        "spec model (Q = K = I), H = 1")
    assert (tmp_path / "figures" / "variants.png").stat().st_size > 20_000


def test_mlp_section_checks_every_cell_against_the_first_passage_theory(tmp_path):
    from tokensde.plots.mlp import arm, mlp_rows
    from tokensde.theory import decision_time as absorption
    from tokensde.theory.mlp_block import p_first

    _, sections, _ = study.reproduce(tmp_path, "tiny", workers=1, only=["mlp"])
    sec = sections[0]
    assert sec.status == "ok", sec.note
    (table,) = sec.tables
    assert len(table.rows) == 6  # beta panel: 2 arms at beta 2; tol panel: 2 arms x 2 tols
    for name, beta, tol, *_, r in [(r[0], r[1], r[2], r) for r in table.rows]:
        want = (p_first(beta, 4, -0.5, tol, mlp="relu", mlp_sigma=0.3) if name.startswith("relu")
                else absorption.p_anti_at_tol(beta, 4, -0.5, tol))
        assert r[9] == pytest.approx(want, rel=1e-6)  # r[6:9]: estimate, interval, bounds
        assert r[10] == (0.0 if name.startswith("relu") else pytest.approx(0.5, abs=0.1))
        assert r[4] == 60.0  # the maximum horizon is in the table
    assert arm({"mlp": float("nan")}) == "spec model (no MLP)"
    assert set(mlp_rows(sec_table_frame(table)).panel) == {"beta", "tol"}
    assert (tmp_path / "figures" / "mlp.png").stat().st_size > 20_000


def sec_table_frame(table):
    """A report table's rows as the columns `mlp_rows` reads."""
    import pandas as pd

    return pd.DataFrame([{"beta": r[1], "tol": r[2], "mlp": "relu" if r[0][0] == "r" else "none",
                          "mlp_sigma": 0.3} for r in table.rows])
