"""The O(n) attention on the circle and the sphere (`tokensde.sim.expansion`).

Truth: attention computed pair by pair in numpy float64 (no cancellation: every term is positive),
Bessel tails summed by mpmath at 40 digits, Legendre polynomials from scipy. Errors are measured
relative to each token's cancellation scale `S_i = e^beta sum_j w_j / Z_i` (softmax) or `e^beta`
(USA), the scale the truncation bound and the rounding of a harmonic sum both live on.
"""

from __future__ import annotations

import math
from dataclasses import replace

import mpmath
import numpy as np
import pytest
import torch
from scipy.special import eval_legendre

from tokensde import Execution, InitialState, ModelParams, Recording, TimeGrid
from tokensde.model.attention import ATTENTION_KINDS
from tokensde.model.attention.softmax import _Softmax
from tokensde.model.params import ParameterError
from tokensde.sim.expansion import (
    _choose_evaluator,
    _error_bound,
    _harmonic_basis,
    _kernel_tail,
    _kernel_weights,
    auto_uses_expansion,
    expansion_output,
    truncation_order,
)
from tokensde.sim.layers import _attention_output
from tokensde.sim.simulate import simulate

F64 = torch.float64


def unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def truth(x: np.ndarray, beta: float, w: np.ndarray | None, kind: str
          ) -> tuple[np.ndarray, np.ndarray]:
    """Attention output `(runs, n, d)` pair by pair, and the cancellation scales `(runs, n)`."""
    w = np.ones(x.shape[:-1]) if w is None else np.broadcast_to(w, x.shape[:-1])
    k = w[:, None, :] * np.exp(beta * (np.einsum("rid,rjd->rij", x, x) - 1.0))  # e^{-beta} w K
    z = k.sum(-1)
    num = k @ x
    total = w.sum(-1, keepdims=True)
    if kind == "softmax":
        return num / z[..., None], total / z
    return num * (math.exp(beta) / total[..., None]), np.full(z.shape, math.exp(beta))


def rel_error(y: torch.Tensor, ref: np.ndarray, scale: np.ndarray) -> float:
    """Largest `|y_i - ref_i| / S_i`."""
    return float((np.linalg.norm(y.numpy() - ref, axis=-1) / scale).max())


def random_tokens(rng: np.random.Generator, runs: int, n: int, d: int) -> np.ndarray:
    return unit(rng.standard_normal((runs, n, d)))


def clustered_tokens(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Three runs: tokens within 1e-6 of 3 atoms; an antipodal pair of clusters (half each, one
    spread by 1e-3); one atom of n - 1 tokens and one token exactly opposite it."""
    atoms = unit(rng.standard_normal((3, d)))
    near = unit(atoms[rng.integers(0, 3, n)] + 1e-6 * rng.standard_normal((n, d)))
    half = n // 2
    pole = atoms[0]
    anti = unit(np.concatenate([pole + 1e-3 * rng.standard_normal((half, d)),
                                -pole + 1e-9 * rng.standard_normal((n - half, d))]))
    lone = np.concatenate([np.repeat(pole[None], n - 1, 0), -pole[None]])
    return np.stack([near, anti, lone])


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("kind", ["softmax", "usa"])
@pytest.mark.parametrize("beta", [0.0, 0.5, 3.0, 10.0])
def test_expansion_equals_dense_on_random_tokens(d, kind, beta):
    rng = np.random.default_rng(int(10 * beta) + 7 * d)
    x = random_tokens(rng, 3, 150, d)
    p = ModelParams(n=150, d=d, beta=beta, attention=kind)
    w = rng.uniform(0, 2, (3, 150))
    w[:, :10] = 0.0  # tokens that weigh nothing still receive attention
    for weights in (None, w, w[0]):
        wt = None if weights is None else torch.tensor(weights)
        y = expansion_output(torch.tensor(x), p, wt)
        ref, scale = truth(x, beta, weights, kind)
        assert rel_error(y, ref, scale) <= 1e-12
        # and the library's dense path agrees with the pair-by-pair truth
        assert rel_error(_attention_output(torch.tensor(x), p, weights=wt), ref, scale) <= 1e-13


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("beta", [1.0, 6.0, 10.0])
def test_expansion_equals_dense_on_clustered_tokens(d, beta):
    rng = np.random.default_rng(3 + d)
    x = clustered_tokens(rng, 64, d)
    p = ModelParams(n=64, d=d, beta=beta)
    w = np.ones((3, 64))
    w[1, :32] = 1e-3  # a light cluster opposite a heavy one
    w[2, -1] = 1e-8  # a light token opposite an atom: S = 1 / (1e-8 / 63 + e^{-2 beta})
    for weights in (None, w):
        y = expansion_output(torch.tensor(x), p, None if weights is None else torch.tensor(weights))
        ref, scale = truth(x, beta, weights, "softmax")
        assert rel_error(y, ref, scale) <= 1e-12
    # the light token opposite the atom: its output is -x_atom's opposite, known exactly; what
    # it loses is log10(S) digits at most (beta = 10: S = 4.6e8, ~8.7 digits), and no more
    lone_scale = scale[2, -1]
    assert lone_scale == pytest.approx(1.0 / (1e-8 / 63 + math.exp(-2 * beta)), rel=1e-9)
    err = float(np.linalg.norm(y[2, -1].numpy() - ref[2, -1]))
    assert err <= 1e-14 * lone_scale


@pytest.mark.parametrize("d", [2, 3])
def test_tokens_in_blocks_give_the_same_output(d, monkeypatch):
    """Above a block of tokens the basis is computed block by block, twice (moments, then
    outputs): the same numbers, a last block shorter than the others included."""
    import tokensde.sim.expansion as expansion

    rng = np.random.default_rng(8)
    x = random_tokens(rng, 2, 500, d)
    w = rng.uniform(0, 1, (2, 500))
    p = ModelParams(n=500, d=d, beta=4.0)
    whole = expansion_output(torch.tensor(x), p, torch.tensor(w))
    monkeypatch.setattr(expansion, "_BLOCK_MIN", 256)  # 2 runs: blocks of 128 tokens
    monkeypatch.setattr(expansion, "_SLAB_BYTES", 1)
    blocks = expansion_output(torch.tensor(x), p, torch.tensor(w))
    ref, scale = truth(x, 4.0, w, "softmax")
    assert rel_error(blocks, ref, scale) <= 1e-12
    assert (blocks - whole).abs().max() <= 1e-13


@pytest.mark.parametrize("d", [2, 3])
def test_basis_reproduces_the_addition_theorem(d):
    """sum over a degree's basis pairs = cos(k t) (circle) / (2l+1) P_l(t) / 4 pi (sphere)."""
    rng = np.random.default_rng(11)
    x = random_tokens(rng, 1, 40, d)[0]
    t = np.clip(x @ x.T, -1, 1)
    phi = _harmonic_basis(torch.tensor(x), 40).numpy()
    for deg in (0, 1, 2, 7, 23, 40):
        if d == 2:
            cols = [0] if deg == 0 else [deg, 40 + deg]
            ref = np.cos(deg * np.arccos(t))
        else:
            cols = list(range(deg * deg, (deg + 1) ** 2))
            ref = (2 * deg + 1) / (4 * math.pi) * eval_legendre(deg, t)
        got = phi[:, cols] @ phi[:, cols].T
        # the truth's own argument t carries ~1e-16, amplified by |P_l'| <= l^2
        assert np.abs(got - ref).max() <= 1e-14 * (1 + deg * deg) * (2 * deg + 1)


def true_tail(beta: float, order: int, d: int) -> float:
    """`e^{-beta}` times the kernel's tail at t = 1 (its largest value), by mpmath at 40 digits:
    `2 sum_{k > K} I_k` (circle), `sum_{l > K} (2l + 1) i_l` (sphere)."""
    mpmath.mp.dps = 40
    b = mpmath.mpf(beta)
    if d == 2:
        head = mpmath.besseli(0, b) + 2 * mpmath.fsum(mpmath.besseli(k, b)
                                                      for k in range(1, order + 1))
    else:
        head = mpmath.fsum((2 * k + 1) * mpmath.sqrt(mpmath.pi / (2 * b))
                           * mpmath.besseli(k + mpmath.mpf(1) / 2, b) for k in range(order + 1))
    return float((mpmath.exp(b) - head) * mpmath.exp(-b))


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("beta", [0.1, 1.0, 6.0, 10.0, 100.0])
def test_truncation_bound_holds_and_is_tight_within_a_few_orders(d, beta):
    # the bound holds at every order (from the first where the tail is below 1e-3), and the
    # order it picks exceeds the least sufficient one by at most max(3, K / 8) (measured: 1-3 up
    # to beta = 10, 3-8 at beta = 100, 11-30 of 200-300 at beta = 1000)
    start = truncation_order(beta, d, 1e-3)
    for order in range(start, truncation_order(beta, d, 1e-20) + 1, 2):
        assert true_tail(beta, order, d) <= _kernel_tail(beta, order, d)
    for tol in (1e-8, 1e-12, 1e-16):
        k = truncation_order(beta, d, tol)
        assert 2 * true_tail(beta, k, d) <= tol
        assert 2 * true_tail(beta, k - max(3, k // 8) - 1, d) > tol
        assert _error_bound(beta, k, d) <= tol < _error_bound(beta, k - 1, d)


@pytest.mark.parametrize("d", [2, 3])
def test_kernel_of_the_basis_is_within_the_bound_and_no_closer(d):
    """The truncated kernel `Phi lam Phi^T` against exp(beta (t - 1)) over the whole range."""
    beta, order = 5.0, 12
    rng = np.random.default_rng(2)
    x = random_tokens(rng, 1, 300, d)[0]
    x[1] = x[0]  # t = 1, where the tail is largest
    phi = _harmonic_basis(torch.tensor(x), order)
    lam = _kernel_weights(beta, order, d)
    got = ((phi * lam) @ phi.T).numpy()
    err = np.abs(got - np.exp(beta * (x @ x.T - 1))).max()
    assert err <= _kernel_tail(beta, order, d) + 1e-15
    assert err >= 0.5 * true_tail(beta, order, d)  # the tail is really there at t = 1


@pytest.mark.parametrize("d", [2, 3])
def test_an_order_below_the_bound_is_detected(d):
    beta, tol = 6.0, 1e-12
    need = truncation_order(beta, d, tol)
    low = need - 6
    rng = np.random.default_rng(5)
    x = random_tokens(rng, 1, 50, d)
    x[0, 1:10] = x[0, 0]  # coincident tokens: the truncated kernel is worst at t = 1
    p = ModelParams(n=50, d=d, beta=beta)
    ref, scale = truth(x, beta, None, "softmax")
    bad = rel_error(expansion_output(torch.tensor(x), p, order=low), ref, scale)
    assert bad > 10 * tol  # the error is real and exceeds the tolerance
    assert bad <= _error_bound(beta, low, d) * 1.01  # and stays within the bound of that order
    assert rel_error(expansion_output(torch.tensor(x), p, order=need), ref, scale) <= tol
    with pytest.raises(ParameterError, match=f"need order >= {need}"):
        expansion_output(torch.tensor(x), p, tol=tol, order=low)


def test_float32_stays_within_its_roundoff_times_the_scale():
    rng = np.random.default_rng(9)
    for d in (2, 3):
        x = random_tokens(rng, 2, 400, d)
        p = ModelParams(n=400, d=d, beta=3.0)
        y = expansion_output(torch.tensor(x, dtype=torch.float32), p)
        ref, scale = truth(x, 3.0, None, "softmax")
        assert y.dtype == torch.float32
        assert rel_error(y.double(), ref, scale) <= 2e-6


def test_beta_1000_does_not_overflow():
    """Each token sees itself with the largest weight, so S_i <= n with equal weights, at any
    beta: beta = 1000 keeps every digit but log10(n)."""
    rng = np.random.default_rng(4)
    x = random_tokens(rng, 1, 30, 2)
    x[0, 1] = unit(x[0, 0] + 1e-3)  # a close pair: each of the two sees both
    p = ModelParams(n=30, d=2, beta=1000.0)
    y = expansion_output(torch.tensor(x), p)
    ref, scale = truth(x, 1000.0, None, "softmax")
    assert torch.isfinite(y).all() and scale.max() <= 30.001
    assert rel_error(y, ref, scale) <= 1e-13


def test_qk_scaled_identity_is_beta_times_c():
    rng = np.random.default_rng(1)
    x = torch.tensor(random_tokens(rng, 1, 60, 3))
    p = ModelParams(n=60, d=3, beta=2.0, Q=np.eye(3) * 1.5, K=np.eye(3))
    ref = _attention_output(x, ModelParams(n=60, d=3, beta=3.0))
    assert (expansion_output(x, p) - ref).abs().max() <= 1e-13


@pytest.mark.parametrize(("d", "mean", "sampler", "kind", "n"), [
    (2, "none", "full", "softmax", 24), (2, "identity", "full", "softmax", 24),
    (3, "none", "full", "softmax", 24), (3, "identity", "full", "usa", 24),
    (3, "identity", "fast", "softmax", 3), (2, "none", "fast", "softmax", 2)])
def test_seeded_simulation_is_the_same_with_either_evaluator(d, mean, sampler, kind, n):
    p = ModelParams(n=n, d=d, beta=3.0, mean=mean, attention=kind)
    w = np.random.default_rng(0).uniform(0.5, 2.0, n) if d == 3 else None
    kw = dict(runs=4, seed=21, initial=InitialState.uniform(w),
              recording=Recording(checkpoints=5, record=("tokens",)))
    how = Execution(sampler=sampler, attention_eval="dense")
    grid = TimeGrid.make(T=1.0, dt=0.01)
    dense = simulate(p, grid, execution=how, **kw)
    fast = simulate(p, grid, execution=replace(how, attention_eval="expansion"), **kw)
    assert dense.extra["attention_eval"] == "dense"
    assert fast.extra["attention_eval"] == "expansion"
    assert np.abs(dense.tokens - fast.tokens).max() <= 1e-9
    assert np.abs(dense.tokens[:, -1] - dense.tokens[:, 0]).max() > 0.1  # the tokens did move


@pytest.mark.parametrize(("scheme", "norm"), [("sde", "post"), ("network", "pre")])
def test_the_limit_and_pre_norm_are_the_same_with_either_evaluator(scheme, norm):
    p = ModelParams(n=20, d=3, beta=2.0, mean="identity", norm=norm)
    kw = dict(runs=3, seed=5, scheme=scheme, recording=Recording(record=("tokens",)))
    how = Execution(sampler="full", attention_eval="dense")
    grid = TimeGrid.make(T=0.5, dt=0.01)
    dense = simulate(p, grid, execution=how, **kw)
    fast = simulate(p, grid, execution=replace(how, attention_eval="expansion"), **kw)
    assert np.abs(dense.tokens - fast.tokens).max() <= 1e-9


def test_auto_rule_is_fixed_by_n_d_beta_and_dtype():
    big, small = ModelParams(n=4096, d=2, beta=6.0), ModelParams(n=16, d=2, beta=6.0)
    assert auto_uses_expansion(big, F64) and not auto_uses_expansion(small, F64)
    assert auto_uses_expansion(big, torch.float32)  # float32 runs too: the expansion works in float64
    assert not auto_uses_expansion(big.with_(d=4), F64)
    assert not auto_uses_expansion(big.with_(heads=2), F64)
    assert not auto_uses_expansion(big.with_(causal=True), F64)
    w = np.ones(4096)
    w[0] = 0.0  # a weightless token can lose 2 beta / ln 10 digits: 5.2 at beta = 6, allowed
    assert auto_uses_expansion(big, F64, w)
    assert not auto_uses_expansion(big.with_(beta=9.0), F64, w)  # 7.8 digits: dense
    assert _choose_evaluator(big, "auto", "gram") == "dense"
    assert _choose_evaluator(big, "dense", "full") == "dense"
    assert _choose_evaluator(small, "expansion", "full") == "expansion"
    res = simulate(ModelParams(n=400, d=2, beta=1.0), TimeGrid.make(layers=2), runs=1,
                   recording=Recording(record=("tokens",)), execution=Execution(sampler="full"))
    assert res.extra["attention_eval"] == "expansion"


@pytest.fixture()
def toy_kind():
    @ATTENTION_KINDS.register
    class Toy(_Softmax):
        name = "toy_softmax_for_expansion"

    yield Toy.name
    ATTENTION_KINDS.unregister(Toy.name)


@pytest.mark.parametrize(("change", "match"), [
    ({"d": 4}, "d in"), ({"heads": 2}, "heads = 1"), ({"causal": True}, "causal=False"),
    ({"qk": "gaussian"}, "random qk='gaussian'"),
    ({"Q": np.diag([1.0, 2.0, 3.0])}, "Q\\^T K = c I")])
def test_expansion_refuses_by_name(change, match):
    p = ModelParams(n=5, d=3, beta=1.0).with_(**change)
    with pytest.raises(ParameterError, match=match):
        _choose_evaluator(p, "expansion")
    assert _choose_evaluator(p, "auto") == "dense"
    with pytest.raises(ParameterError, match=match):
        simulate(p, TimeGrid.make(layers=2), runs=1,
                 execution=Execution(sampler="full", attention_eval="expansion"))


def test_expansion_refuses_other_kinds_samplers_and_names(toy_kind):
    with pytest.raises(ParameterError, match="toy_softmax_for_expansion"):
        _choose_evaluator(ModelParams(n=5, d=2, beta=1.0, attention=toy_kind), "expansion")
    p = ModelParams(n=5, d=3, beta=1.0)
    with pytest.raises(ParameterError, match="sampler='gram'"):
        simulate(p, TimeGrid.make(layers=2), runs=1,
                 execution=Execution(sampler="gram", attention_eval="expansion"))
    with pytest.raises(ParameterError, match="attention_eval must be one of"):
        simulate(p, TimeGrid.make(layers=2), runs=1, execution=Execution(attention_eval="fourier"))
    x = torch.tensor(random_tokens(np.random.default_rng(0), 1, 5, 3))
    with pytest.raises(ParameterError, match="drawn forms"):
        _attention_output(x, p, forms=torch.eye(3).double()[None], evaluator="expansion")
    with pytest.raises(ParameterError, match="tokens have d = 3"):
        expansion_output(x, ModelParams(n=5, d=2, beta=1.0))


def test_cli_attention_eval(tmp_path):
    import json

    from typer.testing import CliRunner

    from tokensde.cli import app

    runner = CliRunner()
    base = ["simulate", "--n", "300", "--d", "2", "--beta", "1", "--runs", "1", "--layers", "2",
            "--sampler", "full", "--checkpoints", "2", "--json"]
    out = runner.invoke(app, base)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["attention_eval"] == "expansion"
    out = runner.invoke(app, [*base, "--attention-eval", "dense"])
    assert json.loads(out.output)["attention_eval"] == "dense"
    out = runner.invoke(app, [*base, "--attention-eval", "expansion", "--heads", "2"])
    assert out.exit_code != 0 and "heads = 1" in out.output
