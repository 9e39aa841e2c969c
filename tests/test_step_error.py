"""The step error beside the Monte Carlo error: the verdict and its text, and the command-line
reports of the measured step error (analysis.step_coupled measures it)."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from tokensde.analysis.step_error import StepError, mc_error
from tokensde.cli import app


def test_the_verdict_compares_the_step_error_with_the_monte_carlo_error():
    s = StepError(-0.01, 0.002, 0.05, "first order")
    assert s.verdict(0.011) == "below" and s.verdict(0.009) == "not below"
    assert "NOT below" in s.text(0.005) and s.safe_dt(0.005) == pytest.approx(0.0125)
    assert mc_error(0.5, 2500) == pytest.approx(0.01) and math.isnan(mc_error(0.5, 0))
    assert s.verdict(math.nan) == "unknown" and "no decided run" in s.text(math.nan)
    # a measurement is judged by its interval: below, not below, or not resolved
    m = StepError(-0.01, 0.002, 0.05, "measured", resolve=True)
    assert m.verdict(0.015) == "below" and m.verdict(0.005) == "not below"
    assert m.verdict(0.012) == "not resolved" and "not resolved" in m.text(0.012)
    assert m.safe_dt(0.007) == pytest.approx(0.05 * 0.007 / 0.014)
    none = StepError(None, math.nan, 0.05, "why")
    assert none.verdict(0.01) == "unknown" and "not estimated (why)" in none.text(0.01)


def test_the_commands_print_the_step_error():
    args = ["--beta", "2", "--d", "4", "--runs", "32", "--seed", "1", "--time", "10", "--dt",
            "0.1"]
    out = CliRunner().invoke(app, ["simulate", "--n", "2", "--init", "pair", "--rho0", "-0.5",
                                   "--until", "decided", *args])
    assert out.exit_code == 0, out.output
    assert "step error" in out.output and "at dt = 0.1" in out.output
    assert "coupled at dt, 2 dt and 4 dt" in out.output
    out = CliRunner().invoke(app, ["two-token", "mc", "--rho0", "-0.5", "--no-progress", *args])
    assert out.exit_code == 0, out.output
    assert "step       step error" in out.output and "coupled at dt, 2 dt and 4 dt" in out.output
