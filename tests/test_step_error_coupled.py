"""The step error measured by coupled step doubling: the paired estimates, the coupling's law,
Richardson against the exact two-token probability, the chosen step and the command's warning."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tokensde import ModelParams, TimeGrid, simulate
from tokensde.analysis.clusters import Outcome
from tokensde.analysis.pair_monte_carlo import spec_params
from tokensde.analysis.step_coupled import (
    _layers_for,
    _paired_estimates,
    _wanted_step,
    choose_step,
    estimates_of,
    measure_step_error,
    simulate_with_step_error,
)
from tokensde.analysis.step_error import mc_error
from tokensde.cli import app
from tokensde.model.params import ParameterError
from tokensde.sim.batch import _initial_tokens
from tokensde.sim.coupled import _coupled_steps
from tokensde.sim.options import Execution, InitialState, Recording, StepControl, StoppingRule
from tokensde.sim.rng import RunStreams
from tokensde.sim.simulate import _coupling_refusal, _step_runs

S, B, U = Outcome.SINGLE, Outcome.BIPOLAR, Outcome.UNDECIDED


def test_paired_estimates_are_the_ratio_difference_and_richardson():
    # 10 runs: at dt 3 bipolar of 9 decided, at 2 dt 4 of 10; by hand
    fine = [B, B, B, S, S, S, S, S, S, U]
    coarse = [B, B, B, B, S, S, S, S, S, S]
    e = _paired_estimates(np.array([fine, coarse]).T)["p_bipolar"]
    assert e.fine == pytest.approx(3 / 9) and e.coarse == pytest.approx(4 / 10)
    assert e.bias == pytest.approx(0.4 - 1 / 3) and e.richardson == pytest.approx(2 / 3 - 0.4)
    # the paired error: std of the influence differences over sqrt(runs)
    uf = (np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 0]) - (1 / 3) * np.array([1] * 9 + [0])) / 0.9
    uc = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0]) - 0.4
    assert e.bias_se == pytest.approx((uc - uf).std(ddof=1) / math.sqrt(10))
    # the two steps mostly agree: the paired error is below that of independent samples
    assert e.bias_se < 0.6 * e.independent_se
    # two levels: no order check, the first-order forms, and the report says why
    assert e.levels == 2 and e.first_order() is None and e.estimate() == (e.bias, e.bias_se)
    assert "not a multiple of 4" in e.step_error(0.1).source
    one = _paired_estimates(np.array([fine, coarse]).T)["p_one_cluster"]
    assert one.bias == pytest.approx(-e.bias) and one.bias_se == pytest.approx(e.bias_se)
    with pytest.raises(ParameterError, match="shape"):
        _paired_estimates(np.zeros((4, 4)))


def test_three_levels_give_the_order_check_and_the_second_order_forms():
    # P(dt) = 0.2, P(2 dt) = 0.3, P(4 dt) = 0.6 over 10 decided runs: b1 = 0.1, b2 = 0.3
    fine = [B, B, S, S, S, S, S, S, S, S]
    coarse = [B, B, B, S, S, S, S, S, S, S]
    four = [B, B, B, B, B, B, S, S, S, S]
    e = _paired_estimates(np.array([fine, coarse, four]).T)["p_bipolar"]
    assert e.levels == 3 and e.coarse4 == pytest.approx(0.6)
    assert e.bias4 == pytest.approx(0.3) and e.order == pytest.approx(0.3 - 2 * 0.1)
    assert e.step == pytest.approx((5 * 0.1 - 0.3) / 3)
    assert e.richardson2 == pytest.approx((8 * 0.2 - 6 * 0.3 + 0.6) / 3)
    # for P(h) = p0 + c1 h + c2 h^2 (h in units of dt) the second-order forms are exact
    p0, c1, c2 = 0.25, 0.02, 0.01
    P = [p0 + c1 * h + c2 * h * h for h in (1, 2, 4)]
    b1, b2 = P[1] - P[0], P[2] - P[1]
    assert (5 * b1 - b2) / 3 == pytest.approx(P[0] - p0)
    assert (8 * P[0] - 6 * P[1] + P[2]) / 3 == pytest.approx(p0)
    # the paired error of the order check: of 2 u(dt) - 3 u(2 dt) + u(4 dt), all decided
    u = [np.array(c, dtype=float) == B for c in (fine, coarse, four)]
    u = [x - x.mean() for x in u]
    assert e.order_se == pytest.approx((2 * u[0] - 3 * u[1] + u[2]).std(ddof=1) / math.sqrt(10))
    # |order| = 0.1 is within 2 of its errors here: 'first order'; a resolved one is named
    assert e.first_order() and e.order_text() == "order check: first order"
    big = replace(e, order=0.3, order_se=0.1)
    assert big.first_order() is False
    assert big.order_text() == "order check: second order visible, b2/b1 = 3.00"
    # either way the second-order forms are reported, their error widened by |b2 - 2 b1| / 3
    for x, spread in ((e, 0.1 / 3), (big, 0.1)):
        assert x.estimate() == pytest.approx((e.step, math.hypot(e.step_se, spread)))
        ex = x.extrapolated()
        assert ex["p"] == pytest.approx(e.richardson2) and ex["form"].startswith("(8 P(dt)")
        assert ex["se"] == pytest.approx(math.hypot(e.richardson2_se, spread))
    assert estimates_of({"estimates": {"p_bipolar": big.to_dict()}})["p_bipolar"] == big


def test_the_coarse_layers_have_the_law_of_networks_drawn_at_2dt_and_4dt():
    # mean of <x1, x2> at T = 1 from rho0 = 0 (d = 3, beta = 1): the coupled networks at 2 dt
    # and 4 dt (V = sum of the fine V over sqrt k) against simulate at those steps; a coarse
    # layer taking the plain sum (k times the variance) moves the mean by about 0.1, 10
    # standard errors
    p, runs, dt = spec_params(1.0, 3), 3000, 0.125
    rs = RunStreams(3, runs)
    x0 = _initial_tokens("pair", p, rs, 0, torch.float64, 0.0)
    three = _coupled_steps(x0, p, 8, dt, rs, levels=3)
    # the levels at dt and 2 dt do not depend on a 4 dt level beside them
    assert torch.equal(three[:, :2], _coupled_steps(x0, p, 8, dt, RunStreams(3, runs)))
    for k, seed in ((1, 4), (2, 5)):
        rho_c = (three[:, k, 0] * three[:, k, 1]).sum(-1).numpy()
        res = simulate(p, TimeGrid.make(T=1.0, dt=2**k * dt), runs=runs, seed=seed,
                       initial=InitialState.pair(0.0), recording=Recording(record=("gram",)))
        rho_d = res.gram[:, -1, 0, 1]
        se = math.hypot(rho_c.std(), rho_d.std()) / math.sqrt(runs)
        assert abs(rho_c.mean() - rho_d.mean()) < 4 * se, (k, rho_c.mean(), rho_d.mean(), se)
    with pytest.raises(ParameterError, match="multiple of 4"):
        _coupled_steps(x0, p, 6, dt, rs, levels=3)


def test_chosen_layers_are_a_multiple_of_4():
    assert [_layers_for(1.0, dt) for dt in (1.0, 0.3, 0.25, 0.2, 0.1)] == [4, 4, 4, 8, 12]


def test_the_wanted_step_scales_the_bias_bound_to_the_monte_carlo_error():
    codes = np.array([[B, S]] * 20 + [[S, S]] * 60 + [[B, B]] * 20)
    e = _paired_estimates(codes)
    dt = _wanted_step(e, 0.1, 1000)
    b = e["p_bipolar"]
    target = mc_error(b.fine, 1000)
    assert dt == pytest.approx(0.1 * target / (abs(b.bias) + 2 * b.bias_se))
    assert _wanted_step(e, 0.1, 2) == 0.1  # 2 runs: the Monte Carlo error is above the bound


def test_the_library_measures_beside_the_run_and_refuses_what_it_cannot_couple():
    p = spec_params(1.0, 3)
    res = simulate_with_step_error(p, TimeGrid.make(T=1.0, dt=0.25), runs=8, initial=InitialState.pair(0.3),
                   step=StepControl(coupled_runs=4))
    rec = res.extra["step"]
    assert rec["coupled_runs"] == 4 and set(estimates_of(rec)) == {"p_one_cluster", "p_bipolar"}
    assert rec["levels"] == 3 and estimates_of(rec)["p_bipolar"].levels == 3
    # 6 layers: dt and 2 dt only, the order not checked; an odd number cannot be doubled
    res = simulate_with_step_error(p, TimeGrid.make(T=1.5, dt=0.25), runs=8, initial=InitialState.pair(0.0),
                   step=StepControl(coupled_runs=4))
    assert res.extra["step"]["levels"] == 2
    with pytest.raises(ParameterError, match=r"extrapolate.*even number of layers"):
        simulate_with_step_error(p, TimeGrid.make(layers=3), runs=2, step=StepControl(extrapolate=True))
    with pytest.raises(ParameterError, match=r"extrapolate.*noise='scalar'"):
        simulate_with_step_error(ModelParams(n=2, d=3, noise="scalar"), TimeGrid.make(layers=2), runs=2,
                 step=StepControl(extrapolate=True))
    with pytest.raises(TypeError, match="StepControl"):
        simulate_with_step_error(p, TimeGrid.make(layers=2), step=True)
    # the run's own numbers are simulate's, bit for bit
    plain = simulate(p, TimeGrid.make(T=1.0, dt=0.25), runs=8, initial=InitialState.pair(0.3))
    again = simulate_with_step_error(p, TimeGrid.make(T=1.0, dt=0.25), runs=8,
                                     initial=InitialState.pair(0.3),
                                     step=StepControl(coupled_runs=4))
    assert np.array_equal(plain.state, again.state)
    # n = 65536 on the circle evaluates attention by the O(n) expansion: nothing coupled
    big = ModelParams(n=65536, d=2, beta=3.0)
    assert _step_runs(big, TimeGrid.make(T=1.0, dt=0.25), 2, "network", InitialState(),
                     StepControl()) == 0
    assert "expansion" in _coupling_refusal(big, TimeGrid.make(T=1.0, dt=0.25), 2, "network",
                                           InitialState(), Execution())


def test_a_dt_that_breaks_the_rule_warns_with_the_bias_and_a_step():
    # a coarse step: the measured step error is far above the Monte Carlo error
    out = CliRunner().invoke(app, ["simulate", "--n", "2", "--d", "4", "--beta", "2", "--init",
                                   "pair", "--rho0", "-0.3", "--time", "20", "--dt", "0.25",
                                   "--runs", "200", "--until", "decided", "--seed", "2",
                                   "--sampler", "full"])
    assert out.exit_code == 0, out.output
    assert "measured on 200 runs coupled at dt, 2 dt and 4 dt" in out.output
    warn = [ln for ln in out.output.splitlines() if ln.startswith("warning: p_bipolar")]
    assert warn and "NOT below" in warn[0] and "would make it so" in warn[0]
    out = CliRunner().invoke(app, ["simulate", "--n", "2", "--dt", "0.1", "--runs", "2"])
    assert out.exit_code == 2 and "--dt" in out.output and "--time" in out.output


#: the key of the order tests: two tokens of the spec model, beta 1, d 3, from rho0 = 0, each run
#: until decided at tol 1e-8 or T = 60 (at T = 30 about 0.6 % of the runs are still undecided)
KEY, T_KEY = (1.0, 3, 0.0), 60.0


def _key_exact() -> float:
    """P_anti of the key at the decision tolerance (theory.decision_time.p_anti_at_tol)."""
    from tokensde.theory.decision_time import p_anti_at_tol

    return float(p_anti_at_tol(*KEY, 1e-8))


@pytest.fixture(scope="module")
def coarse_key():
    """40000 runs of the key coupled at dt = 2/30, 4/30 and 8/30 (about 15 s)."""
    return measure_step_error(spec_params(1.0, 3), T_KEY, 2 / 30, 40000, 31, init="pair", rho0=0.0,
                   until="decided")["p_bipolar"]


@pytest.mark.slow
def test_the_order_check_flags_the_key_and_second_order_richardson_meets_the_exact(coarse_key):
    # P(2/30) is off P_anti by about -0.007 and P(4/30) by -0.027: not first order. The first-
    # order Richardson 2 P(dt) - P(2 dt) then sits about 0.009 above P_anti (resolved here: its
    # paired error is 0.0035); the second-order one (8 P(dt) - 6 P(2 dt) + P(4 dt)) / 3 meets it
    e, exact = coarse_key, _key_exact()
    assert e.first_order() is False and e.order < -3 * e.order_se, e
    assert e.order_text().startswith("order check: second order visible")
    assert 2.5 * e.richardson_se < 0.009
    assert abs(e.richardson2 - exact) < 2 * e.richardson2_se, (e.richardson2, exact)
    ex = e.extrapolated()
    assert ex["p"] == e.richardson2 and ex["ci"][0] < exact < ex["ci"][1]
    assert e.bias_se < 0.8 * e.independent_se  # the pairing pays, if less than for many tokens


@pytest.mark.slow
def test_the_order_check_passes_where_the_step_is_first_order():
    # the key at dt = 1/60, 1/30, 2/30: the step errors there are about 0, -0.005 and -0.007,
    # first order within these runs' errors; both Richardson values meet the exact value
    e = measure_step_error(spec_params(1.0, 3), T_KEY, 1 / 60, 10000, 23, init="pair", rho0=0.0,
                until="decided")["p_bipolar"]
    assert e.first_order() is True, e
    assert e.step_error(1 / 60).source.endswith("first order")
    assert abs(e.richardson - _key_exact()) < 2 * e.richardson_se, e
    assert abs(e.extrapolated()["p"] - _key_exact()) < 2 * e.extrapolated()["se"], e


@pytest.mark.slow
def test_the_coupled_coarse_steps_have_the_probability_of_direct_runs(coarse_key):
    # P(4/30) and P(8/30) of the coupled runs against independent runs drawn at those steps
    # (80000 each): a gap of 0.006 would be about 2.5 joint standard errors
    from tokensde.analysis.pair_monte_carlo import monte_carlo

    e = coarse_key
    for dt, p_c, seed in ((4 / 30, e.coarse, 401), (8 / 30, e.coarse4, 402)):
        r = monte_carlo(*KEY, runs=80000, T=T_KEY, dt=dt, seed=seed,
                        stopping=StoppingRule.decided(1e-8),
                        execution=Execution(sampler="fast")).to_dict()["estimate"]
        se = math.hypot(mc_error(r["p"], r["decided"]), mc_error(p_c, e.runs))
        assert abs(p_c - r["p"]) < 2.5 * se and se < 0.0025, (dt, p_c, r["p"], se)


@pytest.mark.slow
def test_the_chosen_step_meets_its_rule():
    # the key at T = 30: the chosen step is a multiple of 4 layers, below the pilot's, and the
    # step error at it, P(1/30) - P_anti = -0.004 +- 0.002 (80000 runs, direct and coupled),
    # is at most the error measured at 1/30 scaled: the rule's target is met with margin
    runs = 1000
    ch = choose_step(spec_params(1.0, 3), 30.0, runs, 0, init="pair", rho0=0.0,
                     until="decided")
    assert ch.grid.steps % 4 == 0 and ch.grid.T == pytest.approx(30.0) and not ch.capped
    assert ch.grid.dt < ch.dt0 and "2 dt0 and 4 dt0" in ch.why
    assert 0.007 * ch.grid.dt / (1 / 30) < mc_error(_key_exact(), runs), ch.why


@pytest.mark.slow
def test_the_command_chooses_the_step_and_extrapolates():
    out = CliRunner().invoke(app, ["simulate", "--n", "3", "--d", "3", "--beta", "1", "--time",
                                   "8", "--runs", "300", "--until", "decided", "--extrapolate",
                                   "--json"])
    assert out.exit_code == 0, out.output
    import json

    s = json.loads(out.stdout[out.stdout.index("{"):])
    assert "chosen so that the estimated step error is below" in s["step_choice"]
    assert s["layers"] % 4 == 0 and s["step_coupled_runs"] == 300
    for key in ("p_one_cluster", "p_bipolar"):
        ex = s[key]["extrapolated"]
        assert ex["ci"][0] <= ex["p"] <= ex["ci"][1] and ex["runs"] == 300
        assert s[key]["step_error"]["bias"] is not None


def test_the_budget_counts_the_coupled_runs():
    # 200 runs coupled beside 1000 (full sampler at n = 2, d = 3): their work per layer is 1.75
    # fine layers at 40 layers (three steps), 1.5 at 42 (two steps)
    from tokensde.sim.options import Execution
    from tokensde.sim.simulate import simulation_budget

    p = spec_params(1.0, 3)
    kw = {"initial": InitialState.pair(0.3), "execution": Execution(sampler="full")}
    extra = {}
    for layers, at in ((40, "dt, 2 dt and 4 dt"), (42, "dt, 2 dt for")):
        grid = TimeGrid.make(T=layers / 20, dt=0.05)
        plain = simulation_budget(p, grid, 1000, **kw)
        step = simulation_budget(p, grid, 1000, step=StepControl(), **kw)
        assert f"plus 200 runs coupled at {at}" in step.detail
        extra[layers] = (step.work - plain.work) / layers
    assert extra[40] / extra[42] == pytest.approx(1.75 / 1.5)
