"""Random query/key laws (docs/variants.md §3): A = I + s R per run and head, fixed for a run or
drawn every layer; identity unchanged; the SDE of per-layer forms averages over the law."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from tokensde import Execution, ModelParams, ParameterError, Recording, StoppingRule, TimeGrid, simulate
from tokensde.model.qk import QK_LAWS, QKDraws
from tokensde.sim.batch import _qk_draws
from tokensde.sim.layers import _attention_output
from tokensde.sim.rng import QK_STREAM, RunStreams
from tokensde.sim.samplers import _scheme_params, choose_sampler

RANDOM = ("gaussian", "wigner", "goe")


def _tokens(runs: int, n: int, d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(runs, n, d, dtype=torch.float64,
                                                     generator=g), dim=-1)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [({"qk": "gpt"}, "qk must be one of identity, gaussian, wigner, goe; got 'gpt'"),
     ({"qk": "goe", "qk_scale": 0}, "qk_scale must be a finite number > 0; got 0"),
     ({"qk": "goe", "qk_scale": float("inf")}, "qk_scale must be a finite number > 0"),
     ({"qk": "goe", "qk_scale": "big"}, "qk_scale must be a finite number > 0"),
     ({"qk_scale": 2.0}, "qk_scale is used only with a random qk law .gaussian, wigner, goe.; "
      "got qk_scale=2.0 with qk='identity'"),
     ({"qk_redraw": "layer"}, "qk_redraw is used only with a random qk law"),
     ({"qk": "wigner", "qk_redraw": "never"}, "qk_redraw must be one of run, layer; got 'never'"),
     ({"qk": "goe", "qk_redraw": "layer", "qk_samples": 0}, "qk_samples must be an integer >= 1"),
     ({"qk": "goe", "qk_samples": 4}, "qk_samples .* is used only with qk_redraw='layer'"),
     ({"qk_samples": 4}, "qk_samples is used only with a random qk law"),
     ({"qk": "gaussian", "Q": np.eye(4)}, "qk must be 'identity' when Q or K is given")],
)
def test_bad_qk_values_name_the_parameter(kwargs, msg):
    with pytest.raises(ParameterError, match=msg):
        ModelParams(n=3, d=4, **kwargs)


def test_identity_keeps_the_fingerprint_and_random_laws_round_trip():
    base = ModelParams(n=3, d=4)
    assert base.to_dict() == ModelParams(n=3, d=4, qk="identity", qk_scale=1.0,
                                         qk_redraw="run").to_dict()
    assert not {"qk", "qk_scale", "qk_redraw", "qk_samples"} & set(base.to_dict())
    p = ModelParams(n=3, d=4, qk="goe", qk_scale=0.5, qk_redraw="layer", qk_samples=3)
    assert {k: p.to_dict()[k] for k in ("qk", "qk_scale", "qk_redraw", "qk_samples")} == {
        "qk": "goe", "qk_scale": 0.5, "qk_redraw": "layer", "qk_samples": 3}
    assert ModelParams.from_dict(p.to_dict()).to_dict() == p.to_dict()
    assert "qk_scale" not in ModelParams(n=3, d=4, qk="wigner").to_dict()


def test_gram_sampler_takes_rotation_invariant_forms_redrawn_every_layer_only():
    # the accepted cases are checked in law in tests/test_gram_variants.py
    for law in ("goe", "gaussian"):
        p = ModelParams(n=2, d=9, qk=law, qk_redraw="layer")
        assert p.rotation_invariant and choose_sampler(p) == "gram"
        fixed = p.with_(qk_redraw="run")
        assert not fixed.rotation_invariant and choose_sampler(fixed) == "fast"
        with pytest.raises(ParameterError, match=r"sampler='gram' needs qk_redraw='layer' with a "
                           rf"random qk law .*got qk='{law}', qk_redraw='run'"):
            choose_sampler(fixed, "gram")
    for redraw in ("run", "layer"):
        p = ModelParams(n=2, d=9, qk="wigner", qk_redraw=redraw)
        assert not p.rotation_invariant and choose_sampler(p) == "fast"
        with pytest.raises(ParameterError, match=r"sampler='gram' needs a rotation-invariant qk "
                           r"law \(gaussian, goe, or 'identity'\); got qk='wigner'"):
            choose_sampler(p, "gram")


@pytest.mark.parametrize("name", RANDOM)
def test_law_moments(name):
    # R = (A - I)/s centred; Var <u, R v> = 1 for orthonormal u, v; Var <u, R u> = 2 (symmetric
    # laws, GOE covariance) or 1 (gaussian product); wigner, goe symmetric
    d, runs, s = 5, 40_000, 0.7
    law = QK_LAWS.get(name)(d, s)
    r = (law.draw(RunStreams(3, runs), 1, torch.float64) - torch.eye(d, dtype=torch.float64)) / s
    u = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64,
                                    generator=torch.Generator().manual_seed(1)))[0]
    ruv = torch.einsum("a,rab,b->r", u[:, 0], r, u[:, 1])
    ruu = torch.einsum("a,rab,b->r", u[:, 0], r, u[:, 0])
    tol = 5 / math.sqrt(runs)
    assert abs(float(r.mean())) < tol
    assert float(ruv.var()) == pytest.approx(1.0, abs=10 * tol)
    assert float(ruu.var()) == pytest.approx(1.0 if name == "gaussian" else 2.0, abs=20 * tol)
    if name != "gaussian":
        torch.testing.assert_close(r, r.transpose(-1, -2), rtol=0, atol=0)
    if name == "wigner":
        off = r[:, 0, 1:]
        assert set(off.unique().tolist()) == {-1.0, 1.0}
    assert QK_LAWS.get(name).rotation_invariant == (name != "wigner")


def test_attention_with_forms_is_attention_with_that_key():
    law = QK_LAWS.get("goe")(4, 0.8)
    forms = law.draw(RunStreams(5, 3), 2, torch.float64)  # (runs, heads, d, d)
    p = ModelParams(n=5, d=4, beta=2.0, heads=2, qk="goe", qk_scale=0.8, causal=True)
    x = _tokens(3, 5, 4)
    y = _attention_output(x, p, forms)
    for r in range(3):
        for h in range(2):
            one = ModelParams(n=5, d=4, beta=2.0, K=forms[r, h].numpy(), causal=True)
            torch.testing.assert_close(y[r, h], _attention_output(x[r:r + 1], one)[0],
                                       rtol=1e-13, atol=1e-14)
    with pytest.raises(ParameterError, match="qk='goe' draws a query/key form per run"):
        _attention_output(x, p)


@pytest.mark.parametrize("redraw", ["run", "layer"])
def test_forms_fixed_per_run_or_fresh_per_layer(redraw):
    p = ModelParams(n=3, d=4, heads=3, qk="wigner", qk_redraw=redraw)
    draws = _qk_draws(p, "network", RunStreams(0, 10), torch.float64)
    assert isinstance(draws, QKDraws)
    a, b = draws.next(), draws.next()
    assert a.shape == (10, 3, 4, 4)
    assert torch.equal(a, b) == (redraw == "run")
    assert _qk_draws(ModelParams(n=3, d=4), "network", RunStreams(0, 10), torch.float64) is None


def test_sde_of_per_layer_forms_averages_over_qk_samples_draws():
    p = ModelParams(n=3, d=4, heads=2, qk="goe", qk_redraw="layer", qk_samples=5)
    assert _scheme_params(p, "network") is p
    q = _scheme_params(p, "sde")
    assert q.heads == 10 and q.qk_law.samples == 5
    assert _scheme_params(p.with_(qk_redraw="run", qk_samples=8), "sde").heads == 2
    draws = _qk_draws(p, "sde", RunStreams(0, 4), torch.float64)
    assert draws is not None and draws.next().shape == (4, 10, 4, 4)


@pytest.mark.parametrize("name", RANDOM)
@pytest.mark.parametrize(("redraw", "scheme", "sampler"),
                         [("run", "network", "fast"), ("layer", "network", "full"),
                          ("layer", "sde", "fast"), ("run", "sde", "full")])
def test_simulate_is_seeded_on_the_sphere_and_leaves_other_streams_alone(name, redraw, scheme,
                                                                         sampler):
    p = ModelParams(n=3, d=4, beta=2.0, heads=2, qk=name, qk_scale=0.6, qk_redraw=redraw)
    grid, how = TimeGrid.make(layers=5), Execution(sampler=sampler)
    kw = dict(runs=300, seed=4, scheme=scheme, recording=Recording(record=("gram", "tokens")))
    a = simulate(p, grid, execution=how, **kw)
    b = simulate(p, grid, execution=replace(how, batch_size=256), **kw)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_allclose(np.linalg.norm(a.x, axis=-1), np.ones((300, 3)), rtol=1e-7)
    ident = simulate(p.with_(qk="identity", qk_scale=1.0, qk_redraw="run"), grid, execution=how,
                     **kw)
    np.testing.assert_array_equal(a.tokens[:, 0], ident.tokens[:, 0])  # same start
    assert a.metadata()["params"]["qk"] == name


@pytest.mark.parametrize("redraw", ["run", "layer"])
def test_until_decided_keeps_each_run_with_its_own_forms(redraw):
    # a decided run's state is the fixed-horizon run's state at the same layer, bit for bit
    p = ModelParams(n=2, d=3, beta=3.0, qk="goe", qk_scale=0.5, qk_redraw=redraw)
    grid = TimeGrid.make(T=4.0, dt=0.05)
    kw = dict(runs=300, seed=2, execution=Execution(batch_size=256))
    full = simulate(p, grid, recording=Recording(checkpoints=list(range(81))), **kw)
    stopped = simulate(p, grid, stopping=StoppingRule.decided(tol=1e-4), **kw)
    at = stopped.decided_at
    done = np.flatnonzero(at >= 0)
    assert len(done) > 50
    want = full.gram[done, at[done]]
    np.testing.assert_array_equal(stopped.final_gram()[done], want)


def test_forms_come_from_their_own_streams():
    p = ModelParams(n=2, d=3, qk="gaussian")
    rs = RunStreams(7, 5)
    forms = _qk_draws(p, "network", rs, torch.float64)
    assert forms is not None
    want = p.qk_law.draw(RunStreams(7, 5).derived(QK_STREAM), 1, torch.float64)
    torch.testing.assert_close(forms.next(), want, rtol=0, atol=0)


def test_coupled_network_and_sde_with_forms_fixed_per_run_agree_on_a_fine_grid():
    from tokensde.sim import coupled_states

    p = ModelParams(n=3, d=3, beta=1.0, heads=2, qk="gaussian", qk_scale=0.5)
    x0 = _tokens(64, 3, 3)
    rs = RunStreams(3, 64)
    nets, fine, _ = coupled_states(x0, p, 0.5, (4, 64), 256, rs, ("gaussian",),
                                   qk_rs=rs.derived(QK_STREAM))
    err = {L: float((nets["gaussian", L] - fine).square().sum(-1).mean().sqrt()) for L in (4, 64)}
    assert err[64] < err[4] / 2.5


def test_heads_drop_out_of_the_sde_of_forms_redrawn_every_layer():
    # H heads with m draws each and one head with H m draws are the same averaged SDE, step by step
    kw = dict(n=3, d=4, beta=2.0, qk="goe", qk_redraw="layer")
    two = ModelParams(heads=2, qk_samples=4, **kw)
    one = ModelParams(heads=1, qk_samples=8, **kw)
    a, b = (simulate(p, TimeGrid.make(layers=5), runs=40, seed=3, scheme="sde",
                     execution=Execution(sampler="fast")) for p in (two, one))
    np.testing.assert_array_equal(a.x, b.x)


def test_sweep_cells_carry_variants_only_when_not_default():
    # a multi-token cell keeps its canonical form (id, seed) unless a variant is asked for
    from tokensde.sweep.config import _canonical
    from tokensde.sweep.kinds import get_kind

    kind = get_kind("multi_token")
    base = dict(n=3, d=3, beta=2.0, runs=8, T=0.5)
    plain = kind.normalize(base)
    assert not {"heads", "qk", "qk_scale", "qk_redraw", "norm"} & set(plain)
    same = kind.normalize({**base, "heads": 1, "qk": "identity", "norm": "post"})
    assert _canonical("multi_token", same) == _canonical("multi_token", plain)
    cell = kind.normalize({**base, "heads": 2, "qk": "wigner", "qk_redraw": "layer",
                           "norm": "pre"})
    assert (cell["heads"], cell["qk"], cell["qk_redraw"], cell["norm"]) == (2, "wigner", "layer",
                                                                            "pre")
    assert kind.normalize(cell) == cell
    with pytest.raises(ParameterError, match="qk_scale is used only with a random qk law"):
        kind({**base, "qk_scale": 2.0}, 1)  # fails as the cell runs (recorded by a sweep)
    out = kind(cell, 1)
    assert 0.0 <= out["p_single"] <= 1.0
