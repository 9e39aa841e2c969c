"""A Llama-style decoder written in plain torch, for `tokensde real module` (tests): pre-norm
`nn.RMSNorm`, causal self-attention without biases, the gated MLP `down(silu(gate u) * up u)`
without biases, token embeddings N(0, 1/4), no position embedding. `make(seed)` builds it,
`inputs(batch, seed)` draws its token ids."""

from __future__ import annotations

import torch
from torch import nn

D, HEADS, LAYERS, N, VOCAB, HIDDEN = 32, 2, 3, 8, 50, 64


class Block(nn.Module):
    """x + attn(RMS(x)) under the causal mask, then h + down(silu(gate v) * up v), v = RMS(h)."""

    def __init__(self) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.RMSNorm(D, eps=1e-6), nn.RMSNorm(D, eps=1e-6)
        self.attn = nn.MultiheadAttention(D, HEADS, bias=False, batch_first=True)
        self.up = nn.Linear(D, HIDDEN, bias=False)  # registered before the gate: read by the probe
        self.gate = nn.Linear(D, HIDDEN, bias=False)
        self.down = nn.Linear(HIDDEN, D, bias=False)
        with torch.no_grad():
            self.gate.weight.mul_(2.0)  # the gate's variance differs from the input's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block on `(batch, n, d)`."""
        n = x.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        u = self.attn_norm(x)
        x = x + self.attn(u, u, u, attn_mask=mask, need_weights=False)[0]
        v = self.mlp_norm(x)
        return x + self.down(nn.functional.silu(self.gate(v)) * self.up(v))


class Decoder(nn.Module):
    """Token embedding, then LAYERS blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        nn.init.normal_(self.embed.weight, 0.0, 0.5)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids `(batch, n)` -> the last block's output."""
        h = self.embed(ids)
        for b in self.blocks:
            h = b(h)
        return h


def make(seed: int) -> nn.Module:
    """A fresh init (the caller seeds torch's generator with `seed`)."""
    return Decoder()


def inputs(batch: int, seed: int) -> torch.Tensor:
    """`batch` sequences of N token ids, drawn under `seed`."""
    return torch.randint(0, VOCAB, (batch, N), generator=torch.Generator().manual_seed(seed))
