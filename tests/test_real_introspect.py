"""Introspection of a user's Transformer (tokensde.real.introspect, docs/own-transformer.md): torch's
encoder layers read into the same ModelParams as the hand mapping, a hand-written block read with its
residual scale and causal mask, and blocks that are not read refused with their name."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from tokensde.real.experiment import agreement, run_real
from tokensde.real.introspect import (
    IntrospectionError,
    block_states,
    draw,
    find_blocks,
    map_read,
    params_errors,
    read_network,
    run_own,
    to_law,
)
from tokensde.real.mapping import (
    BlockLaw,
    _map_bert,
    _map_gpt2,
    _map_llama,
    _map_torch_encoder,
    _map_vit,
    to_model,
)
from tokensde.real.measure import summarise
from tokensde.real.models import RealSpec, build, has_transformers, hidden_states, make_inputs
from tokensde.real.predict import predict

Z = 4.0  # a read variance (or mapped parameter) agrees with the truth within Z standard errors
EXACT = ("n", "d", "heads", "causal", "norm", "noise", "law", "beta", "qk", "qk_redraw", "mlp",
         "mlp_width")
MEASURED = ("sigma", "qk_scale", "mlp_sigma", "bias_sigma", "mlp_bias")
D, HEADS, N, L = 64, 4, 8, 4
DATA = Path(__file__).parent / "data"


def _gelu_q(name: str) -> float:
    """q of the mlp name `gelu(q=<q>)` or `swiglu(q=<q>)` (`swiglu`: q = 1)."""
    if name == "swiglu":
        return 1.0
    return float(name.split("(q=")[1].removesuffix(")"))


def _same_params(read, hand, radius2: float = 1.0) -> None:
    """Every discrete field equal; every continuous one within Z propagated standard errors."""
    got = map_read(read, radius2, depth_scaled=hand.law.depth_scaled).params
    se = params_errors(read, radius2)
    at_q = got.mlp.startswith(("gelu(", "swiglu"))  # the activation at the read q
    for f in EXACT:
        if f == "mlp" and at_q:  # compared below
            assert got.mlp.split("(")[0] == hand.params.mlp.split("(")[0]
            continue
        assert getattr(got, f) == getattr(hand.params, f), f
    if at_q:
        assert abs(_gelu_q(got.mlp) - _gelu_q(hand.params.mlp)) <= Z * se["mlp_q"]
    for f in MEASURED:
        a, b = getattr(got, f), getattr(hand.params, f)
        assert abs(a - b) <= Z * se[f] + 1e-12, (f, a, b, se[f])
        assert (a == 0) == (b == 0), f  # a term present on one side only is a misreading


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre", "post"])
@pytest.mark.parametrize("mlp", [True, False], ids=["mlp", "no-mlp"])
def test_torch_encoder_read_as_the_hand_mapping(norm_first, mlp):
    spec = RealSpec(arch="torch-encoder", layers=L, width=D, heads=HEADS, ctx=N, vocab=50,
                    norm_first=norm_first, mlp=mlp)
    read = read_network(lambda s: build(spec, s).model, make_inputs(spec, 2, 0))
    b = read.blocks[0]
    assert (b.norm, b.activation, b.causal, b.residual_scale) == (
        "pre" if norm_first else "post", "relu", False, (1.0, 1.0))
    assert read.layers == L and read.tokens == N and b.width == 4 * D and b.centred
    assert not read.centred_input  # the embeddings: token + position, not centred
    _same_params(read, _map_torch_encoder(build(spec, 0)))
    # the law itself: Xavier 1/(2d) for the in-projection, torch's Linear 1/(3 fan_in)
    m = 4 * D
    truth = {"q": 1 / (2 * D), "v": 1 / (2 * D), "o": 1 / (3 * D), "1": 1 / (3 * D),
             "2": 1 / (3 * m) if mlp else 0.0, "b1": 1 / (3 * D), "b2": 1 / (3 * m), "bo": 0.0}
    for k, v in truth.items():
        got = read.pooled(k)
        assert abs(got.value - v) <= Z * got.se + 1e-15, (k, got, v)
    assert abs(read.pooled("q").kurtosis - 1.8) < 0.1  # uniform entries, not Gaussian (3)


def test_block_states_are_the_hidden_states():
    spec = RealSpec(arch="torch-encoder", layers=3, width=32, heads=2, ctx=N, vocab=50)
    net, ids = build(spec, 0), make_inputs(spec, 2, 1)
    h = block_states(net.model, find_blocks(net.model), ids)
    assert h.shape == (2, 4, N, 32) and torch.equal(h, hidden_states(net, ids))


def test_rms_norms_read_uncentred():
    spec = RealSpec(arch="torch-encoder", layers=2, width=32, heads=2, ctx=N, vocab=50,
                    norm_first=False, centring=False)
    read = read_network(lambda s: build(spec, s).model, make_inputs(spec, 2, 0), seeds=(0,))
    assert not read.blocks[0].centred and read.blocks[0].norm_kind == "RMSNorm"
    assert map_read(read).params.d == 32  # d, not d - 1: no centring to reduce by
    _same_params(read, _map_torch_encoder(build(spec, 0)))


class PreBlock(nn.Module):
    """A pre-LN block written by hand: x + c attn(LN(x)), then h + c mlp(LN(h)), c = 1/sqrt(2L)."""

    def __init__(self, d: int, heads: int, layers: int, causal: bool = False,
                 act: type[nn.Module] = nn.GELU) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), act(), nn.Linear(4 * d, d))
        self.scale = 1 / math.sqrt(2 * layers)
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block."""
        n = x.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool).triu(1) if self.causal else None
        u = self.ln1(x)
        x = x + self.scale * self.attn(u, u, u, attn_mask=mask, need_weights=False)[0]
        return x + self.scale * self.mlp(self.ln2(x))


class RMSBlock(PreBlock):
    """The pre-norm block with torch's RMSNorm (eps None: the dtype's machine epsilon)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__(d, heads, 1)
        self.ln1, self.ln2 = nn.RMSNorm(d), nn.RMSNorm(d)


def test_torch_rms_norm_read():
    read = read_network(lambda s: Net([RMSBlock(D, HEADS) for _ in range(2)]), _ids(), seeds=(0,))
    b = read.blocks[0]
    assert (b.norm, b.norm_kind, b.centred, b.eps) == ("pre", "RMSNorm", False,
                                                       torch.finfo(torch.float32).eps)
    assert to_law(read).shrink == pytest.approx(1.0 / (1.0 + b.eps))  # r0^2 = 1


class PostBlock(nn.Module):
    """A post-LN block written by hand with residual scale 1/2 on both branches."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True, bias=False)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d, bias=False), nn.Linear(2 * d, d, bias=False)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block."""
        h = self.n1(x + 0.5 * self.attn(x, x, x, need_weights=False)[0])
        return self.n2(h + 0.5 * self.fc2(torch.relu(self.fc1(h))))


class Net(nn.Module):
    """Token embedding and learned positions, N(0, 1/2) each, then `blocks`."""

    def __init__(self, blocks: list[nn.Module], d: int = D, vocab: int = 50, n: int = N) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Embedding(n, d)
        nn.init.normal_(self.embed.weight, 0.0, math.sqrt(0.5))
        nn.init.normal_(self.pos.weight, 0.0, math.sqrt(0.5))
        self.layers = nn.ModuleList(blocks)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids -> the last block's output."""
        h = self.embed(ids) + self.pos(torch.arange(ids.shape[1]))
        for b in self.layers:
            h = b(h)
        return h


def _ids(batch: int = 2) -> torch.Tensor:
    return torch.randint(0, 50, (batch, N), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_hand_written_pre_ln_block_with_residual_scale(causal):
    read = read_network(lambda s: Net([PreBlock(D, HEADS, L, causal) for _ in range(L)]), _ids())
    b = read.blocks[-1]
    c = 1 / math.sqrt(2 * L)
    assert (b.cls, b.norm, b.activation, b.causal, b.width, b.heads) == (
        "PreBlock", "pre", "gelu", causal, 4 * D, HEADS)
    assert b.residual_scale == pytest.approx((c, c), rel=1e-5)
    m = 4 * D
    truth = BlockLaw(D, HEADS, L, N, causal, "pre", 1 / (2 * D), 1 / (2 * D), 1 / (2 * D),
                     c * c / (3 * D), "gelu", m, 1 / (3 * D), c * c / (3 * m), 1e-5, 1.0,
                     var_b1=1 / (3 * D), var_b2=c * c / (3 * m), centred=True)
    law = to_law(read)
    for f in ("var_q", "var_k", "var_v", "var_o", "var_1", "var_2", "var_b1", "var_b2"):
        assert getattr(law, f) == pytest.approx(getattr(truth, f), rel=0.05), f
    _same_params(read, to_model(truth))


def test_hand_written_post_ln_block():
    read = read_network(lambda s: Net([PostBlock(D, HEADS) for _ in range(L)]), _ids(),
                        seeds=(0, 1))
    b = read.blocks[0]
    assert (b.norm, b.activation, b.width, b.residual_scale) == ("post", "relu", 2 * D, (0.5, 0.5))
    law = to_law(read)
    assert law.model_d == D - 1 and law.var_b1 == law.var_b2 == 0.0
    assert law.var_o == pytest.approx(0.25 / (3 * D), rel=0.05)  # the 1/2 folded in


class GatedMLP(nn.Module):
    """SwiGLU-style: down(gate_fn(gate(u)) * up(u)), torch's Linear biases."""

    def __init__(self, d: int, gate: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.gate_fn = gate

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """The gated MLP."""
        return self.down(self.gate_fn(self.gate(u)) * self.up(u))


class GatedBlock(PreBlock):
    """The pre-LN block with a gated MLP."""

    def __init__(self, d: int, heads: int,
                 gate: Callable[[torch.Tensor], torch.Tensor] = nn.functional.silu) -> None:
        super().__init__(d, heads, 1)
        self.mlp = GatedMLP(d, gate)


def _own_block_module():
    """tests/data/own_block.py, imported from its path."""
    from tokensde.real.introspect import load_factory

    make, _ = load_factory(str(DATA / "own_block.py"))
    return make, sys.modules[make.__module__]


def test_torch_written_llama_block_read_as_swiglu():
    """The Llama-style block of tests/data/own_block.py (nn.RMSNorm, causal, SwiGLU without
    biases, the gate registered after the input projection and its init doubled) read into the
    model of its known init: in_proj Xavier 1/(2d), out_proj, up, down torch's Linear
    1/(3 fan_in), the gate 4/(3d)."""
    make, mod = _own_block_module()
    read = read_network(make, mod.inputs(2, 0))
    b = read.blocks[0]
    d, m = mod.D, mod.HIDDEN
    assert (b.norm, b.norm_kind, b.centred, b.causal, b.activation, b.width, b.eps) == (
        "pre", "RMSNorm", False, True, "swiglu", m, 1e-6)
    truth = {"q": 1 / (2 * d), "v": 1 / (2 * d), "o": 1 / (3 * d), "1": 4 / (3 * d),
             "3": 1 / (3 * d), "2": 1 / (3 * m), "b1": 0.0, "b3": 0.0}
    for k, v in truth.items():
        got = read.pooled(k)
        assert abs(got.value - v) <= Z * got.se + 1e-15, (k, got, v)
    r2 = 0.25  # embeddings N(0, 1/4)
    law = BlockLaw(d, mod.HEADS, mod.LAYERS, mod.N, True, "pre", 1 / (2 * d), 1 / (2 * d),
                   1 / (2 * d), 1 / (3 * d), "swiglu", m, 4 / (3 * d), 1 / (3 * m), 1e-6, r2,
                   var_3=1 / (3 * d))
    hand = to_model(law)
    assert hand.params.mlp.startswith("swiglu(q=") and hand.params.mlp_width == 2 * m
    _same_params(read, hand, r2)
    swapped = replace(law, var_1=law.var_3, var_3=law.var_1)  # gate and input read the other way
    assert abs(map_read(read, r2).params.mlp_sigma - to_model(swapped).params.mlp_sigma) > (
        Z * params_errors(read, r2)["mlp_sigma"])


class MLPBlock(nn.Module):
    """A residual MLP block without attention."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block."""
        return x + self.fc(self.ln(x))


class LayerScaled(PreBlock):
    """The pre-LN block with a per-channel scale (LayerScale) on the attention branch."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__(d, heads, 1)
        self.gamma = nn.Parameter(torch.linspace(0.1, 1.0, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block."""
        u = self.ln1(x)
        x = x + self.gamma * self.attn(u, u, u, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class BatchNormed(PreBlock):
    """The pre-LN block with a BatchNorm in the MLP."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__(d, heads, 1)
        self.bn = nn.BatchNorm1d(N)


class OddMask(PreBlock):
    """The pre-LN block called with a mask that is not the causal one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block."""
        mask = torch.eye(x.shape[1], dtype=torch.bool).roll(1, 0)
        u = self.ln1(x)
        x = x + self.attn(u, u, u, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class CrossAttends(PreBlock):
    """The pre-LN block whose attention reads its keys and values from the raw stream."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block."""
        u = self.ln1(x)
        x = x + self.attn(u, x, x, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class LinearAttention(nn.Module):
    """A softmax-free attention written by hand: `(q k^T / n) v`, then an output projection."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """The attention on `(batch, n, d)`."""
        return self.o(self.q(u) @ self.k(u).transpose(-1, -2) @ self.v(u) / u.shape[-2])


class LinearAttended(PreBlock):
    """The pre-LN block with an attention class that is not read."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__(d, heads, 1)
        self.attn = LinearAttention(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block."""
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class SequenceFirst(PreBlock):
    """The causal pre-LN block on `(n, batch, d)` tokens (batch_first False)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__(d, heads, 1)
        self.attn = nn.MultiheadAttention(d, heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block on `(n, batch, d)`."""
        n = x.shape[0]
        u = self.ln1(x)
        mask = torch.full((n, n), float("-inf")).triu(1)
        x = x + self.attn(u, u, u, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class SequenceFirstNet(Net):
    """Net whose blocks read `(n, batch, d)`."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids -> the last block's output `(n, batch, d)`."""
        h = (self.embed(ids) + self.pos(torch.arange(ids.shape[1]))).transpose(0, 1)
        for b in self.layers:
            h = b(h)
        return h


def test_sequence_first_blocks_read_with_their_token_axis():
    read = read_network(lambda s: SequenceFirstNet([SequenceFirst(D, HEADS) for _ in range(2)]),
                        _ids(3), seeds=(0,))
    assert (read.tokens, read.blocks[0].causal) == (N, True)  # n, not the batch of 3
    net = draw(lambda s: SequenceFirstNet([SequenceFirst(D, HEADS) for _ in range(2)]), 0)
    h = block_states(net, find_blocks(net), _ids(3))
    assert h.shape == (3, 3, N, D)
    assert torch.equal(h[:, 0], net.embed(_ids(3)) + net.pos(torch.arange(N)))


class DepthInit(PreBlock):
    """The pre-LN block whose value weights grow with the block index."""

    count = 0

    def __init__(self, d: int, heads: int) -> None:
        super().__init__(d, heads, 1)
        with torch.no_grad():
            self.attn.in_proj_weight[2 * d:].mul_(1 + DepthInit.count)
        DepthInit.count += 1


def _depth_net(s: int) -> Net:
    DepthInit.count = 0
    return Net([DepthInit(D, HEADS) for _ in range(L)])


@pytest.mark.parametrize(("make", "blocks", "message"), [
    (lambda s: Net([GatedBlock(D, HEADS) for _ in range(2)]), None,
     r"block 0 \(GatedBlock\): biases of a gated MLP's gate or input projection"),
    (lambda s: Net([GatedBlock(D, HEADS, gate=nn.functional.gelu) for _ in range(2)]), None,
     r"block 0 \(GatedBlock\): the gated MLP is not silu\(gate\) \* input"),
    (lambda s: Net([MLPBlock(D) for _ in range(2)]), "layers",
     r"block 0 \(MLPBlock\): no attention module found"),
    (lambda s: Net([MLPBlock(D) for _ in range(2)]), None, "Net: no residual blocks found"),
    (lambda s: Net([PreBlock(D, HEADS, 1, act=nn.SiLU) for _ in range(2)]), None,
     r"block 0 \(PreBlock\): the MLP's activation is none of relu, gelu"),
    (lambda s: Net([LayerScaled(D, HEADS) for _ in range(2)]), None,
     r"block 0 \(LayerScaled\): attention branch: the residual add is not input \+ a multiple"),
    (lambda s: Net([BatchNormed(D, HEADS) for _ in range(2)]), None,
     r"block 0 \(BatchNormed\): module 'bn' \(BatchNorm1d\) holds parameters that are not read"),
    (lambda s: Net([OddMask(D, HEADS, 1) for _ in range(2)]), None,
     r"block 0 \(OddMask\): an attention mask other than the causal one"),
    (lambda s: Net([CrossAttends(D, HEADS, 1) for _ in range(2)]), None,
     r"block 0 \(CrossAttends\): the attention's keys or values are not its queries"),
    (lambda s: Net([LinearAttended(D, HEADS) for _ in range(2)]), None,
     r"block 0 \(LinearAttended\): attention module LinearAttention is not read yet"),
], ids=["gated-biases", "gelu-gated", "no-attention", "no-blocks", "silu", "layer-scale",
        "batchnorm", "mask", "cross", "attention-class"])
def test_unread_blocks_refused_by_name(make, blocks, message):
    with pytest.raises(IntrospectionError, match=message):
        read = read_network(make, _ids(), seeds=(0,), blocks=blocks)
        to_law(read)


class Copied(nn.Module):
    """torch's nn.TransformerEncoder: one layer deep-copied L times, behind an embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, D)
        layer = nn.TransformerEncoderLayer(D, HEADS, 2 * D, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids -> the encoder's output."""
        return self.encoder(self.embed(ids))


def test_copied_layers_refused():
    with pytest.raises(IntrospectionError, match=r"block 1 \(TransformerEncoderLayer\): starts "
                       "with the value weights of block 0"):
        read_network(lambda s: Copied(), _ids(), seeds=(0,))


class Reversed(PreBlock):
    """The pre-LN block with its MLP's layers registered output layer first."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__(d, heads, 1)
        self.mlp = None
        self.fc2, self.fc1 = nn.Linear(3 * d, d), nn.Linear(d, 3 * d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block."""
        u = self.ln1(x)
        x = x + self.attn(u, u, u, need_weights=False)[0]
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def test_mlp_layers_ordered_by_shape():
    read = read_network(lambda s: Net([Reversed(D, HEADS) for _ in range(2)]), _ids(), seeds=(0,))
    b = read.blocks[0]
    assert (b.width, b.activation, b.residual_scale) == (3 * D, "gelu", (1.0, 1.0))
    assert b.moments["2"].value == pytest.approx(1 / (9 * D), rel=0.1)  # fc2: 1/(3 fan_in)


def test_blocks_with_different_laws_refused():
    read = read_network(_depth_net, _ids(), seeds=(0,))  # reading works; one law for all does not
    assert read.blocks[3].moments["v"].value == pytest.approx(16 * read.blocks[0].moments["v"].value,
                                                             rel=0.15)
    with pytest.raises(IntrospectionError, match=r"block \d \(DepthInit\): entry variance of v"):
        to_law(read)


needs_tf = pytest.mark.skipif(not has_transformers(), reason="needs the [real] extra")


@pytest.fixture
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.mark.slow
@needs_tf
def test_gpt2_read_as_the_hand_mapping(_offline):
    spec = RealSpec(arch="gpt2", layers=L, width=D, heads=HEADS, ctx=N, vocab=50)
    read = read_network(lambda s: build(spec, s).model, make_inputs(spec, 2, 0))
    b = read.blocks[0]
    assert (b.cls, b.norm, b.causal, b.activation) == ("GPT2Block", "pre", True, "gelu-tanh")
    hand = _map_gpt2(build(spec, 0))
    _same_params(read, hand, hand.radius2)


@pytest.mark.slow
@needs_tf
def test_llama_read_as_the_hand_mapping(_offline):
    """HuggingFace's LlamaModel (LlamaDecoderLayer: LlamaAttention with rotary embeddings,
    LlamaRMSNorm, the SwiGLU LlamaMLP) read into map_llama's ModelParams; RoPE noted, not
    modelled."""
    spec = RealSpec(arch="llama", layers=2, width=32, heads=2, ctx=N, vocab=50)
    read = read_network(lambda s: build(spec, s).model, make_inputs(spec, 2, 0))
    b = read.blocks[0]
    assert (b.cls, b.attention, b.norm, b.norm_kind, b.causal, b.activation, b.width) == (
        "LlamaDecoderLayer", "LlamaAttention", "pre", "LlamaRMSNorm", True, "swiglu", 4 * 32)
    hand = _map_llama(build(spec, 0))
    _same_params(read, hand, hand.radius2)
    assert "rotary position embeddings not modelled" in to_law(read, hand.radius2).notes


@pytest.mark.slow
@needs_tf
def test_bert_read_as_the_hand_mapping(_offline):
    """HuggingFace's BertModel: BertLayer post-LN, BertSelfAttention's query/key/value with the
    output projection of BertSelfOutput beside it, a LayerNorm after each residual add inside
    BertSelfOutput and BertOutput, the exact-GELU MLP; read into map_bert's ModelParams (d - 1:
    centred post-LN)."""
    spec = RealSpec(arch="bert", layers=L, width=D, heads=HEADS, ctx=N, vocab=50)
    read = read_network(lambda s: build(spec, s).model, make_inputs(spec, 2, 0))
    b = read.blocks[0]
    assert (b.cls, b.attention, b.norm, b.norm_kind, b.centred, b.causal, b.activation, b.width,
            b.eps, b.residual_scale) == ("BertLayer", "BertSelfAttention", "post", "LayerNorm",
                                         True, False, "gelu", 4 * D, 1e-12, (1.0, 1.0))
    assert read.pooled("o").value == pytest.approx(0.02 ** 2, rel=0.05)  # BertSelfOutput.dense
    assert read.pooled("bo").value == read.pooled("b2").value == 0.0
    hand = _map_bert(build(spec, 0))
    assert map_read(read).params.d == D - 1
    assert read.centred_input and set(to_law(read).notes) == set(hand.law.notes)  # embedding LN
    _same_params(read, hand, hand.radius2)
    ids, pad = make_inputs(spec, 2, 0), torch.ones(2, N, dtype=torch.long)
    pad[1, -2:] = 0  # the second input's last two tokens padded: masked off from the others
    with pytest.raises(IntrospectionError, match=r"block 0 \(BertLayer\): an attention mask "
                       r"\(padding\) is not read"):
        read_network(lambda s: build(spec, s).model,
                     lambda m: m(input_ids=ids, attention_mask=pad), seeds=(0,))


@pytest.mark.slow
@needs_tf
def test_vit_read_as_the_hand_mapping(_offline):
    """HuggingFace's ViTModel: ViTLayer pre-LN (layernorm_before, layernorm_after, the residual
    adds in the layer), ViTAttention's four projections, the exact-GELU ViTMLP; read into
    map_vit's ModelParams at the measured r0^2 of the patch embeddings."""
    spec = RealSpec(arch="vit", layers=L, width=D, heads=HEADS, vocab=50)
    x = make_inputs(spec, 2, 0, _images())
    read = read_network(lambda s: build(spec, s).model, x)
    b = read.blocks[0]
    assert (b.cls, b.norm, b.norm_kind, b.centred, b.causal, b.activation, b.width, b.eps) == (
        "ViTLayer", "pre", "LayerNorm", True, False, "gelu", 4 * D, 1e-12)
    assert read.tokens == spec.tokens
    net = build(spec, 0)
    radius2 = float((hidden_states(net, x)[:, 0] ** 2).mean())
    _same_params(read, _map_vit(net, radius2), radius2)


def _images(count: int = 16) -> torch.Tensor:
    """`count` uniform random images `(count, 1, 28, 28)` (ViT reads any)."""
    return torch.rand(count, 1, 28, 28, generator=torch.Generator().manual_seed(0))


@pytest.mark.slow
@needs_tf
def test_unread_attention_class_refused_by_name(_offline):
    """DistilBERT's block holds DistilBertSelfAttention, which is not read: refused by name."""
    import transformers as tf

    cfg = tf.DistilBertConfig(vocab_size=50, max_position_embeddings=N, n_layers=2, n_heads=2,
                              dim=32, hidden_dim=64, dropout=0.0, attention_dropout=0.0)
    with pytest.raises(IntrospectionError, match=r"block 0 \(TransformerBlock\): attention module "
                       "DistilBertSelfAttention is not read yet"):
        read_network(lambda s: tf.DistilBertModel(cfg), _ids(), seeds=(0,))


_NOMINAL = ("var_q", "var_k", "var_v", "var_o", "var_1", "var_2", "var_b1", "var_b2", "var_3",
            "radius2")  # what the hand mapping takes from the init's nominal law, introspection measures
_PRED_SE = 0.5  # the prediction from the read variances stays within this many of the hand
# prediction's standard errors at every layer and statistic (measured: at most 0.11)


def _families() -> list:
    slow = [pytest.mark.slow, needs_tf]
    return [pytest.param("torch-encoder", id="torch-encoder"),
            *(pytest.param(a, id=a, marks=slow) for a in ("gpt2", "bert", "vit", "llama"))]


@pytest.mark.parametrize("arch", _families())
def test_family_predicted_the_same_through_introspection(arch, _offline):
    """`run_own` on a family's own network (its `build(spec, seed).model`) against `run_real`
    (the hand mapping), same seed, 6 inits x 2 inputs: the real side identical; the read law with
    the nominal variances and r0^2 put back maps to the hand mapping's ModelParams exactly (so
    its prediction is the hand prediction); with the measured ones, every predicted statistic at
    every layer within PRED_SE standard errors of the hand prediction."""
    images = _images() if arch == "vit" else None
    sizes = {"ctx": N} if arch != "vit" else {}
    spec = RealSpec(arch=arch, layers=3, width=32, heads=2, vocab=50, **sizes)
    hand = run_real(spec, inits=6, inputs=2, seed=0, sde=False, images=images)
    own = run_own(lambda s: build(spec, s).model, lambda b, s: make_inputs(spec, b, s, images),
                  inits=6, seed=0, depth_scaled=hand.mapping.has_limit, sde=False)
    h, o = hand.table, own.table
    assert h[h.side == "real"].reset_index(drop=True).equals(o[o.side == "real"].reset_index(drop=True))
    assert torch.equal(own.embeddings, hand.embeddings)
    law = hand.mapping.law
    nominal = replace(own.mapping.law, **{f: getattr(law, f) for f in _NOMINAL})
    assert to_model(nominal, qk=spec.qk).params == hand.mapping.params
    assert nominal.model_d == law.model_d  # the start: predict.initial_state reads it
    hn = h[h.side == "network"].set_index(["stat", "layer"])
    on = o[o.side == "network"].set_index(["stat", "layer"]).loc[hn.index]
    assert sorted(set(hn.index.get_level_values("layer"))) == list(range(spec.layers + 1))
    gap = (on["mean"] - hn["mean"]).abs() - _PRED_SE * hn["se"]
    assert (gap <= 1e-12).all(), gap[gap > 1e-12]


class SmallNet(Net):
    """Net with embeddings N(0, 0.1^2) each (the branches then move the tokens visibly)."""

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__(blocks)
        nn.init.normal_(self.embed.weight, 0.0, 0.1)
        nn.init.normal_(self.pos.weight, 0.0, 0.1)


def _inputs(batch: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 50, (batch, N), generator=torch.Generator().manual_seed(seed))


@pytest.mark.slow
def test_hand_written_network_predicted_and_its_residual_scale_needed():
    """The read network agrees with its prediction; read without its residual scale it does not."""
    def make(s: int) -> nn.Module:
        return SmallNet([PreBlock(D, HEADS, L) for _ in range(L)])

    run = run_own(make, _inputs, inits=150, seed=0)
    assert run.agreement["agrees"], run.agreement
    read = read_network(make, _inputs(2, 0))
    unscaled = replace(read, blocks=tuple(replace(b, residual_scale=(1.0, 1.0)) for b in read.blocks))
    m = map_read(unscaled, run.meta["radius2"])
    _, pred = predict(m, run.embeddings, 3)
    table = pd.concat([run.table[run.table.side == "real"], summarise(pred).assign(side="network")])
    wrong = agreement(table)
    assert not wrong["agrees"] and wrong["max_abs_z"] > 2 * wrong["threshold"], wrong


@pytest.mark.slow
def test_torch_written_llama_network_predicted_and_its_gated_mlp_needed():
    """The network of tests/data/own_block.py at 200 inits agrees with the prediction of its read
    SwiGLU model; the same real runs predicted with a GELU MLP of the same variances, or
    without the MLP, do not."""
    make, mod = _own_block_module()
    run = run_own(make, mod.inputs, inits=200, seed=0)
    assert run.agreement["agrees"], run.agreement
    law = run.mapping.law
    for wrong in (replace(law, activation="gelu"), replace(law, activation="none")):
        _, pred = predict(to_model(wrong), run.embeddings, 3)
        table = pd.concat([run.table[run.table.side == "real"],
                           summarise(pred).assign(side="network")])
        a = agreement(table)
        assert not a["agrees"] and a["max_abs_z"] > 2 * a["threshold"], (wrong.activation, a)
