"""Runs stopped at decision: the same numbers as the fixed-horizon run up to the decision, never
dependent on batching or on which other runs are still active; the time-to-decision theory."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from tokensde import Execution, ModelParams, Recording, StoppingRule, TimeGrid, simulate
from tokensde.analysis import pair_monte_carlo as mc
from tokensde.analysis.stats import _censored_quantiles, chance_excess, chance_explains
from tokensde.model.params import ParameterError
from tokensde.sim.reduced import reduced_diffusion
from tokensde.sim.rng import RunStreams
from tokensde.theory import decision_time as ab
from tokensde.theory import two_tokens as tt

CASES = [
    (ModelParams(n=2, d=4, beta=2.0), "fast", "network"),
    (ModelParams(n=3, d=3, beta=3.0), "full", "network"),
    (ModelParams(n=3, d=3, beta=3.0), "full", "sde"),
    (ModelParams(n=2, d=16, beta=2.0), "gram", "network"),
]


@pytest.mark.parametrize(("p", "sampler", "scheme"), CASES)
def test_decided_state_is_the_fixed_horizon_state_at_that_layer(p, sampler, scheme):
    grid = TimeGrid.make(T=6.0, dt=0.02)
    kw = dict(runs=300, seed=3, execution=Execution(sampler=sampler), scheme=scheme)
    steps = 300
    full = simulate(p, grid, recording=Recording(checkpoints=list(range(steps + 1))), **kw)
    stop = simulate(p, grid, stopping=StoppingRule.decided(tol=1e-4, decide_every=2), **kw)
    at = stop.decided_at
    done = np.flatnonzero(at >= 0)
    assert 0.2 < len(done) / len(at) < 1.0  # both kinds of run are exercised
    assert np.all(at[done] % 2 == 0)
    g = stop.final_gram()
    assert np.array_equal(full.gram[done, at[done]], g[done])
    live = np.flatnonzero(at < 0)
    assert np.array_equal(full.gram[live, -1], g[live])
    # the decision is the first test at which every pair is within tol of +-1
    gap = 1.0 - np.abs(g[done])
    assert bool((gap < 1e-4).all())
    first = full.gram[done][:, 2:steps + 1:2]
    ok = ((1.0 - np.abs(first)) < 1e-4).reshape(*first.shape[:2], -1).all(-1)
    assert np.array_equal(ok.argmax(1) * 2 + 2, at[done])


@pytest.mark.slow
def test_decided_runs_never_depend_on_batch_size():
    p = ModelParams(n=2, d=5, beta=1.5)
    grid = TimeGrid.make(T=20.0, dt=0.01)
    kw = dict(runs=700, seed=11, stopping=StoppingRule.decided(tol=1e-6))
    a = simulate(p, grid, **kw)
    b = simulate(p, grid, execution=Execution(batch_size=256), **kw)
    assert np.array_equal(a.decided_at, b.decided_at)
    assert np.array_equal(a.x, b.x)


def test_checkpoints_after_a_decision_hold_the_decided_state():
    p = ModelParams(n=2, d=3, beta=1.0)
    res = simulate(p, TimeGrid.make(T=10.0, dt=0.02), runs=64, seed=1,
                   stopping=StoppingRule.decided(tol=1e-3), recording=Recording(checkpoints=[0, 250, 500]))
    done = res.decided_at
    early = np.flatnonzero((done >= 0) & (done < 250))
    assert len(early) > 5
    assert np.array_equal(res.gram[early, 1], res.gram[early, 2])
    assert np.array_equal(res.gram[early, 2], res.final_gram()[early])
    t = res.decision_times()
    assert np.all(np.isnan(t) == (done < 0))
    assert np.allclose(t[done >= 0], done[done >= 0] * 0.02)


def test_retained_streams_hand_out_the_same_numbers():
    whole = RunStreams(5, 600)
    part = RunStreams(5, 600)
    keep = torch.ones(600, dtype=torch.bool)
    keep[::3] = False
    keep[256:512] = False  # a whole block leaves
    a = whole.normal(2, 3)
    b = part.normal(2, 3)
    assert torch.equal(a, b)
    part.retain(keep)
    assert part.runs == int(keep.sum())
    assert torch.equal(whole.normal(2, 3)[keep], part.normal(2, 3))
    gamma = torch.tensor([1.5, 2.5], dtype=torch.float64)
    assert torch.equal(whole.standard_gamma(gamma)[keep], part.standard_gamma(gamma))
    with pytest.raises(ValueError, match="mask"):
        part.retain(torch.ones(3, dtype=torch.bool))


@pytest.mark.parametrize(("kw", "name"), [
    (dict(until="later"), "until"),
    (dict(tol=1e-3), "tol"),
    (dict(until="decided", tol=2.0), "tol"),
    (dict(until="decided", decide_every=0), "decide_every"),
])
def test_bad_stopping_arguments_name_the_parameter(kw, name):
    with pytest.raises(ParameterError, match=name):
        simulate(ModelParams(n=2, d=3, beta=1.0), TimeGrid.make(T=1.0, dt=0.1), runs=2,
                 stopping=StoppingRule(**kw))


def test_gram_sampler_draws_uniform_tokens_without_size_d():
    # <x_1, x_2> of uniform unit vectors in R^d: (1 + rho)/2 ~ Beta((d-1)/2, (d-1)/2)
    d = 7
    res = simulate(ModelParams(n=3, d=d, beta=1.0), TimeGrid.make(layers=1, alpha=1e-9), runs=4000, seed=2,
                   recording=Recording(checkpoints=[0]), execution=Execution(sampler="gram"))
    rho = res.gram[:, 0, 0, 1]
    a = (d - 1) / 2
    assert stats.kstest((1 + rho) / 2, stats.beta(a, a).cdf).pvalue > 1e-3
    huge = simulate(ModelParams(n=8, d=10**6, beta=1.0), TimeGrid.make(layers=5), runs=16, seed=0,
                    recording=Recording(record=("gram",)), execution=Execution(sampler="gram"))
    assert huge.state.shape == (16, 8, 8)  # a frame of the span: nothing of size d
    assert abs(float(huge.gram[:, 0, 0, 1].std(ddof=1)) - 1e-3) < 5e-4  # rho ~ N(0, 1/d)


# ------------------------------------------------------------------- time-to-decision theory


def test_survival_matches_the_reduced_diffusion():
    beta, d, tol = 1.0, 4, 1e-8
    times = np.array([2.0, 4.0, 8.0, 16.0])
    theory = ab.survival(times, beta, d, "uniform", tol)
    paths = reduced_diffusion(beta, d, "uniform", T=16.0, dt=2e-3, runs=4000, seed=5,
                                 checkpoints=161)
    lp, lm = paths.log_gaps()
    hit = np.minimum(lp, lm) < math.log(tol)
    first = np.where(hit.any(1), paths.times[hit.argmax(1)], np.inf)
    emp = np.array([(first > t).mean() for t in times])
    se = np.sqrt(theory * (1 - theory) / 4000) + 0.004  # + Euler step and 0.1-time recording
    assert np.all(np.abs(emp - theory) < 4 * se), (emp, theory)


@pytest.mark.parametrize(("beta", "d", "times"), [(1.0, 4, (4.0, 8.0, 16.0)),
                                                  (2.5, 10, (1.5, 3.0, 6.0))])
@pytest.mark.slow
def test_network_decision_times_follow_the_theory(beta, d, times):
    tol = 1e-8
    res = simulate(ModelParams(n=2, d=d, beta=beta), TimeGrid.make(T=40.0, dt=0.05 / d), runs=2000, seed=9,
                   stopping=StoppingRule.decided(tol=tol))
    t = res.decision_times()
    times = np.array(times)
    theory = ab.survival(times, beta, d, "uniform", tol)
    emp = np.array([np.mean(~(t <= s)) for s in times])
    se = np.sqrt(theory * (1 - theory) / 2000) + 0.005
    assert np.all(np.abs(emp - theory) < 4 * se), (emp, theory)


def test_tail_rate_is_the_slope_of_the_survival_and_slows_near_beta_c():
    beta, d = 2.0, 4
    k = ab.decision_rate(beta, d, 1e-8)
    s = ab.survival(np.array([60.0, 80.0]), beta, d, 0.0, 1e-8)
    assert math.log(s[0] / s[1]) / 20.0 == pytest.approx(k, rel=1e-3)
    # tol -> 0: the rate falls towards the slower boundary rate mu^2 / (2 s^2)
    lim = ab._boundary_rates(beta, d)
    assert lim["antipodal"] < lim["merged"]
    rates = [ab.decision_rate(beta, d, t) for t in (1e-4, 1e-8, 1e-14)]
    assert rates[0] > rates[1] > rates[2] > lim["antipodal"]
    # closer to beta_c(4) = 0.658 the antipodal edge attracts more weakly
    near = ab.decision_rate(0.8, d, 1e-8)
    assert near < 0.5 * k


def test_first_passage_probability_tends_to_p_anti():
    for beta, d, rho0 in [(2.0, 4, -0.5), (1.0, 3, 0.2), (2.5, 10, "uniform")]:
        exact = tt.p_anti_uniform(beta, d) if rho0 == "uniform" else tt.p_anti(beta, d, rho0)
        assert ab.p_anti_at_tol(beta, d, rho0, 1e-14) == pytest.approx(exact, abs=2e-3)
    # below beta_c(10) = 1.38 antipodal never attracts: first passage vanishes as tol -> 0
    sub = [ab.p_anti_at_tol(1.0, 10, "uniform", t) for t in (1e-4, 1e-8, 1e-12)]
    assert sub[0] > sub[1] > sub[2] and sub[2] < 1e-8


def test_monte_carlo_until_decided_leaves_nothing_undecided():
    out = mc.monte_carlo(2.0, 4, "uniform", runs=400, seed=4)
    assert out.undecided == 0
    d = out.to_dict()
    assert d["until"] == "decided" and d["t_decided_median"] > 0
    lo, hi = out.ci
    assert lo <= ab.p_anti_at_tol(2.0, 4, "uniform", 1e-8) <= hi


# ------------------------------------------------------------------ agreement with theory


def test_chance_excess_is_the_binomial_tail():
    assert chance_excess(0, 30) == 1.0
    assert chance_excess(1, 20) == pytest.approx(1 - 0.95**20)
    assert chance_excess(2, 20) == pytest.approx(1 - 0.95**20 - 20 * 0.05 * 0.95**19)
    assert chance_explains(3, 36) and not chance_explains(7, 36)


def test_censored_quantiles_are_nan_past_the_horizon():
    t = np.array([1.0, 2.0, 3.0, np.nan, np.nan])
    assert _censored_quantiles(t, [0.2, 0.6])[0] == 1.0
    assert _censored_quantiles(t, [0.6])[0] == 3.0
    assert math.isnan(_censored_quantiles(t, [0.9])[0])


def test_unequal_bipolar_formations_hover_instead_of_closing():
    # n = 8, d = 8, beta = 4: many bipolar formations keep antipodal gaps of ~1e-5, so they are
    # undecided at tol = 1e-8 yet bipolar at 1e-3 over the whole last window
    from tokensde.sweep.kinds import get_kind

    kind = get_kind("multi_token")
    cell = {"n": 8, "d": 8, "beta": 4.0, "runs": 100, "T": 50.0, "dt": "auto"}
    tight = kind({**cell, "tol": 1e-8}, 3)
    assert 0 < tight["k_hovering"] <= tight["k_undecided"]
    assert tight["p_hovering_lo"] > 0.15
    wide = kind({**cell, "tol": 1e-3}, 3)
    assert wide["k_hovering"] == 0 and wide["k_undecided"] <= 5
    assert wide["p_bipolar"] > tight["p_bipolar"] + 0.2
