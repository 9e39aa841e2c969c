"""A small, readable Vision Transformer for the value-noise experiment.

images (batch, C, H, W) -> patches (batch, P, D) -> [class token; patches] + positions
-> `depth` blocks -> norm -> linear head on the class token -> logits (batch, classes).

Two kinds of block:

- "standard" (pre-norm): `x <- x + r Attn(norm(x))`, then `x <- x + r MLP(norm(x))`;
- "attention-only" (spec §2 with M = 0): `x <- N(x + r V A(x) x)`, with `N` the RMS normalisation
  onto the sphere of radius sqrt(D), no MLP and no output projection, so `attn.v` *is* the layer's
  value matrix `V_k`.

`r = 1/sqrt(depth)` with `residual_scale=True` (the diffusion scaling alpha), else 1.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from ..model.params import ParameterError, _check_choice, _check_int

NORMS: tuple[str, ...] = ("layer", "rms")
_BLOCKS: tuple[str, ...] = ("standard", "attention-only")


@dataclass(frozen=True)
class ViTConfig:
    """ViT shape: `n = 1 + (image_size / patch)^2` tokens (class token first) of width `dim`."""

    image_size: int = 28
    channels: int = 1
    patch: int = 7
    dim: int = 64
    depth: int = 6
    heads: int = 4
    mlp_ratio: int = 2
    classes: int = 10
    norm: str = "layer"
    residual_scale: bool = False
    block: str = "standard"

    def __post_init__(self) -> None:
        for name, low in (("image_size", 1), ("channels", 1), ("patch", 1), ("dim", 2),
                          ("depth", 1), ("heads", 1), ("mlp_ratio", 1), ("classes", 2)):
            _check_int(name, getattr(self, name), low)
        _check_choice("norm", self.norm, NORMS)
        _check_choice("block", self.block, _BLOCKS)
        if self.image_size % self.patch:
            raise ParameterError(f"patch must divide image_size = {self.image_size}; "
                                 f"got {self.patch!r}")
        if self.dim % self.heads:
            raise ParameterError(f"heads must divide dim = {self.dim}; got {self.heads!r}")
        if not isinstance(self.residual_scale, bool):
            raise ParameterError("residual_scale must be True or False; "
                                 f"got {self.residual_scale!r}")
        if self.block == "attention-only" and self.mlp_ratio != 2:
            raise ParameterError(f"mlp_ratio applies only with block='standard' (the "
                                 f"attention-only block has no MLP); got mlp_ratio="
                                 f"{self.mlp_ratio} with block='attention-only' (leave it at 2)")

    @property
    def n_tokens(self) -> int:
        """Tokens per image: one class token plus the patches."""
        return 1 + (self.image_size // self.patch) ** 2

    @property
    def branch_scale(self) -> float:
        """Residual-branch factor `r`: 1/sqrt(depth) or 1."""
        return 1.0 / math.sqrt(self.depth) if self.residual_scale else 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViTConfig:
        """Inverse of `to_dict`."""
        return cls(**data)


def _make_norm(kind: str, dim: int) -> nn.Module:
    """LayerNorm or RMSNorm (both with a learned gain) over the last axis."""
    return nn.LayerNorm(dim) if kind == "layer" else nn.RMSNorm(dim, eps=1e-6)


def _sphere_norm(dim: int) -> nn.Module:
    """`z -> z / sqrt(|z|^2 / D)`: tokens onto the sphere of radius sqrt(D) (spec §1), no gain."""
    return nn.RMSNorm(dim, eps=1e-12, elementwise_affine=False)


class _Attention(nn.Module):
    """Multi-head softmax self-attention `y_i = sum_j softmax_j(<q_i, k_j>/sqrt(D_h)) V x_j`.

    `q`, `k`, `v` are bias-free D x D maps; `v.weight` is the value matrix V. With `out_proj` a
    final linear map mixes the heads (standard ViT); without it the output is `V A x` (spec).
    """

    def __init__(self, dim: int, heads: int, out_proj: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.proj: nn.Module = nn.Linear(dim, dim) if out_proj else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, n, D = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:  # (B, n, D) -> (B, heads, n, D/heads)
            return t.view(B, n, self.heads, D // self.heads).transpose(1, 2)

        y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)))
        return self.proj(y.transpose(1, 2).reshape(B, n, D))


class _MLP(nn.Module):
    """Two-layer perceptron `W_2 GELU(W_1 x)` with hidden width `ratio * D`."""

    def __init__(self, dim: int, ratio: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, ratio * dim)
        self.fc2 = nn.Linear(ratio * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm block: `x + r Attn(norm x)`, then `+ r MLP(norm x)`."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.r = cfg.branch_scale
        self.norm1 = _make_norm(cfg.norm, cfg.dim)
        self.attn = _Attention(cfg.dim, cfg.heads)
        self.norm2 = _make_norm(cfg.norm, cfg.dim)
        self.mlp = _MLP(cfg.dim, cfg.mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.r * self.attn(self.norm1(x))
        return x + self.r * self.mlp(self.norm2(x))


class _AttentionOnlyBlock(nn.Module):
    """Spec layer with M = 0: `x <- N(x + r V A(x) x)` on the sphere of radius sqrt(D)."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.r = cfg.branch_scale
        self.attn = _Attention(cfg.dim, cfg.heads, out_proj=False)
        self.norm = _sphere_norm(cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.r * self.attn(x))


class ViT(nn.Module):
    """Patch embedding, class token, learned positions, `depth` blocks, norm, linear head."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        D = cfg.dim
        self.patch_embed = nn.Conv2d(cfg.channels, D, kernel_size=cfg.patch, stride=cfg.patch)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, D))
        self.pos = nn.Parameter(0.02 * torch.randn(1, cfg.n_tokens, D))
        only = cfg.block == "attention-only"
        # Attention-only tokens start on the sphere, as in the spec; standard blocks need nothing.
        self.embed_norm: nn.Module = _sphere_norm(D) if only else nn.Identity()
        self.blocks = nn.ModuleList(
            (_AttentionOnlyBlock if only else Block)(cfg) for _ in range(cfg.depth))
        self.norm = _make_norm(cfg.norm, D)
        self.head = nn.Linear(D, cfg.classes)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Tokens before the first block, `(batch, n, D)`."""
        patches = self.patch_embed(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(images.shape[0], -1, -1)
        return self.embed_norm(torch.cat([cls, patches], dim=1) + self.pos)

    def tokens(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Token states across depth: `[embedding, after block 1, ..., after block L]`."""
        states = [self.embed(images)]
        for block in self.blocks:
            states.append(block(states[-1]))
        return states

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))


def build_vit(cfg: ViTConfig, seed: int) -> ViT:
    """A ViT with PyTorch's default initialisation drawn from `seed` (global RNG left untouched).

    Args:
        cfg: The ViT's shape.
        seed: Seed of the initialisation.

    Returns:
        The ViT.
    """
    seed = _check_int("seed", seed, 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ViT(cfg)
