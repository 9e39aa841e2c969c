"""Noise laws and attention kinds as strategy objects: a new one is one class that registers itself.

Each registry gets a toy member defined here (and removed again): `simulate` uses it with
sampler='full' although no other file names it. The closed forms of the built-in laws agree with
the general Ito drift of their covariance, and each covariance with the draws.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from tokensde import Execution, ModelParams, ParameterError, TimeGrid, simulate
from tokensde.model.attention import ATTENTION_KINDS, AttentionKind
from tokensde.model.noise import ENTRY_LAWS, NOISE_LAWS, NoiseLaw, Streams
from tokensde.sim.layers import _attention_output, _attention_weights, normalize
from tokensde.sim.rng import RunStreams
from tokensde.sim.samplers import _full_noise, choose_sampler


class DiagonalNoise(NoiseLaw):
    """Toy law: `V = diag(g)`, `g` with i.i.d. entries of variance sigma^2."""

    name = "diagonal"
    laws = ("gaussian", "uniform")

    def matrices(self, rs: Streams, dtype: torch.dtype) -> torch.Tensor:
        return ENTRY_LAWS[self.law](rs, (self.d,), self.scale, dtype).diag_embed()

    def covariance(self, y: torch.Tensor) -> torch.Tensor:
        return self.scale**2 * (y * y).diag_embed()


class SigmoidAttention(AttentionKind):
    """Toy kind: `A_ij = sigmoid(l_ij) / n`, without the Gram-space sampler."""

    name = "sigmoid"
    samplers = ("fast", "full")

    def weights(self, logits: torch.Tensor, top: float | None = None) -> torch.Tensor:
        return logits.sigmoid() / logits.shape[-1]


@pytest.fixture
def diagonal() -> Iterator[type[NoiseLaw]]:
    yield NOISE_LAWS.register(DiagonalNoise)
    NOISE_LAWS.unregister("diagonal")


@pytest.fixture
def sigmoid() -> Iterator[type[AttentionKind]]:
    yield ATTENTION_KINDS.register(SigmoidAttention)
    ATTENTION_KINDS.unregister("sigmoid")


def _unit(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return normalize(torch.randn(*shape, generator=g, dtype=torch.float64))


def test_a_registered_noise_law_runs_in_simulate(diagonal):
    p = ModelParams(n=3, d=4, beta=1.5, noise="diagonal", sigma=0.8)
    assert isinstance(p.noise_law, DiagonalNoise) and p.noise_scale == 0.8
    res = simulate(p, TimeGrid.make(layers=25), runs=6, seed=2, execution=Execution(sampler="full"))
    # the same network by hand: V_k = diag(g_k), drawn from the run streams in the same order
    rs = RunStreams(2, 6)
    x = normalize(rs.normal(3, 4))
    for _ in range(25):
        y = _attention_output(x, p)
        g = 0.8 * rs.normal(4)
        x = normalize(x + 0.2 * y * g[:, None, :])
    np.testing.assert_allclose(res.x, x.numpy(), rtol=0, atol=1e-12)
    sde = simulate(p, TimeGrid.make(layers=25), runs=6, seed=2, scheme="sde",
                   execution=Execution(sampler="full"))
    assert float(np.abs(np.linalg.norm(sde.x, axis=-1) - 1).max()) < 1e-12
    assert simulate(p.with_(law="uniform"), TimeGrid.make(layers=5), runs=2,
                    execution=Execution(sampler="full")).sampler == "full"
    assert choose_sampler(p) == "full"
    with pytest.raises(ParameterError, match="sampler='fast' needs"):
        choose_sampler(p, "fast")
    with pytest.raises(ParameterError, match="sampler='gram' needs"):
        choose_sampler(p.with_(d=16), "gram")


def test_a_noise_law_checks_its_own_parameters(diagonal):
    with pytest.raises(ParameterError, match=r"law \(for noise=diagonal\) must be one of gaussian, "
                                             "uniform; got 'rademacher'"):
        ModelParams(noise="diagonal", law="rademacher")
    with pytest.raises(ParameterError, match="eps must be given only with noise='scalar' "
                                             r"\(sigma scales diagonal noise\)"):
        ModelParams(noise="diagonal", eps=0.5)
    with pytest.raises(ParameterError, match="noise must be one of matrix, scalar, symmetric, "
                                             "diagonal"):
        ModelParams(noise="tridiagonal")


def test_a_registered_attention_kind_runs_in_simulate(sigmoid):
    p = ModelParams(n=4, d=3, beta=2.0, attention="sigmoid", causal=True)
    x = _unit((5, 4, 3), 1)
    logits = 2.0 * x @ x.transpose(-1, -2)
    expected = logits.sigmoid().tril() / 4  # the causal mask, applied once for every kind
    torch.testing.assert_close(_attention_weights(x, p), expected, rtol=0, atol=1e-15)
    res = simulate(p, TimeGrid.make(layers=10), runs=4, seed=0, execution=Execution(sampler="full"))
    assert np.isfinite(res.gram).all()
    assert simulate(p, TimeGrid.make(layers=10), runs=4, seed=0,
                    execution=Execution(dtype="float32")).sampler == "full"
    wide = p.with_(causal=False, n=2, d=16)
    assert not wide.rotation_invariant and choose_sampler(wide) == "fast"  # no 'gram' listed
    with pytest.raises(ParameterError, match="sampler='gram' needs"):
        choose_sampler(wide, "gram")


def test_unknown_names_name_their_parameter():
    with pytest.raises(ParameterError, match=r"^noise must be one of matrix, scalar, symmetric; "
                                             "got 'diagonal'$"):
        ModelParams(noise="diagonal")
    with pytest.raises(ParameterError, match=r"^attention must be one of softmax, usa; got 'sigmoid'$"):
        ModelParams(attention="sigmoid")
    with pytest.raises(ParameterError, match="attention must be one of softmax, usa"):
        ATTENTION_KINDS.get(None)
    assert NOISE_LAWS.names() == ("matrix", "scalar", "symmetric")


def test_a_name_is_taken_once():
    class Impostor(DiagonalNoise):
        name = "matrix"

    with pytest.raises(ValueError, match=r"'matrix' is already registered by tokensde\.model\.noise\."):
        NOISE_LAWS.register(Impostor)
    assert NOISE_LAWS.get("matrix").__name__ == "_MatrixNoise"


LAWS = [
    {"noise": "matrix"},
    {"noise": "matrix", "law": "uniform", "sigma": 0.6},
    {"noise": "scalar", "eps": 1.3},
    {"noise": "scalar", "law": "rademacher"},
    {"noise": "symmetric", "sigma": 0.7},
    {"noise": "diagonal", "law": "uniform", "sigma": 1.2},
]


@pytest.mark.parametrize("kw", LAWS)
def test_ito_drift_and_covariance_agree_with_the_law(diagonal, kw):
    """`ito` = `-P_x Sigma x - tr(P_x Sigma) x / 2` of `covariance`, which is `Cov(V y)`."""
    p = ModelParams(n=3, d=4, beta=0.9, **kw)
    law = p.noise_law
    x = _unit((2, 3, 4), 4)
    y = _attention_output(x, p)
    general = NoiseLaw.ito(law, x, y)
    torch.testing.assert_close(law.ito(x, y), general, rtol=0, atol=1e-14)
    runs = 40_000
    xi = _full_noise(y[:1].expand(runs, 3, 4), p, RunStreams(seed=7, runs=runs))
    torch.testing.assert_close(xi, law.draw(y[:1].expand(runs, 3, 4),
                                            RunStreams(seed=7, runs=runs)), rtol=0, atol=0)
    emp = torch.einsum("rna,rnb->nab", xi, xi) / runs
    assert float((emp - law.covariance(y[0])).abs().max()) < 8 * law.scale**2 / math.sqrt(runs)
