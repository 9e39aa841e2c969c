"""The step error of a two-token probability beside its Monte Carlo error: the calibrated first-
order coefficient, its scaling with dt, the refusals to guess, and the command-line reports."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from tokensde import ModelParams
from tokensde.analysis.pair_monte_carlo import spec_params
from tokensde.analysis.step_error import (
    CALIBRATION,
    StepError,
    add_step_errors,
    mc_error,
    pair_step_error,
)
from tokensde.cli import app


def test_the_calibration_is_first_order_and_resolved():
    # each key: the bias at the two steps is in ratio 2 within 3 standard errors, and c is
    # resolved (|c| > 2 se), or the table says nothing about the sign
    assert len(CALIBRATION) >= 3
    for cal in CALIBRATION:
        assert abs(cal.z_linear) < 3, cal
        assert cal.dts[1] == pytest.approx(2 * cal.dts[0])
        assert cal.c_se > 0 and cal.runs >= 10000


def test_the_step_error_is_c_dt_for_a_calibrated_key_and_none_elsewhere():
    cal = CALIBRATION[0]
    p = spec_params(cal.beta, cal.d)
    a, b = pair_step_error(p, cal.rho0, 0.01), pair_step_error(p, cal.rho0, 0.02)
    assert a.bias == pytest.approx(cal.c * 0.01) and b.bias == pytest.approx(2 * a.bias)
    assert b.se == pytest.approx(2 * a.se)
    for other, start, scheme, why in [
            (p, "uniform", "network", "not calibrated"),
            (p, cal.rho0 + 0.1, "network", "not calibrated"),
            (p, cal.rho0, "sde", "scheme 'sde'"),
            (p.with_(n=3), cal.rho0, "network", "two tokens"),
            (p.with_(sigma=0.5), cal.rho0, "network", "two tokens"),
            (ModelParams(n=2, d=cal.d, beta=cal.beta, attention="usa"), cal.rho0, "network",
             "two tokens")]:
        s = pair_step_error(other, start, 0.01, scheme)
        assert s.bias is None and why in s.source and s.verdict(0.01) == "unknown"
        assert "not estimated" in s.text(0.01)


def test_the_verdict_compares_the_step_error_with_the_monte_carlo_error():
    s = StepError(-0.01, 0.002, 0.05, "first order")
    assert s.verdict(0.011) == "below" and s.verdict(0.009) == "not below"
    assert "NOT below" in s.text(0.005) and s.safe_dt(0.005) == pytest.approx(0.0125)
    assert mc_error(0.5, 2500) == pytest.approx(0.01) and math.isnan(mc_error(0.5, 0))
    assert s.verdict(math.nan) == "unknown" and "no decided run" in s.text(math.nan)


def test_simulate_puts_the_step_error_beside_each_probability_and_warns():
    cal = CALIBRATION[0]
    est = {"p": 0.4, "decided": 10**7}  # a Monte Carlo error far below any step error
    summary = {"p_bipolar": dict(est), "p_one_cluster": dict(est, p=0.6)}
    add_step_errors(summary, spec_params(cal.beta, cal.d), cal.rho0, 0.05, "network")
    bip, one = summary["p_bipolar"]["step_error"], summary["p_one_cluster"]["step_error"]
    assert bip["bias"] == pytest.approx(cal.c * 0.05) and one["bias"] == pytest.approx(-bip["bias"])
    assert bip["verdict"] == one["verdict"] == "not below"
    add_step_errors(summary, ModelParams(n=3, d=4), cal.rho0, 0.05, "network")
    assert summary["p_bipolar"]["step_error"]["bias"] is None


def test_the_commands_print_the_step_error():
    cal = CALIBRATION[0]
    args = ["--beta", f"{cal.beta:g}", "--d", str(cal.d), "--runs", "64", "--seed", "1"]
    out = CliRunner().invoke(app, ["simulate", "--n", "2", "--init", "pair", "--rho0",
                                   f"{cal.rho0:g}", "--time", "2", "--dt", "0.05", *args])
    assert out.exit_code == 0, out.output
    assert "step error" in out.output and "at dt = 0.05" in out.output
    out = CliRunner().invoke(app, ["two-token", "mc", "--rho0", f"{cal.rho0:g}", "--time", "2",
                                   "--no-progress", *args])
    assert out.exit_code == 0, out.output
    assert "step       step error" in out.output
