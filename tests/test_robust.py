"""Issue 24, nothing lost, nothing overstated: output paths checked before any work, exit codes
that tell the truth, damaged files named, sweeps that notice a vanished directory, and one rule
for probabilities from runs with an undecided part (`stats.estimate_with_undecided`)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tokensde import TimeGrid
from tokensde.analysis.stats import estimate_with_undecided, wilson
from tokensde.cli import app
from tokensde.io.report import Section, _check_report_path, write_report
from tokensde.io.store import StoreError, load_result, save_result
from tokensde.model.params import ModelParams, ParameterError
from tokensde.sim.simulate import simulate
from tokensde.study.phase import _outside
from tokensde.sweep.config import SweepError
from tokensde.sweep.engine import run_sweep

runner = CliRunner()
SMALL = ("kind = 'multi_token'\nruns = 8\nT = 0.5\nseed = 3\n[params]\ndt = 0.05\n"
         "[grid]\nn = [3]\nbeta = [1.0, 2.0, 3.0]\nd = [3]\n")


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its children that have ended."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def refused(args: list[str], *needles: str, code: int = 2, limit_s: float = 1.0) -> str:
    """Run the CLI: exit `code` within `limit_s` of CPU time, no traceback, an `error:` line
    holding every needle; return the output.

    The limit is on CPU time, which measures the work done before the refusal: wall time
    also counts the waits for a core on a loaded machine (the `vit geometry` refusal takes
    0.03 to 0.09 s of CPU, and once took 1.56 s of wall time under load). A wall limit ten
    times as long still catches a command that waits instead of refusing."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    out = runner.invoke(app, args)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    text = out.output
    assert out.exit_code == code, text
    assert "Traceback" not in text, text
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "error: " in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    assert cpu < limit_s, f"{args} took {cpu:.2f} s of CPU before refusing"
    assert wall < 10 * limit_s, f"{args} took {wall:.2f} s of wall time before refusing"
    return text


# ----------------------------------------------------------------------------- paths before work

@pytest.fixture(scope="module", autouse=True)
def _imported():
    """The commands import their modules lazily; import them once here, so that the time limit
    measures the checks and not the first import of torch and matplotlib."""
    import tokensde.analysis.pair_monte_carlo
    import tokensde.plots.phase
    import tokensde.sim.simulate
    import tokensde.study
    import tokensde.vit  # noqa: F401


@pytest.fixture
def spot(tmp_path):
    """A file with content that must survive, and a place for results that must stay empty."""
    (tmp_path / "afile").write_text("keep me")
    (tmp_path / "res").mkdir()
    yield tmp_path
    assert (tmp_path / "afile").read_text() == "keep me"
    assert not any((tmp_path / "res").iterdir()), list((tmp_path / "res").iterdir())


SIM = ["simulate", "--runs", "20000", "--n", "16", "--layers", "4000"]  # ~minutes if it ran
MC = ["two-token", "mc", "--beta", "1", "--d", "3", "--runs", "100000", "--time", "200",
      "--no-progress"]
HYB = ["two-token", "hybrid", "--beta", "1", "--eps", "0.5", "--runs", "100000",
       "--no-progress"]


@pytest.mark.parametrize(("args", "needles"), [
    ([*SIM, "--plot", "{res}/p.bmp"], ["--plot must end in one of .png", "p.bmp"]),
    ([*SIM, "--out", "{res}/r.txt"], ["--out must end in one of .npz", "r.txt"]),
    ([*SIM, "--out", "{afile}/r.npz"], ["--out must be a file path", "which is a file"]),
    ([*MC, "--out", "{afile}/r.json"], ["--out must be a file path", "which is a file"]),
    ([*MC, "--out", "{res}/r.npz"], ["--out must end in one of .json"]),
    ([*MC, "--out", "{res}"], ["--out must be a file path", "is a directory"]),
    ([*HYB, "--out", "{afile}/r.json"], ["--out must be a file path"]),
    (["two-token", "grid", "--out", "{res}/g", "--figure", "{res}/g.xyz"],
     ["--figure must end in one of"]),
    (["two-token", "grid", "--out", "{afile}", "--figure", "{res}/g.png"],
     ["--out must be a directory", "is a file"]),
    (["reproduce", "--size", "tiny", "--out", "{afile}"], ["--out must be a directory"]),
    (["reproduce", "--size", "tiny", "--out", "{afile}/sub"], ["--out must be a directory",
                                                               "which is a file"]),
    (["figure", "phase-diagram", "--size", "tiny", "--out", "{afile}"],
     ["--out must be a directory"]),
    (["vit", "compare", "--out", "{afile}"], ["--out must be a directory"]),
    (["vit", "geometry", "--out", "{afile}/x"], ["--out must be a directory"]),
    (["vit", "depth", "--out", "{afile}"], ["--out must be a directory"]),
    (["sweep", "plot", "{res}", "{afile}"], ["OUT_DIR must be a directory"]),
])
def test_every_output_is_checked_before_any_work(spot, args, needles):
    """Each command refuses a bad output within a second and writes nothing (the runs asked
    for would take minutes)."""
    args = [a.format(res=spot / "res", afile=spot / "afile") for a in args]
    refused(args, *needles)


def test_read_only_directory_is_refused_by_the_option_name(spot, monkeypatch):
    """As root, permission bits do not stop a write, so the check is shown through os.access
    (the read-only mount is read from statvfs)."""
    real = os.access
    ro = spot / "res"
    monkeypatch.setattr(os, "access", lambda p, m: (not m & os.W_OK or Path(p) != ro) and real(p, m))
    refused([*SIM, "--out", f"{ro}/r.npz"], "--out: cannot write", "permission denied")
    refused([*MC, "--out", f"{ro}/r.json"], "--out: cannot write")
    refused(["reproduce", "--size", "tiny", "--out", str(ro)], "--out: cannot write")


# ----------------------------------------------------------------------------- reproduce, figure

@pytest.fixture
def damaged(tmp_path):
    """A results directory whose saved decision-times result is not a results file."""
    (tmp_path / "data").mkdir()
    bad = tmp_path / "data" / "decision-times-tiny.npz"
    bad.write_bytes(b"PK\x03\x04 not really a zip archive")
    return tmp_path, bad


def test_reproduce_exits_1_and_names_the_damaged_file(damaged):
    out, bad = damaged
    text = refused(["reproduce", "--size", "tiny", "--out", str(out), "--only",
                    "decision-times"], str(bad), "delete it", "--skip decision-times",
                   "1 of 1 sections failed", code=1, limit_s=30)
    assert "BadZipFile" not in text.split("not a readable saved result")[0]
    record = json.loads((out / "reproduce.json").read_text())
    assert list(record["failed"]) == ["decision-times"]
    assert bad.read_bytes().startswith(b"PK")  # the damaged file is left for the user


def test_figure_names_the_damaged_file_without_traceback(damaged):
    out, bad = damaged
    line = refused(["figure", "decision-times", "--size", "tiny", "--out", str(out)], str(bad),
                   "delete it to recompute it")
    assert line.count("\n") == 1


def test_report_html_not_ours_is_never_overwritten(damaged):
    out, _ = damaged
    mine = out / "report.html"
    mine.write_text("<html>my own notes</html>")
    args = ["reproduce", "--size", "tiny", "--out", str(out), "--only", "decision-times"]
    refused(args, "report.html exists and was not written by tokensde", "--force")
    assert mine.read_text() == "<html>my own notes</html>"
    assert not (out / "reproduce.json").exists()  # refused before any section ran
    refused([*args, "--force"], "sections failed", code=1, limit_s=30)
    assert "Generated by tokensde" in mine.read_text()
    # our own report is replaced without --force
    refused(args, "sections failed", code=1, limit_s=30)
    with pytest.raises(ParameterError, match="not written by tokensde"):
        mine.write_text("other")
        write_report([Section("a", "A", "claim")], mine)
    assert _check_report_path(mine, "path", force=True) == mine


def test_empty_selection_of_sections_is_refused(tmp_path):
    for only in ("", " , "):
        refused(["reproduce", "--size", "tiny", "--out", str(tmp_path / "r"), "--only", only],
                "--only must name at least one figure")
    refused(["reproduce", "--size", "tiny", "--out", str(tmp_path / "r"), "--skip", ""],
            "--skip must name at least one figure")
    assert not (tmp_path / "r").exists()


# ----------------------------------------------------------------------------- horizons

@pytest.mark.parametrize("cmd", [MC[:6], HYB[:6]])
def test_two_token_commands_refuse_a_horizon_off_the_step_grid(cmd):
    refused([*cmd, "--runs", "10", "--time", "1", "--dt", "0.3"],
            "T must be a whole number of layer steps dt", "T = 1.2", "0.25")


# ----------------------------------------------------------------------------- the reporting rule

def test_estimate_with_undecided_against_hand_computed_wilson():
    """89 % undecided: the estimate is over the 33 decided runs, the bounds span every way the
    267 undecided runs could end, and one decimal is all the interval supports."""
    e = estimate_with_undecided(20, 13, 300)
    z = 1.959963984540054

    def wil(k, n, sign):
        p = k / n
        c = (p + z * z / (2 * n)) / (1 + z * z / n)
        h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return c + sign * h

    assert e.p == pytest.approx(20 / 33)
    assert e.ci == pytest.approx((wil(20, 33, -1), wil(20, 33, 1)), abs=1e-12)
    assert e.bounds == pytest.approx((wil(20, 300, -1), wil(287, 300, 1)), abs=1e-12)
    assert e.undecided == pytest.approx(0.89)
    assert e.digits == 1  # half-width 0.158
    assert e.text().startswith("0.6 [0.4, 0.8] (95% Wilson over 33 decided runs); 89% undecided")
    assert e.contains(0.1) and e.contains(0.9) and not e.contains(0.99)
    # nothing undecided: the bounds are the interval itself, more digits
    f = estimate_with_undecided(150, 150, 300)
    assert f.bounds == pytest.approx(f.ci) and f.digits == 2 and f.undecided == 0
    assert f.text() == "0.50 [0.44, 0.56] (95% Wilson over 300 decided runs)"
    # every run undecided: no estimate, bounds [0, 1] contain any theory
    g = estimate_with_undecided(0, 0, 300)
    assert math.isnan(g.p) and g.ci is None and g.bounds == (0.0, 1.0) and g.contains(0.37)
    # every run identical (nothing moves): no interval, bounds without sampling error
    h = estimate_with_undecided(0, 40, 40, exact=True)
    assert h.ci is None and h.bounds == (0.0, 0.0) and "no interval" in h.text()
    with pytest.raises(ValueError, match="hits \\+ other <= runs"):
        estimate_with_undecided(5, 6, 10)


def test_grid_table_does_not_flag_cells_whose_undecided_runs_allow_the_theory():
    df = pd.DataFrame({"antipodal": [0, 40, 10, 0], "merged": [0, 60, 5, 100],
                       "runs": [100, 100, 100, 100], "theory_tol": [0.3, 0.4, 0.3, 0.3]})
    # all undecided; 0.4 in the Wilson interval of 40/100; 10 of 15 decided but 85 undecided
    # allow [0.05, 0.95]; 0 of 100 decided antipodal excludes 0.3
    assert _outside(df).tolist() == [False, False, False, True]
    lo, hi = wilson(40, 100)
    assert estimate_with_undecided(40, 60, 100).bounds == pytest.approx((lo, hi))


def test_two_token_mc_reports_over_decided_runs_with_bounds():
    out = runner.invoke(app, [*MC[:6], "--runs", "300", "--time", "0.5", "--json",
                              "--no-progress"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    c = r["counts"]
    assert c["undecided"] > 0.8 * c["runs"]  # T = 0.5 leaves most runs undecided
    dec = c["antipodal"] + c["merged"]
    assert r["undecided"] == pytest.approx(c["undecided"] / 300)
    assert r["bounds"][0] == pytest.approx(float(wilson(c["antipodal"], 300)[0]))
    assert r["bounds"][1] == pytest.approx(float(wilson(300 - c["merged"], 300)[1]))
    if dec:
        assert r["p_anti"] == pytest.approx(c["antipodal"] / dec)
    text = runner.invoke(app, [*MC[:6], "--runs", "300", "--time", "0.5", "--no-progress"])
    assert "% undecided: between" in text.output
    assert "0.222" not in text.output.split("antipodal")[1].split("\n")[0]  # no 6-digit claim


def test_sigma_zero_gets_no_interval():
    out = runner.invoke(app, [*MC[:6], "--runs", "20", "--time", "2", "--sigma", "0",
                              "--rho0", "0.3", "--json", "--no-progress"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    assert r["ci"] is None and r["estimate"]["exact"] is True
    out = runner.invoke(app, ["simulate", "--json", "--runs", "20", "--n", "2", "--layers", "10",
                              "--init", "pair", "--rho0", "0.5", "--sigma", "0"])
    s = json.loads(out.output)
    assert s["p_one_cluster"]["ci"] is None and s["frac_runs_undecided"] == 1.0


def test_simulate_json_has_intervals_and_the_undecided_fraction():
    out = runner.invoke(app, ["simulate", "--json", "--runs", "200", "--n", "3", "--d", "3",
                              "--time", "20", "--dt", "0.05", "--tol", "0.01"])
    assert out.exit_code == 0, out.output
    s = json.loads(out.output)
    one = s["p_one_cluster"]
    und = s["frac_runs_undecided"]
    assert one["undecided"] == pytest.approx(und) and 0 <= und < 1
    k = round(s["frac_runs_one_cluster"] * 200)
    assert one["p"] == pytest.approx(k / one["decided"])
    assert one["ci"] == pytest.approx([float(v) for v in wilson(k, one["decided"])])


# ----------------------------------------------------------------------------- results files

@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("res")
    path = save_result(simulate(ModelParams(n=3, d=3), TimeGrid.make(layers=5), runs=4, seed=0),
                       tmp / "ok.npz")
    return tmp, dict(np.load(path))


@pytest.mark.parametrize(("change", "needle"), [
    (lambda z, m: m.update(runs=7), "has shape (4, 3, 3), but the header says (7, 3, 3)"),
    (lambda z, m: m["params"].update(d=5), "but the header says (4, 3, 5)"),
    (lambda z, m: m["params"].update(n=2), "(runs=4, n=2, d=3)"),
    (lambda z, m: z["gram"].__setitem__((0, 1, 0, 1), np.nan), "1 nan or infinite"),
    (lambda z, m: z.update(checkpoints=np.array([0, 9])), "within [0, steps = 5]"),
    (lambda z, m: z.update(checkpoints=np.array([3, 1])), "must increase"),
])
def test_load_result_checks_every_array_against_its_header(saved, change, needle):
    tmp, z = saved
    z = {k: v.copy() for k, v in z.items()}
    meta = json.loads(str(z["meta"]))
    change(z, meta)
    z["meta"] = np.array(json.dumps(meta))
    np.savez(tmp / "bad.npz", **z)
    with pytest.raises(StoreError, match=r"bad\.npz") as err:
        load_result(tmp / "bad.npz")
    assert needle in str(err.value)


def test_load_result_of_an_npy_names_it(tmp_path):
    np.save(tmp_path / "a.npy", np.eye(3))
    with pytest.raises(StoreError, match=r"a\.npy is a single numpy array \(\.npy\)"):
        load_result(tmp_path / "a.npy")


# ----------------------------------------------------------------------------- sweeps

@pytest.mark.parametrize("remove", ["dir", "manifest", "cells"])
def test_sweep_notices_its_directory_vanishing(tmp_path, remove):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SMALL)
    out = tmp_path / "out"
    seen = []

    def vanish(row, counts):
        seen.append(counts["ran"])
        if counts["ran"] == 1:
            {"dir": lambda: shutil.rmtree(out), "manifest": lambda: (out / "sweep.json").unlink(),
             "cells": lambda: shutil.rmtree(out / "cells")}[remove]()

    with pytest.raises(SweepError, match="vanished while the sweep ran"):
        run_sweep(cfg, out, on_cell=vanish)
    assert seen == [1]  # stopped at the next cell, nothing more written
    assert not (out / "table.parquet").exists()


def test_sweep_summary_rows_are_the_table_rows(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SMALL)
    s = run_sweep(cfg, tmp_path / "out")
    assert s["rows"] == s["done"] == 3 == len(pd.read_parquet(s["table"]))


@pytest.mark.slow  # worker processes start: about 3 s of CPU
def test_workers_are_capped_by_cells_and_cpus_and_reported(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SMALL)
    s = run_sweep(cfg, tmp_path / "out", workers=1000)
    assert s["workers_asked"] == 1000 and s["workers"] == min(3, os.cpu_count() or 1)
    again = run_sweep(cfg, tmp_path / "out", workers=8)  # nothing left to run: one worker
    assert again["ran"] == 0 and again["workers"] == 1


@pytest.mark.parametrize(("args", "needles"), [
    (["simulate", "--dtype", "float16", "--runs", "3"], ["dtype must be one of float64, float32",
                                                         "float16"]),
    (["simulate", "--heads", "64", "--n", "512", "--d", "512", "--runs", "100000",
      "--layers", "10"], ["64 heads", "--n, --d, --heads or --checkpoints"]),
    (["two-token", "grid", "--out", "x", "--figure", "x.png", "--ds", "2.5"],
     ["--ds must be comma-separated integers"]),
    (["two-token", "grid", "--out", "x", "--figure", "x.png", "--betas", ","],
     ["--betas must name at least one value"]),
])
def test_messages_name_the_right_thing(tmp_path, args, needles):
    os.chdir(tmp_path)
    refused(args, *needles)
    assert not list(tmp_path.iterdir())


def test_sde_step_warns_with_the_number_it_checked():
    with pytest.warns(RuntimeWarning, match=r"sigma\^2 \(d - 1\) dt = 0.45 .* is biased"):
        simulate(ModelParams(n=2, d=10), TimeGrid.make(T=0.1, dt=0.05), runs=2, scheme="sde")
    with pytest.warns(RuntimeWarning, match=r"= 4.9 .*reverses the token.*dt <= 0.00408"):
        simulate(ModelParams(n=2, d=50), TimeGrid.make(T=0.1, dt=0.1), runs=2, scheme="sde")


# ----------------------------------------------------------------------------- closed classes

@pytest.mark.parametrize("d", [2.0, 2.5, 3.0, 3.5, 4.0, 7.0])
def test_uniform_pair_density_is_its_closed_form_up_to_the_ends(d):
    """(1 - rho^2)^((d-3)/2) / (2^(d-2) B((d-1)/2, (d-1)/2)), and at rho = +-1 its limit:
    +inf below d = 3, 1/2 at d = 3 (the uniform law on [-1, 1]), 0 above; never nan."""
    from scipy.special import beta as beta_fn

    from tokensde.theory.two_tokens import uniform_pair_density

    a = (d - 1) / 2
    rho = np.array([-0.999, -0.3, 0.0, 0.7, 0.9999])
    closed = (1 - rho**2) ** ((d - 3) / 2) / (2 ** (d - 2) * beta_fn(a, a))
    np.testing.assert_allclose(uniform_pair_density(rho, d), closed, rtol=1e-12)
    edge = uniform_pair_density(np.array([-1.0, 1.0]), d)
    want = math.inf if d < 3 else (0.5 if d == 3 else 0.0)
    assert np.all(edge == want), (d, edge)
    assert uniform_pair_density(1.0, 3) == 0.5 and uniform_pair_density(-1, 3.0) == 0.5


def test_fit_rate_refuses_what_has_no_slope():
    from tokensde.meanfield.convergence import _MIN_FIT_POINTS, fit_rate

    k = np.array([8.0, 16.0, 32.0, 64.0])
    assert fit_rate(k, 3.0 * k**-1.5) == pytest.approx(-1.5, abs=1e-12)
    assert fit_rate(k, [0.3, np.nan, 0.3 / 4, 0.0]) == pytest.approx(-1.0, abs=1e-12)
    for bad_k, bad_err, needle in [([8], [0.1], f"at {_MIN_FIT_POINTS} or more distinct k"),
                                   ([8, 8], [0.1, 0.2], "distinct k"),
                                   ([8, 16], [np.nan, 0.2], "distinct k"),
                                   ([8, 16], [0.1], "same length"),
                                   ([8, -16], [0.1, 0.2], "k must be finite numbers > 0"),
                                   (["a", "b"], [0.1, 0.2], "k must be an array of real")]:
        with pytest.raises(ParameterError, match=needle):
            fit_rate(bad_k, bad_err)


def test_a_huge_reference_node_count_is_refused_by_name_and_range(monkeypatch):
    """The top of K_ref comes from the memory available (TOKENSDE_MEMORY here): 1 GiB holds
    2^20 nodes of NODE_BYTES = 1 KiB."""
    from tokensde.meanfield.convergence import _NODE_BYTES, _max_nodes, node_convergence

    monkeypatch.setenv("TOKENSDE_MEMORY", "1G")
    assert _NODE_BYTES == 1024 and _max_nodes() == 2**20
    with pytest.raises(ParameterError, match=r"K_ref must be an integer from 3 to 1048576 .*"
                                             r"1.0 GiB of memory available"):
        node_convergence(1.0, [8], [0.1], K_ref=2**20 + 1)
    refused(["meanfield", "convergence", "--K", "8", "--time", "0.1", "--K-ref", str(10**20)],
            "K_ref must be an integer from 3 to 1048576", "TOKENSDE_MEMORY")
    for bad in (None, 8, "8"):
        with pytest.raises(ParameterError, match="Ks must be a non-empty sequence"):
            node_convergence(1.0, bad, [0.1], K_ref=16)


def test_sweep_plot_refuses_a_sweep_it_cannot_draw(tmp_path):
    cfg = tmp_path / "null.toml"
    cfg.write_text('kind = "null"\nruns = 1\nseed = 1\n[grid]\nx = [0.0, 1.0]\n')
    run_sweep(cfg, tmp_path / "null")
    refused(["sweep", "plot", str(tmp_path / "null"), str(tmp_path / "figs")],
            "lacks the columns model, n, d, beta of a multi_token sweep", "two_token")
    assert not (tmp_path / "figs").exists()


@pytest.mark.parametrize(("beta", "d", "why"), [(1.0, 2000, "underflows to 0"),
                                                 (1e10, 2, "scipy's ive is nan")])
def test_token_noise_theory_refuses_where_its_bessel_functions_fail(beta, d, why):
    """Outside float64's range of I_nu(beta) e^-beta the theory names beta and d (it gave nan,
    or a bare 'math domain error'); inside it the closed form holds (USA at d = 2:
    K_c = beta / (2 I_1(beta)), from c_1 = I_1(beta))."""
    from scipy.special import iv

    from tokensde.theory import token_noise as tn

    for attention in ("usa", "softmax"):
        with pytest.raises(ParameterError, match=re.escape(f"beta = {beta:g} and d = {d}") + f".*{why}"):
            tn.critical_coupling(beta, d, attention)
    assert tn.critical_coupling(2.0, 2, "usa") == pytest.approx(2.0 / (2 * iv(1, 2.0)), rel=1e-12)
