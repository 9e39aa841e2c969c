"""LayerNorm's centring in the model of a post-LN network: every token after a LayerNorm is
orthogonal to the all-ones vector, so the model lives in those d - 1 dimensions with the same
entry variances (docs/real.md, "LayerNorm's centring")."""

from __future__ import annotations

import math

import torch

from tokensde.real.mapping import map_network
from tokensde.real.models import RealSpec, build
from tokensde.real.predict import _centred_coordinates, initial_state

TINY = {"width": 32, "heads": 4, "ctx": 16, "layers": 4}


def test_centred_coordinates_keep_the_inner_products_of_centred_tokens():
    x = torch.randn(3, 5, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    c = x - x.mean(-1, keepdim=True)
    y = _centred_coordinates(x)
    assert y.shape == (3, 5, 11)
    assert torch.allclose(y @ y.transpose(-1, -2), c @ c.transpose(-1, -2), atol=1e-12)
    # a vector along (1, ..., 1) has no centred part
    assert torch.allclose(_centred_coordinates(torch.ones(12, dtype=torch.float64)),
                          torch.zeros(11, dtype=torch.float64), atol=1e-14)


def _mapped(**kw):
    return map_network(build(RealSpec(arch="torch-encoder", **TINY, **kw), 0))


def test_post_ln_with_centring_is_the_rms_model_in_one_dimension_less():
    """d' = d - 1 dimensions with the same entry variances: sigma (dt sigma^2 = d var_O var_V, d
    the inner dimension of W_O W_V), the MLP's and the bias's per-coordinate variances, the
    logits and the pre-LN model are unchanged."""
    centred = _mapped(norm_first=False)
    rms = _mapped(norm_first=False, centring=False)
    pre = _mapped(norm_first=True)
    pre_rms = _mapped(norm_first=True, centring=False)
    d = TINY["width"]
    assert (centred.params.d, rms.params.d, pre.params.d) == (d - 1, d, d)
    for name in ("sigma", "mlp_sigma", "bias_sigma", "mlp_bias", "qk_scale", "beta"):
        assert getattr(centred.params, name) == getattr(rms.params, name), name
    assert pre.params == pre_rms.params
    assert "LayerNorm centring as RMS" in pre.law.notes
    assert not any("as RMS" in note for note in centred.law.notes)


def test_the_model_starts_from_the_centred_embeddings():
    m = _mapped(norm_first=False)
    x0 = torch.randn(2, 16, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x = initial_state(m, x0)
    c = x0 - x0.mean(-1, keepdim=True)
    c = c / torch.linalg.vector_norm(c, dim=-1, keepdim=True)
    assert x.shape == (2, 16, 31)
    assert torch.allclose(x @ x.transpose(-1, -2), c @ c.transpose(-1, -2), atol=1e-12)
    assert math.isclose(float(x.norm(dim=-1).max()), 1.0, rel_tol=1e-12)


def test_post_ln_value_noise_relative_to_the_stream_matches_the_model():
    """Monte Carlo of the network's value noise in the centred subspace: for y in S = 1^perp
    with |y| = |x|, E |Q W_O W_V y|^2 / |x|^2 = (d - 1) d var_O var_V, which the model gives as
    d' dt sigma^2 (d' = d - 1). Writing d' for the inner dimension (d - 1) var_O var_V would be
    1/d = 3 % low here, 8 SE of these 8000 draws."""
    m = _mapped(norm_first=False)
    law, d = m.law, TINY["width"]
    g = torch.Generator().manual_seed(2)
    draws = 8000
    w_v = torch.randn(draws, d, d, generator=g, dtype=torch.float64) * math.sqrt(law.var_v)
    w_o = torch.randn(draws, d, d, generator=g, dtype=torch.float64) * math.sqrt(law.var_o)
    y = torch.randn(draws, d, generator=g, dtype=torch.float64)
    y = y - y.mean(-1, keepdim=True)
    y = y / y.norm(dim=-1, keepdim=True) * math.sqrt(d)  # a post-LN token: |y|^2 = d
    out = (w_o @ (w_v @ y.unsqueeze(-1))).squeeze(-1)
    out = out - out.mean(-1, keepdim=True)  # what the next LayerNorm keeps
    ratio = out.pow(2).sum(-1) / d  # |Q P y|^2 / |x|^2
    model = m.params.d * m.grid.dt * m.params.sigma ** 2
    se = float(ratio.std()) / math.sqrt(draws)
    assert abs(float(ratio.mean()) - model) < 4 * se
    assert abs(float(ratio.mean()) - model * (d - 1) / d) > 4 * se  # the d' reading is resolved
