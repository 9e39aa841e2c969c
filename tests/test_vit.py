"""The ViT experiment: value-only initialisation arms, the spec layer, data readers, training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tokensde.model.params import ModelParams, ParameterError
from tokensde.sim.layers import _attention_output, network_step
from tokensde.vit import Arm, ViTConfig, build_vit, make_model, pair_cosines, parse_arms, value_weights
from tokensde.vit.geometry import geometry
from tokensde.vit.init import _arm_order

SMALL = ViTConfig(image_size=8, patch=4, dim=16, depth=3, heads=2)
ARMS = ["default", "gaussian:2", "noise:0", "noise:0.1", "noise:2", "hybrid:0", "hybrid:0.5",
        "identity", "shared"]
VALUE_KEYS = {f"blocks.{k}.attn.v.weight" for k in range(SMALL.depth)}


@pytest.mark.parametrize("block", ["standard", "attention-only"])
@pytest.mark.parametrize("arm", ARMS)
def test_arm_changes_only_value_matrices(arm: str, block: str) -> None:
    cfg = ViTConfig(**{**SMALL.to_dict(), "block": block})
    ref = build_vit(cfg, seed=5).state_dict()
    rng_before = torch.random.get_rng_state()
    model = make_model(cfg, arm, seed=5)
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # global RNG untouched
    state = model.state_dict()
    assert state.keys() == ref.keys()
    changed = {k for k in state if not torch.equal(state[k], ref[k])}
    assert changed <= VALUE_KEYS
    v, v0 = value_weights(model), [ref[f"blocks.{k}.attn.v.weight"] for k in range(cfg.depth)]
    eye = torch.eye(cfg.dim)
    if arm == "default":
        assert not changed
    elif arm == "noise:0":
        assert all(torch.equal(w, torch.zeros_like(w)) for w in v)
    elif arm.startswith("noise:"):
        lam = float(arm.split(":")[1])
        assert all(torch.equal(w, lam * w0) for w, w0 in zip(v, v0, strict=True))
    elif arm.startswith("hybrid:"):  # V = r I + LAM V_default, r = 1/sqrt(L) or 1
        lam, r = float(arm.split(":")[1]), cfg.branch_scale
        assert all(torch.equal(w, lam * w0 + r * eye) for w, w0 in zip(v, v0, strict=True))
    elif arm == "identity":
        assert all(torch.equal(w, eye) for w in v)
    elif arm == "shared":
        assert changed == VALUE_KEYS - {"blocks.0.attn.v.weight"}
        assert all(torch.equal(w, v0[0]) for w in v)
    else:  # gaussian:2 -> entry variance 2 / D; 768 entries give a relative s.e. of 5 %
        entries = torch.cat([w.detach().ravel() for w in v])
        assert abs(float(entries.var()) * cfg.dim / 2.0 - 1.0) < 0.2
        assert abs(float(entries.mean())) < 4 * math.sqrt(2.0 / cfg.dim / entries.numel())
        assert changed == VALUE_KEYS


def test_default_init_has_the_uniform_law() -> None:
    entries = torch.cat([w.detach().ravel() for w in value_weights(build_vit(SMALL, 0))])
    bound = 1 / math.sqrt(SMALL.dim)
    assert float(entries.abs().max()) <= bound
    assert abs(float(entries.var()) / (bound**2 / 3) - 1) < 0.2


def test_gaussian_arm_depends_on_the_seed_only() -> None:
    a, b, c = (value_weights(make_model(SMALL, "gaussian:1", s))[1] for s in (3, 3, 4))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_arm_parsing() -> None:
    assert Arm.parse(" suppressed:0.10 ").name == "noise:0.1"  # the old name of noise
    assert Arm.parse("hybrid:2").noise_factor == 2.0
    assert Arm.parse("default").noise_factor == 1.0
    assert Arm.parse("shared").noise_factor is None
    assert [a.name for a in parse_arms("default,identity,gaussian:0.5")] == [
        "default", "identity", "gaussian:0.5"]
    for bad in ("suppressed", "suppressed:-1", "gaussian:x", "identity:1", "foo", "shared:",
                "hybrid", "noise:nan", "hybrid:-0.5"):
        with pytest.raises(ParameterError, match="arm"):
            Arm.parse(bad)
    with pytest.raises(ParameterError, match="distinct"):
        parse_arms("default,noise:0,suppressed:0.0")


def test_arm_order_is_by_kind_then_label() -> None:
    arms = ["shared", "identity", "noise:0.5", "hybrid:0", "noise:0", "default", "noise:0", "zz"]
    assert _arm_order(arms) == ["default", "noise:0", "noise:0.5", "hybrid:0", "identity",
                               "shared", "zz"]


def test_config_errors_name_the_parameter() -> None:
    with pytest.raises(ParameterError, match="patch must divide image_size"):
        ViTConfig(image_size=28, patch=5)
    with pytest.raises(ParameterError, match="heads must divide dim"):
        ViTConfig(dim=10, heads=4)
    with pytest.raises(ParameterError, match="norm must be one of layer, rms"):
        ViTConfig(norm="batch")


def test_attention_only_block_is_the_spec_layer() -> None:
    """One attention-only block with Q = K = c I, one head, r = 1/sqrt(L) is spec §2's layer."""
    L, D, n, c = 4, 6, 5, 0.8
    cfg = ViTConfig(image_size=4, patch=2, dim=D, depth=L, heads=1, block="attention-only",
                    residual_scale=True)
    block = build_vit(cfg, 0).double().blocks[0]
    g = torch.Generator().manual_seed(1)
    V = torch.randn(D, D, generator=g, dtype=torch.float64) / math.sqrt(D)
    with torch.no_grad():
        block.attn.q.weight.copy_(c * torch.eye(D, dtype=torch.float64))
        block.attn.k.weight.copy_(c * torch.eye(D, dtype=torch.float64))
        block.attn.v.weight.copy_(V)
    u = torch.randn(3, n, D, generator=g, dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)
    with torch.no_grad():
        got = block(math.sqrt(D) * u) / math.sqrt(D)
    p = ModelParams(n=n, d=D, beta=c * c * math.sqrt(D))  # <q_i, k_j>/sqrt(D) = beta <u_i, u_j>
    y = _attention_output(u, p)
    want = network_step(u, y, y @ V.T, p, dt=1.0 / L)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_residual_scale() -> None:
    assert ViTConfig(depth=9, residual_scale=True).branch_scale == pytest.approx(1 / 3)
    assert ViTConfig(depth=9).branch_scale == 1.0


def test_pair_cosines_closed_form() -> None:
    x = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [1.0, 1.0]]])
    s = 1 / math.sqrt(2)
    want = torch.tensor([0.0, -1.0, s, 0.0, s, -s])  # pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    torch.testing.assert_close(pair_cosines(x), want)


def test_geometry_invariants() -> None:
    """V = 0 in the spec layer leaves tokens fixed; V = I (deterministic flow) merges them."""
    cfg = ViTConfig(image_size=8, patch=2, dim=16, depth=12, heads=1, block="attention-only")
    images = torch.randn(8, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    g = geometry(cfg, parse_arms("noise:0,identity"), images, seeds=[0, 1], bins=20)
    frozen, flow = g["arms"]["noise:0"], g["arms"]["identity"]
    assert all(h == frozen["hist"][0] for h in frozen["hist"])
    assert len(frozen["hist"]) == cfg.depth + 1 and sum(frozen["hist"][0]) == 2 * 8 * 16 * 17 // 2
    assert np.all(np.diff(flow["mean"]) > 0)
    assert flow["near_pos"][-1] > 0.9 > flow["near_pos"][0]
