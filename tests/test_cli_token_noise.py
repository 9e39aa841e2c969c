"""`tokensde token-noise theory | order` (docs/token-noise.md): runs, one-line errors naming the
option, and --out refusing an existing file without --force."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.study.noise_threshold import critical_token_noise

runner = CliRunner()
ORDER = ["token-noise", "order", "--n", "16", "--runs", "2", "--time", "2", "--burn", "1",
         "--dt", "0.02", "--samples", "5"]


def test_theory_prints_the_threshold():
    out = runner.invoke(app, ["token-noise", "theory", "--beta", "1", "--d", "2", "--json"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    assert r["tau_c"] == pytest.approx(1.0631642, abs=1e-6)  # docs/token-noise.md
    assert r["K_c"] == pytest.approx(1 / r["tau_c"] ** 2) and r["continuous"] is True
    assert r["branch_end"] == 1.0 and r["beta_star"] == pytest.approx(2.4469, abs=1e-4)
    text = runner.invoke(app, ["token-noise", "theory", "--beta", "2.5", "--d", "3",
                               "--attention", "softmax", "--no-branch"])
    assert text.exit_code == 0, text.output
    tau_c = critical_token_noise(2.5, 3, "softmax")
    assert f"tau_c  = {tau_c:.8g}" in text.output and "tau_s" not in text.output
    # softmax has no beta_*: none is printed, and the layer steps of the rule are
    assert "beta_* =" not in text.output and "softmax has no beta_*" in text.output
    assert "layer step for a threshold within 1 %" in text.output


def test_theory_names_the_step_bias_of_a_given_step():
    """beta = 5, d = 2: at dt = 0.05 the network scheme's threshold is 2.28 tau_c (+128 %)."""
    out = runner.invoke(app, ["token-noise", "theory", "--beta", "5", "--no-branch", "--dt",
                              "0.05", "--json"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    assert r["shifts"]["network"]["exact"] == pytest.approx(1.2844, abs=1e-3)
    assert r["steps"]["sde"] > r["steps"]["network"] and r["beta_star"] is not None


def test_order_takes_a_step_from_the_rule_and_warns_on_a_bad_one():
    """beta = 5, d = 2: by default the SDE scheme at the rule's step, with its shift printed
    beside the Monte Carlo error and no warning; --dt 0.05 given by hand warns, naming the
    expected bias and the step that meets the rule, before the run."""
    short = ["token-noise", "order", "--beta", "5", "--n", "16", "--runs", "2", "--time", "0.1",
             "--burn", "0.05", "--samples", "3", "--ratios", "1.25"]
    out = runner.invoke(app, short)
    assert out.exit_code == 0, out.output
    assert "warning" not in out.output
    assert "sde scheme, dt = 0.005 (chosen by the step rule); step error: the scheme's " \
        "threshold sits +0.452 % off tau_c" in out.output
    bad = runner.invoke(app, [*short, "--dt", "0.05", "--scheme", "network"])
    assert bad.exit_code == 0, bad.output
    first = bad.output.splitlines()[0]
    assert first.startswith("warning: at dt = 0.05 the network scheme's many-token threshold "
                            "sits +128 % off tau_c") and "dt <= 0.005 (sde)" in first


@pytest.mark.slow
def test_order_with_defaults_reads_disordered_above_tau_c():
    """The documented command at beta = 5 (d = 2, n = 256, 4 runs over depth [30, 60]) reads
    disordered at 1.25 and 1.6 tau_c: n E r^2 below 8 (linear fluctuations give 2.8 and 1.6;
    the network scheme at dt = 0.05 orders there, r near 0.99). About 25 s of CPU."""
    out = runner.invoke(app, ["token-noise", "order", "--beta", "5", "--n", "256", "--ratios",
                              "1.25,1.6", "--json"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output[out.output.index("{"):])
    assert r["step"]["scheme"] == "sde" and abs(r["step"]["shift"]) < 0.01
    assert all(256 * row["r2"] < 8 for row in r["rows"]), r["rows"]


def test_order_prints_a_table_and_saves_json(tmp_path):
    path = tmp_path / "order.json"
    out = runner.invoke(app, [*ORDER, "--ratios", "0.5,2", "--out", str(path)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "tau_c = 1.06316" in lines[0] and len([x for x in lines if "      0.5 " in x]) == 1
    saved = json.loads(path.read_text())
    assert saved["kind"] == "tokensde.token_noise_order" and saved["n"] == 16
    assert [round(r["ratio"], 9) for r in saved["rows"]] == [0.5, 2.0]
    assert saved["rows"][0]["r"] > saved["rows"][1]["r"]  # ordered below tau_c, not above
    # an existing --out is refused before any work, and replaced with --force
    again = runner.invoke(app, [*ORDER, "--taus", "0.4", "--out", str(path)])
    assert again.exit_code == 2 and "--out" in again.output and "--force" in again.output
    assert json.loads(path.read_text()) == saved
    forced = runner.invoke(app, [*ORDER, "--taus", "0.4", "--out", str(path), "--force",
                                 "--json"])
    assert forced.exit_code == 0, forced.output
    assert [r["token_noise"] for r in json.loads(path.read_text())["rows"]] == [0.4]
    # the same seed gives the same numbers
    assert json.loads(forced.output)["rows"][0]["r"] == json.loads(runner.invoke(
        app, [*ORDER, "--taus", "0.4", "--json"]).output)["rows"][0]["r"]


@pytest.mark.parametrize(("args", "named"), [
    (["token-noise", "theory", "--beta", "0"], "--beta"),
    (["token-noise", "theory", "--d", "1"], "--d"),
    (["token-noise", "theory", "--attention", "linear"], "--attention"),
    (["token-noise", "theory", "--mean-scale", "nan"], "--mean-scale"),
    ([*ORDER, "--runs", "1"], "--runs"),
    ([*ORDER, "--n", "0"], "--n"),
    ([*ORDER, "--taus", "-1"], "--taus"),
    ([*ORDER, "--taus", "a,b"], "--taus"),
    ([*ORDER, "--ratios", "0"], "--ratios"),
    ([*ORDER, "--ratios", "1", "--taus", "1"], "--taus"),
    ([*ORDER, "--burn", "5"], "--burn"),
    ([*ORDER, "--dt", "5"], "--dt"),
    ([*ORDER, "--samples", "500"], "--samples"),
    ([*ORDER, "--scheme", "rk4"], "--scheme"),
    ([*ORDER, "--start", "sorted"], "--start"),
    ([*ORDER, "--out", "x.npz"], "--out"),
])
def test_bad_input_is_a_one_line_error_naming_the_option(args, named, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = runner.invoke(app, args)
    assert out.exit_code == 2, out.output
    errors = [x for x in out.output.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and named in errors[0], out.output
    assert "Traceback" not in out.output and not list(tmp_path.iterdir())


def test_a_long_run_is_refused_without_yes(monkeypatch):
    monkeypatch.setenv("TOKENSDE_MAX_HOURS", "1e-6")
    longer = [*ORDER, "--ratios", "1", "--dt", "0.005"]  # 400 layers
    out = runner.invoke(app, longer)
    assert out.exit_code == 2 and "--yes" in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1
    assert runner.invoke(app, [*longer, "--yes"]).exit_code == 0
