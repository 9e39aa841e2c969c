"""Llama at init (tokensde.real, docs/real.md, Llama): built offline from `LlamaConfig`, its weights
against what the mapping reads from the configuration, the rotary switch (position 0 for every
token, the causal mask kept), the refusals, and one seeded prediction (with a wrong mapping that
must fail it)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import integrate

from tokensde.model.checks import ParameterError
from tokensde.real import RealSpec, build, hidden_states, make_inputs, map_network, run_real
from tokensde.real.experiment import agreement
from tokensde.real.mapping import _BETA, to_model
from tokensde.real.measure import summarise
from tokensde.real.models import has_transformers
from tokensde.real.predict import predict

# transformers' Llama import alone is about 2.5 s of CPU
pytestmark = [pytest.mark.skipif(not has_transformers(), reason="needs the [real] extra"),
              pytest.mark.slow]
TINY = {"arch": "llama", "width": 32, "heads": 4, "ctx": 16, "layers": 4, "vocab": 512}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be fetched
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module", autouse=True)
def _loaded():
    """Import the Llama classes once, in setup (seconds), so that each test times its own work."""
    from tokensde.real.models import require_transformers

    assert require_transformers().LlamaModel is not None


def _silu_moment(q: float) -> float:
    """E silu(sqrt(q) u)^2 by adaptive quadrature."""
    return integrate.quad(lambda u: (math.sqrt(q) * u / (1 + math.exp(-math.sqrt(q) * u))) ** 2
                          * math.exp(-u * u / 2) / math.sqrt(2 * math.pi), -40, 40,
                          epsabs=1e-15)[0]


def test_built_weights_are_what_the_mapping_reads():
    """The built model: every projection and the embedding N(0, initializer_range^2) (pooled
    variance within 3 %), RMSNorm weights one, no biases, one key/value head per head."""
    net = build(RealSpec(**{**TINY, "width": 64, "layers": 6}), 0)
    cfg = net.model.config
    v = cfg.initializer_range ** 2
    assert cfg.num_key_value_heads == cfg.num_attention_heads == 4
    for part in ("q_proj", "k_proj", "v_proj", "o_proj"):
        w = torch.stack([getattr(b.self_attn, part).weight for b in net.blocks]).detach()
        assert float(w.var()) == pytest.approx(v, rel=0.03), part
        assert all(getattr(b.self_attn, part).bias is None for b in net.blocks)
    for part in ("gate_proj", "up_proj", "down_proj"):
        w = torch.stack([getattr(b.mlp, part).weight for b in net.blocks]).detach()
        assert float(w.var()) == pytest.approx(v, rel=0.03), part
        assert all(getattr(b.mlp, part).bias is None for b in net.blocks)
    assert float(net.model.embed_tokens.weight.detach().var()) == pytest.approx(v, rel=0.03)
    for b in net.blocks:
        for norm in (b.input_layernorm, b.post_attention_layernorm):
            assert torch.equal(norm.weight, torch.ones(64))


def test_mapping_reads_the_configuration():
    """Changing the configuration of a built model changes the mapping as the formulas say."""
    net = build(RealSpec(**TINY), 1)
    cfg = net.model.config
    cfg.initializer_range, cfg.rms_norm_eps, cfg.intermediate_size = 0.05, 1e-3, 96
    m = map_network(net)
    p, d, v, L = m.params, 32, 0.05 ** 2, 4
    s = v / (v + 1e-3)
    assert (p.d, p.heads, p.n, p.causal, p.norm, p.has_bias) == (32, 4, 16, True, "pre", False)
    assert not m.has_limit and m.radius2 == v
    # dt sigma^2 = d var_O var_V s / r0^2 with r0^2 = v: sigma^2 = L d v s
    assert p.sigma ** 2 == pytest.approx(L * d * v * s, rel=1e-12)
    assert p.beta == _BETA and p.beta * p.qk_scale == pytest.approx(d * s * v, rel=1e-12)
    q = d * s * v
    assert p.mlp == f"swiglu(q={q:.6g})" and p.mlp_width == 2 * 96
    # dt mlp_sigma^2 = m var_2 q_3 E silu(sqrt(q) u)^2 / (d r0^2), q_3 = q
    want = L * 96 * v * q * _silu_moment(float(f"{q:.6g}")) / (d * v)
    assert p.mlp_sigma ** 2 == pytest.approx(want, rel=1e-9)
    assert "rotary position embeddings not modelled" in m.law.notes


def _outputs(spec: RealSpec, ids: torch.Tensor) -> torch.Tensor:
    return hidden_states(build(spec, 2), ids)[:, 1]  # the first block's output


def test_rope_off_rotates_nothing_and_keeps_the_causal_mask():
    spec = RealSpec(**TINY)
    off = replace(spec, rope=False)
    ids = make_inputs(spec, 1, 3)
    first, last, swapped = ids.clone(), ids.clone(), ids.clone()
    first[:, 0] = (ids[:, 0] + 1) % 512
    last[:, -1] = (ids[:, -1] + 1) % 512
    swapped[:, [0, 1]] = ids[:, [1, 0]]
    for s in (spec, off):
        base = _outputs(s, ids)
        # a token reads its predecessors (all-zero position ids given to the model would have
        # made each token a packed sequence of its own) and nothing after it (causal)
        assert float((_outputs(s, first)[:, 1] - base[:, 1]).abs().max()) > 1e-4
        assert torch.equal(_outputs(s, last)[:, :-1], base[:, :-1])
    # without rotation a later token reads its predecessors as a set: swapping two is invisible
    np.testing.assert_allclose(_outputs(off, swapped)[:, 2:].numpy(),
                               _outputs(off, ids)[:, 2:].numpy(), atol=1e-7, rtol=0)
    # with RoPE the positions matter (little at init: logits of standard deviation ~0.01)
    diff = _outputs(spec, swapped)[:, 2:] - _outputs(spec, ids)[:, 2:]
    assert float(diff.abs().max()) > 1e-6


def test_mlp_scale_multiplies_gate_and_input_projections():
    """`mlp_scale` c: W_1 and W_3 built c times the default init (same seed), the gate variance q
    and mlp_sigma^2 mapped as c^2 q and (c^2)^2 kappa_(c^2 q)(1) / kappa_q(1) times the default's."""
    base, big = RealSpec(**TINY), RealSpec(**TINY, mlp_scale=3.0)
    a, b = build(base, 4), build(big, 4)
    for x, y in zip(a.blocks, b.blocks, strict=True):
        assert torch.allclose(3 * x.mlp.gate_proj.weight, y.mlp.gate_proj.weight)
        assert torch.allclose(3 * x.mlp.up_proj.weight, y.mlp.up_proj.weight)
        assert torch.equal(x.mlp.down_proj.weight, y.mlp.down_proj.weight)
    p, r = map_network(a).params, map_network(b).params
    q = 32 * 0.02 ** 2 * (0.02 ** 2 / (0.02 ** 2 + 1e-6))
    assert type(r.mlp_block).q == pytest.approx(9 * q, rel=1e-5)
    ratio = 9 * _silu_moment(float(f"{9 * q:.6g}")) / _silu_moment(float(f"{q:.6g}"))
    assert r.mlp_sigma ** 2 / p.mlp_sigma ** 2 == pytest.approx(ratio, rel=1e-9)
    with pytest.raises(ParameterError, match="mlp_scale"):
        RealSpec(arch="gpt2", mlp_scale=2.0)


def test_refusals():
    with pytest.raises(ParameterError, match="rope"):
        RealSpec(arch="gpt2", rope=False)
    with pytest.raises(ParameterError, match="centring"):
        RealSpec(arch="llama", centring=False)
    with pytest.raises(ParameterError, match="mlp_width must be even"):
        replace(map_network(build(RealSpec(**TINY), 0)).params, mlp_width=7)


def test_llama_agrees_with_the_discrete_prediction_and_a_wrong_mapping_does_not():
    """Every layer's mean token cosine within the Sidak threshold of tokensde's network (seeded);
    the same embeddings predicted with the value path's variance doubled must miss."""
    run = run_real(RealSpec(**TINY), inits=40, inputs=2, seed=5, sde=False)
    a = run.agreement
    assert a["agrees"], a
    real = run.table[run.table.side == "real"]
    law = run.mapping.law
    _, pred = predict(to_model(replace(law, var_v=2 * law.var_v)), run.embeddings, 5)
    t = pd.concat([real, summarise(pred).assign(side="network", frac=0.0)])
    assert not agreement(t)["agrees"]
