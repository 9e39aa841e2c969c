"""A network whose forward takes embeddings `(batch, n, d)` and whose file defines no
`inputs`, for `tokensde real module ... --ctx` (tests): two pre-LN blocks of torch's
`nn.TransformerEncoderLayer`, each initialised on its own."""

from __future__ import annotations

from torch import nn

D, HEADS, LAYERS = 16, 2, 2


class Stack(nn.Module):
    """LAYERS pre-LN encoder layers, ReLU MLP of width 2 D."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(D, HEADS, 2 * D, dropout=0.0, batch_first=True,
                                       norm_first=True) for _ in range(LAYERS))

    def forward(self, x):
        """Embeddings `(batch, n, d)` -> the last layer's output."""
        for layer in self.layers:
            x = layer(x)
        return x


def make(seed: int) -> nn.Module:
    """A fresh init."""
    return Stack()


def not_a_module(seed: int) -> int:
    """A factory that returns no network (refused)."""
    return seed
