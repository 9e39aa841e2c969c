"""The value path W_O W_V of a real attention head at init (tokensde.real.value, docs/real.md): its
closed-form moments against seeded draws at GPT-2's init, against the Gaussian of the same entry
variance that the mapping uses, and GPT-2's own weights and Gaussian-value switch."""

from __future__ import annotations

import math

import pytest
import torch

from tokensde.model.checks import ParameterError
from tokensde.real import RealSpec, build, hidden_states, make_inputs
from tokensde.real.models import _gaussian_value_path, _head_products, has_transformers
from tokensde.real.value import draw_value_paths, value_moments

needs_tf = pytest.mark.skipif(not has_transformers(), reason="needs the [real] extra")
V = 0.02 ** 2  # GPT-2: every weight N(0, 0.02^2), c_proj N(0, 0.02^2 / (2 n_layer))


def _moments(p: torch.Tensor) -> tuple[float, float, float, float]:
    """Entry variance and kurtosis from the diagonal entries (independent: P_ii uses row i of O and
    column i of V) and mean, relative variance of |P e_0|^2 (one per draw)."""
    diag = p.diagonal(dim1=-2, dim2=-1).reshape(-1)
    var = float(diag.pow(2).mean())
    quad = p[:, :, 0].pow(2).sum(-1)
    return var, float(diag.pow(4).mean()) / var ** 2, float(quad.mean()), float(quad.var() /
                                                                                quad.mean() ** 2)


@pytest.mark.parametrize("var_o", [V / (2 * 12), V], ids=["c_proj scaled", "unscaled"])
def test_product_moments_against_draws_and_not_gaussian(var_o):
    d, k = 32, 8  # width 32, 4 heads of 8
    gen = torch.Generator().manual_seed(0)
    var, kurt, qmean, qrel = _moments(draw_value_paths(k, d, var_o, V, 10_000, gen))
    m = value_moments(k, d, var_o, V)
    assert m["entry_var"] == pytest.approx(k * var_o * V, rel=1e-12)
    assert m["entry_kurtosis"] == pytest.approx(3 + 6 / k, rel=1e-12)
    assert var == pytest.approx(m["entry_var"], rel=0.015)  # 320 000 entries: SE 0.3 %
    assert kurt == pytest.approx(m["entry_kurtosis"], abs=0.15)  # 3.75; SE about 0.03
    assert qmean == pytest.approx(m["quad_mean"], rel=0.02)
    assert qrel == pytest.approx(m["quad_relvar"], abs=0.04)  # 0.328; SE about 0.01
    g = value_moments(k, d, var_o, V, law="gaussian")
    assert g["entry_var"] == m["entry_var"] and g["quad_mean"] == m["quad_mean"]
    assert abs(kurt - g["entry_kurtosis"]) > 0.5  # the product's tails are not the Gaussian's
    assert abs(qrel - g["quad_relvar"]) > 0.2
    var, kurt, qmean, qrel = _moments(draw_value_paths(k, d, var_o, V, 10_000, gen, "gaussian"))
    assert var == pytest.approx(g["entry_var"], rel=0.015)
    assert kurt == pytest.approx(3.0, abs=0.1) and qrel == pytest.approx(2 / d, abs=0.01)


def test_value_moments_refuse_bad_values():
    with pytest.raises(ParameterError, match="law must be one of product, gaussian; got 'x'"):
        value_moments(8, 32, V, V, law="x")
    with pytest.raises(ParameterError, match="k must be an integer >= 1; got 0"):
        value_moments(0, 32, V, V)


@pytest.mark.slow  # the GPT-2 build: about 1.5 s of CPU
@needs_tf
def test_gpt2_heads_follow_the_product_law_and_the_gaussian_switch():
    spec = RealSpec(arch="gpt2", width=32, heads=4, ctx=16, layers=4)
    heads = torch.cat([_head_products(b.attn, 4) for s in range(6)
                       for b in build(spec, s).blocks]).double()  # 96 heads
    m = value_moments(8, 32, V / 8, V)
    diag = heads.diagonal(dim1=-2, dim2=-1).reshape(-1)  # 3072 independent entries
    assert float(diag.pow(2).mean()) == pytest.approx(m["entry_var"], rel=0.1)
    net = build(spec, 0)
    ids = make_inputs(spec, 2, 0)
    u = net.blocks[1].ln_1(hidden_states(net, ids)[:, 1])
    with torch.no_grad():
        own = net.blocks[1].attn(u)[0]
        handle = _gaussian_value_path(net.blocks[1].attn, _head_products(net.blocks[1].attn, 4),
                                     causal=True)
        again = net.blocks[1].attn(u)[0]
        handle.remove()
    assert torch.allclose(again, own, atol=1e-6 * float(own.abs().max()))  # the hook is exact
    g = build(RealSpec(**{**spec.__dict__, "value_law": "gaussian"}), 0)
    hg = hidden_states(g, ids)
    h = hidden_states(net, ids)
    assert torch.equal(hg[:, 0], h[:, 0]) and not torch.allclose(hg[:, 1], h[:, 1])
    step = (hg[:, 1] - hg[:, 0]).pow(2).mean() / (h[:, 1] - h[:, 0]).pow(2).mean()
    assert math.isfinite(float(step)) and 0.5 < float(step) < 2.0  # same second moment
    with pytest.raises(ParameterError, match="value_law must be 'product' except for gpt2"):
        RealSpec(arch="bert", value_law="gaussian")


def test_cli_refuses_bad_threads_and_value_law(tmp_path):
    from typer.testing import CliRunner

    from tokensde.cli import app

    for args, msg in ((["torch-encoder", "--threads", "0"],
                       "--threads must be an integer from 1 to 1024; got 0"),
                      (["torch-encoder", "--value-law", "gaussian"],
                       "--value-law does not apply to torch-encoder (only to gpt2)")):
        r = CliRunner().invoke(app, ["real", *args, "--out", str(tmp_path / "o")])
        assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output
