"""Real Transformers at init (tokensde.real, docs/real.md): built offline from configurations,
the mapping's parameters against the configuration and the weights, one seeded agreement with the
discrete prediction (and a wrong mapping that must fail it), the no-extra error."""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from tokensde.cli import app
from tokensde.model.checks import ParameterError
from tokensde.model.mlp import MLPS
from tokensde.model.mlp.gelu import gelu_at
from tokensde.real import RealSpec, build, hidden_states, make_inputs, map_network, run_real
from tokensde.real.experiment import agreement
from tokensde.real.mapping import _BETA, to_model
from tokensde.real.measure import directions_gram, gram_stats, summarise
from tokensde.real.models import has_transformers
from tokensde.real.predict import predict

needs_tf = pytest.mark.skipif(not has_transformers(), reason="needs the [real] extra")
TINY = {"width": 32, "heads": 4, "ctx": 16, "layers": 4}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be fetched
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _images(count: int = 8) -> torch.Tensor:
    return torch.randn(count, 1, 28, 28, generator=torch.Generator().manual_seed(0))


# the HuggingFace builds take 1-2 s of CPU each: slow, but for the torch encoder
@pytest.mark.parametrize("arch", [pytest.param(a, marks=pytest.mark.slow) for a in ("gpt2", "bert", "vit")]
                         + ["torch-encoder"])
def test_built_offline_in_eval_mode_and_seeded(arch):
    if arch != "torch-encoder" and not has_transformers():
        pytest.skip("needs the [real] extra")
    spec = RealSpec(arch=arch, **TINY)
    net = build(spec, 3)
    x = make_inputs(spec, 2, 5, _images())
    h = hidden_states(net, x)
    assert h.shape == (2, 5, spec.tokens, 32)
    assert not net.model.training
    assert torch.equal(h, hidden_states(build(spec, 3), x))  # the init is the seed's
    assert not torch.equal(h, hidden_states(build(spec, 4), x))


def test_torch_encoder_layers_are_initialised_independently():
    net = build(RealSpec(arch="torch-encoder", **TINY), 0)
    w = [b.self_attn.in_proj_weight for b in net.blocks]
    assert not torch.equal(w[0], w[1])  # nn.TransformerEncoder would clone one layer


@pytest.mark.slow  # the GPT-2 build: about 2.5 s of CPU
@needs_tf
def test_gpt2_mapping_equals_configuration_and_weights():
    spec = RealSpec(arch="gpt2", **TINY)
    net = build(spec, 1)
    m = map_network(net)
    cfg = net.model.config
    p = m.params
    assert (p.d, p.heads, p.n, p.causal, p.norm) == (32, 4, 16, True, "pre")
    assert m.grid.steps == 4 and math.isclose(m.grid.dt, 1 / 4)
    v, d = cfg.initializer_range ** 2, cfg.n_embd
    s = 2 * v / (2 * v + cfg.layer_norm_epsilon)
    # dt sigma^2 = d var_O var_V s / r0^2, var_O = v / (2L), r0^2 = 2v: sigma^2 = d v s / 4
    assert math.isclose(p.sigma ** 2, d * v * s / 4, rel_tol=1e-12)
    assert math.isclose(p.beta * p.qk_scale, d * s * v, rel_tol=1e-12) and p.beta == _BETA
    assert p.qk == "gaussian" and p.qk_redraw == "layer" and p.mlp_width == 4 * d
    assert m.has_limit
    # the value path's second moment from the weights: entries of W_O W_V have variance
    # d var_O var_V (all layers pooled), the mapping's dt sigma^2 r0^2 / s
    big = build(RealSpec(arch="gpt2", width=64, heads=4, ctx=16, layers=16), 2)
    prods = [b.attn.c_proj.weight.T.double() @ b.attn.c_attn.weight[:, 128:].T.double()
             for b in big.blocks]  # Conv1D: y = x W, W (d_in, d_out); W_V is the last third
    measured = float(torch.stack(prods).detach().var())
    assert measured == pytest.approx(64 * (v / 32) * v, rel=0.05)


@needs_tf
def test_bert_has_no_depth_limit_and_gpt2_without_scaling_neither():
    for spec in (RealSpec(arch="bert", **TINY), RealSpec(arch="gpt2", residual_scaling=False,
                                                         **TINY)):
        m4 = map_network(build(spec, 0))
        m8 = map_network(build(RealSpec(**{**_fields(spec), "layers": 8}), 0))
        assert not m4.has_limit
        assert m8.params.sigma ** 2 == pytest.approx(2 * m4.params.sigma ** 2, rel=1e-12)


def _fields(spec: RealSpec) -> dict:
    d = spec.to_dict()
    d.pop("tokens")
    d["vocab"] = spec.vocab
    return d


def test_gelu_at_kernel_against_monte_carlo():
    act = MLPS.get(gelu_at(0.1))()
    g = torch.Generator().manual_seed(0)
    u = torch.randn(400_000, generator=g, dtype=torch.float64)
    w = torch.randn(400_000, generator=g, dtype=torch.float64)
    for rho in (0.0, 0.5, 0.9):
        v = rho * u + math.sqrt(1 - rho * rho) * w
        mc = float((act(u) * act(v)).mean()) / act.second_moment
        assert mc == pytest.approx(float(act.kernel(np.array(rho))), abs=0.01)
    assert float(act.kernel(np.array(0.0))) < 0.06  # near-linear at small q, unlike q = 1
    assert float(MLPS.get("gelu")().kernel(np.array(0.0))) > 0.18


def test_gram_stats_on_known_configurations():
    x = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]]], dtype=torch.float64)
    s = gram_stats(directions_gram(x), tol=1e-3)
    assert s["cos_mean"][0] == pytest.approx(-1 / 3)
    assert s["frac_merged"][0] == pytest.approx(1 / 3)
    assert s["frac_anti"][0] == pytest.approx(2 / 3)
    assert s["erank"][0] == pytest.approx(1.0)
    e = gram_stats(torch.eye(4, dtype=torch.float64)[None])
    assert e["erank"][0] == pytest.approx(4.0) and e["cos_mean"][0] == 0.0


@pytest.mark.slow
def test_encoder_agrees_with_the_discrete_prediction_and_a_wrong_mapping_does_not():
    """Pre-LN torch encoder without biases (no extra needed): every layer's mean token cosine
    within 3 combined standard errors of tokensde's network; the same embeddings predicted with
    the value path's variance doubled must miss at some layer."""
    spec = RealSpec(arch="torch-encoder", bias=False, **TINY)
    run = run_real(spec, inits=24, inputs=2, seed=11, sde=False)
    a = run.agreement
    assert a["within"] == a["layers"] == 4, a
    real = run.table[(run.table.side == "real")]
    assert float(real[(real.stat == "cos_mean") & (real.layer == 4)]["mean"].iloc[0]) > 0.07
    law = run.mapping.law
    wrong = to_model(replace(law, var_v=2 * law.var_v))
    assert run.embeddings is not None
    _, pred = predict(wrong, run.embeddings, 5)
    t = pd.concat([real, summarise(pred).assign(side="network", frac=0.0)])
    assert agreement(t)["within"] < 4


def test_bad_spec_is_refused_before_work():
    with pytest.raises(ParameterError, match="heads"):
        RealSpec(width=30, heads=4)
    with pytest.raises(ParameterError, match="arch"):
        RealSpec(arch="mistral")
    with pytest.raises(ParameterError, match="residual_scaling"):
        RealSpec(arch="bert", residual_scaling=False)


def test_without_the_extra_the_command_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    out = CliRunner().invoke(app, ["real", "gpt2", "--layers", "2", "--out", str(tmp_path)])
    assert out.exit_code != 0
    assert 'pip install "tokensde[real]"' in out.output
    assert "Traceback" not in out.output


def test_report_section_is_skipped_clearly_without_the_extra(tmp_path):
    from tokensde.study import FIGURES, Context
    from tokensde.study.real import _draw_real

    spec = FIGURES["real"]
    sec = _draw_real(Context(out=tmp_path, size="tiny"), spec, None, False)
    assert sec.status == "missing"
    assert sec.note.startswith("skipped: transformers not installed")
