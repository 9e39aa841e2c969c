"""Commands that write a results file refuse to replace a finished one without --force, before any
work, with one line naming the option (tokensde.io.outputs._guard_output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.sweep.engine import run_sweep

MC = ["two-token", "mc", "--beta", "1", "--d", "3", "--runs", "8", "--time", "1", "--no-progress"]


def run(args: list[str]):
    return CliRunner().invoke(app, args)


def test_two_token_mc_out_is_refused_then_replaced_with_force(tmp_path):
    out = tmp_path / "mc.json"
    assert run([*MC, "--seed", "1", "--out", str(out)]).exit_code == 0
    first = out.read_bytes()
    res = run([*MC, "--seed", "2", "--out", str(out)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"error: --out: {out} exists; choose another --out, or pass --force to replace it"]
    assert out.read_bytes() == first  # untouched
    assert run([*MC, "--seed", "2", "--out", str(out), "--force"]).exit_code == 0
    assert json.loads(out.read_text())["seed"] == 2


def test_hybrid_out_is_refused_without_force(tmp_path):
    out = tmp_path / "h.json"
    out.write_text("{}")
    res = run(["two-token", "hybrid", "--beta", "0.5", "--eps", "1", "--runs", "4", "--time",
               "0.5", "--no-progress", "--out", str(out)])
    assert res.exit_code == 2 and "--force" in res.output and out.read_text() == "{}"


def test_sweep_table_output_is_refused_without_force_and_never_inside_the_sweep(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text('name = "g"\nkind = "multi_token"\nruns = 4\nT = 0.5\nseed = 1\n[params]\n'
                   'dt = 0.05\n[grid]\nn = [3]\nbeta = [1.0]\nd = [3]\n')
    sweep = tmp_path / "sweep"
    run_sweep(cfg, sweep, workers=1)
    dest = tmp_path / "t.csv"
    dest.write_text("keep")
    res = run(["sweep", "table", str(sweep), "--format", "csv", "--output", str(dest)])
    assert res.exit_code == 2 and "--force" in res.output and dest.read_text() == "keep"
    assert run(["sweep", "table", str(sweep), "--format", "csv", "--output", str(dest),
                "--force"]).exit_code == 0
    assert dest.read_text().startswith("kind") or "beta" in dest.read_text()
    inside = sweep / "mine.csv"
    res = run(["sweep", "table", str(sweep), "--format", "csv", "--output", str(inside)])
    assert res.exit_code == 2 and "inside the sweep folder" in res.output
    assert not Path(inside).exists()


def test_simulate_out_and_plot_are_refused_then_replaced_with_force(tmp_path):
    base = ["simulate", "--n", "2", "--d", "3", "--layers", "4", "--runs", "4", "--json"]
    out, fig = tmp_path / "r.npz", tmp_path / "r.png"
    assert run([*base, "--out", str(out), "--plot", str(fig)]).exit_code == 0
    stamp = (out.read_bytes(), fig.read_bytes())
    for opt, path in (("--out", out), ("--plot", fig)):
        res = run([*base, opt, str(path), "--seed", "3"])
        assert res.exit_code == 2, res.output
        assert f"error: {opt}: {path} exists" in res.output and "--force" in res.output
    assert (out.read_bytes(), fig.read_bytes()) == stamp
    assert run([*base, "--out", str(out), "--seed", "3", "--force"]).exit_code == 0
    assert out.read_bytes() != stamp[0]


def test_real_out_folder_with_results_is_refused_before_any_work(tmp_path):
    out = tmp_path / "real"
    out.mkdir()
    (out / "real.parquet").write_bytes(b"finished")
    res = run(["real", "torch-encoder", "--width", "16", "--layers", "2", "--inits", "2",
               "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "--out" in res.output and "--force" in res.output
    assert (out / "real.parquet").read_bytes() == b"finished"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_vit_geometry_and_export_refuse_finished_results(tmp_path):
    geo = tmp_path / "geo"
    geo.mkdir()
    (geo / "geometry.json").write_text("{}")
    res = run(["vit", "geometry", "--dataset", "digits", "--seeds", "1", "--images", "2",
               "--out", str(geo)])
    assert res.exit_code == 2 and "--force" in res.output and _files(geo) == {
        "geometry.json": b"{}"}
    npz = tmp_path / "d.npz"
    npz.write_bytes(b"keep")
    res = run(["vit", "export-data", "--dataset", "digits", "--train", "4", "--test", "4",
               "--out", str(npz)])
    assert res.exit_code == 2 and "--force" in res.output and npz.read_bytes() == b"keep"


@pytest.mark.slow  # a sweep runs first: about 2 s of CPU
def test_a_sweep_of_another_kind_is_refused_and_left_untouched(tmp_path):
    """`vit fair`, `vit depth` and `meanfield table` pointed at another kind's sweep: one line
    naming --out, and not a byte (not even a lock file) added to it."""
    cfg = tmp_path / "s.toml"
    cfg.write_text('name = "g"\nkind = "multi_token"\nruns = 2\nT = 0.2\nseed = 1\n[params]\n'
                   'dt = 0.05\n[grid]\nn = [3]\nbeta = [1.0]\nd = [3]\n')
    sweep = tmp_path / "sweep"
    run_sweep(cfg, sweep, workers=1)
    (sweep / ".lock").unlink(missing_ok=True)
    before = _files(sweep)
    for args in (["vit", "fair", "--size", "fair-tiny"], ["vit", "depth", "--size", "quick"],
                 ["meanfield", "table", "--n", "4", "--K", "4", "--runs", "2", "--time", "0.1"]):
        res = run([*args, "--out", str(sweep)])
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.output and "--out" in res.output.strip().splitlines()[-1]
        assert _files(sweep) == before


@pytest.mark.slow
def test_figure_with_another_seed_keeps_the_saved_result(tmp_path):
    """A saved result is finished work: `figure NAME --seed 1` over the data of seed 0 is
    refused, naming --out and --force, and leaves every byte; with --force it is replaced."""
    args = ["figure", "trajectories", "--size", "tiny", "--out", str(tmp_path)]
    assert CliRunner().invoke(app, args).exit_code == 0
    saved = {p: p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file()}
    res = CliRunner().invoke(app, [*args, "--seed", "1"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("error: --out: ") and "made with other settings" in line
    assert "--force" in line
    assert {p: p.read_bytes() for p in saved} == saved
    res = CliRunner().invoke(app, [*args, "--seed", "1", "--force"])
    assert res.exit_code == 0, res.output
    assert any(p.read_bytes() != b for p, b in saved.items())
    assert CliRunner().invoke(app, [*args, "--seed", "1"]).exit_code == 0  # now its own: reused
