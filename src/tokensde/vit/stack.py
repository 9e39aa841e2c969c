"""R attention-only ViTs trained at once: stacked weights, one kernel per layer for all R models.

Model r is exactly `make_model(cfg, arm_r, seed_r)`; it trains with its own peak learning rate
`lr_r`, on the data order and augmentation of `derive_seed(seed_r, 1, epoch)` — the same draws as
`train.train_epoch` — with the same AdamW (weight decay on matrices only), warm-up + cosine
schedule and label smoothing. Only the arithmetic is batched: weights live in one flat tensor
`(R, P)` (so the optimiser is a handful of kernels), the forward pass multiplies `(R, B n, D)`
activations by `(R, D, 3D)` weights, and attention runs on `(R B, heads, n, D/heads)`. This is what
makes a sweep of many small models use a GPU well; the numbers agree with one-model training to
float32 rounding (tests/test_vit_fair.py).

Only the `attention-only` block (spec §2) is stacked.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812

from ..model.params import ParameterError, _check_int, _check_real
from ..sim.rng import derive_seed
from .data import ImageData
from .init import make_model
from .model import ViTConfig
from .train import _EPOCH_STREAM, TrainConfig, _draw_augment, _shift_flip, lr_at

_BETAS = (0.9, 0.999)  # torch.optim.AdamW defaults, as train.make_optimizer uses
_EPS = 1e-8
_EVAL_CHUNK = 500
_NO_DECAY = ("pos", "cls_token")

# the gradient views share the flat gradient's storage on purpose (see `StackedViT`)
LAYOUT_WARNING = "grad and param do not obey the gradient layout"


@dataclass(frozen=True)
class Member:
    """One model of a stack: value-matrix arm, seed (weights, data order) and peak rate."""

    arm: str
    seed: int
    lr: float


class StackedViT:
    """R attention-only ViTs with weights in one flat leaf `(R, P)`.

    `params[name]` are leaf views `(R, *shape)` of the flat tensor, and their `.grad` are views of
    one flat gradient, so autograd accumulates into it in place and AdamW updates all parameters
    with a few whole-tensor operations. The q, k, v weights of a block are adjacent, read as one
    `(R, 3D, D)` matrix.
    """

    def __init__(self, cfg: ViTConfig, members: Sequence[Member], device: str = "cpu") -> None:
        if cfg.block != "attention-only":
            raise ParameterError(f"block must be 'attention-only' to stack models; got "
                                 f"{cfg.block!r}")
        if not members:
            raise ParameterError("members must be a non-empty list of (arm, seed, lr)")
        self.cfg, self.members, self.device = cfg, list(members), device
        models = [make_model(cfg, m.arm, m.seed) for m in self.members]
        named = list(models[0].named_parameters())
        self.shapes = {n: tuple(p.shape) for n, p in named}
        self.offsets: dict[str, tuple[int, int]] = {}
        start = 0
        for n, p in named:
            self.offsets[n] = (start, start + p.numel())
            start += p.numel()
        with torch.no_grad():
            flat = torch.stack([torch.cat([p.reshape(-1) for p in m.parameters()])
                                for m in models])
        self.flat = flat.to(device)
        self.grad = torch.zeros_like(self.flat)
        decay = torch.zeros(start, dtype=self.flat.dtype)
        for n, p in named:
            if p.ndim >= 2 and n not in _NO_DECAY:
                a, b = self.offsets[n]
                decay[a:b] = 1.0
        self.decay = decay.to(device)
        self.params: dict[str, torch.Tensor] = {}
        for n in self.shapes:
            self._leaf(n, *self.offsets[n], self.shapes[n])
        for layer in range(cfg.depth):
            q = self.offsets[f"blocks.{layer}.attn.q.weight"]
            v = self.offsets[f"blocks.{layer}.attn.v.weight"]
            if v[1] - q[0] != 3 * cfg.dim * cfg.dim:
                raise RuntimeError("q, k, v weights are not adjacent in the parameter order")
            self._leaf(f"qkv.{layer}", q[0], v[1], (3 * cfg.dim, cfg.dim))
        self.lr = torch.tensor([m.lr for m in self.members], dtype=self.flat.dtype,
                               device=device)[:, None]
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)
        self.steps = 0

    def _leaf(self, name: str, a: int, b: int, shape: tuple[int, ...]) -> None:
        R = len(self.members)
        p = self.flat[:, a:b].view(R, *shape)
        p.requires_grad_(True)
        p.grad = self.grad[:, a:b].view(R, *shape)
        self.params[name] = p

    def __len__(self) -> int:
        return len(self.members)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits `(R, B, classes)` of images `(R, B, C, H, W)` (model r sees `images[r]`)."""
        cfg, p = self.cfg, self.params
        R, B, C, H, _ = images.shape
        k, D, h = cfg.patch, cfg.dim, cfg.heads
        side = H // k
        patches = images.reshape(R, B, C, side, k, side, k).permute(0, 1, 3, 5, 2, 4, 6)
        patches = patches.reshape(R, B * side * side, C * k * k)
        w = p["patch_embed.weight"].reshape(R, D, C * k * k)
        x = torch.baddbmm(p["patch_embed.bias"][:, None, :], patches, w.transpose(1, 2))
        cls = p["cls_token"].expand(R, B, 1, D)
        x = torch.cat([cls, x.view(R, B, side * side, D)], dim=2) + p["pos"][:, None, 0]
        x = F.rms_norm(x, (D,), None, 1e-12)
        n = x.shape[2]
        r = cfg.branch_scale
        for layer in range(cfg.depth):
            qkv = torch.bmm(x.reshape(R, B * n, D), p[f"qkv.{layer}"].transpose(1, 2))
            q, kk, v = (t.reshape(R * B, n, h, D // h).transpose(1, 2)
                        for t in qkv.split(D, dim=-1))
            y = F.scaled_dot_product_attention(q, kk, v).transpose(1, 2).reshape(R, B, n, D)
            x = F.rms_norm(x + r * y, (D,), None, 1e-12)
        z = x[:, :, 0]
        if cfg.norm == "rms":
            z = F.rms_norm(z, (D,), None, 1e-6) * p["norm.weight"][:, None]
        else:
            z = F.layer_norm(z, (D,), None, None, 1e-5) * p["norm.weight"][:, None] \
                + p["norm.bias"][:, None]
        return torch.baddbmm(p["head.bias"][:, None], z, p["head.weight"].transpose(1, 2))

    @torch.no_grad()
    def adamw_step(self, factor: float, weight_decay: float) -> None:
        """One AdamW step of every model at rate `factor * lr_r` (torch.optim.AdamW's update)."""
        self.steps += 1
        b1, b2 = _BETAS
        lr = self.lr * factor
        g = self.grad
        self.flat.mul_(1.0 - lr * weight_decay * self.decay)
        self.exp_avg.lerp_(g, 1.0 - b1)
        self.exp_avg_sq.mul_(b2).addcmul_(g, g, value=1.0 - b2)
        bc1, bc2 = 1.0 - b1 ** self.steps, 1.0 - b2 ** self.steps
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(bc2)).add_(_EPS)
        self.flat.sub_((lr / bc1) * self.exp_avg / denom)

    @torch.no_grad()
    def accuracy(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Accuracy `(R,)` of every model on the same images `x (N, C, H, W)`, labels `y (N,)`."""
        R = len(self)
        correct = torch.zeros(R, device=self.device)
        for i in range(0, len(y), _EVAL_CHUNK):
            xb = x[i:i + _EVAL_CHUNK].to(self.device)
            yb = y[i:i + _EVAL_CHUNK].to(self.device)
            logits = self.forward(xb.expand(R, *xb.shape))
            correct += (logits.argmax(-1) == yb).sum(-1)
        return correct.cpu() / len(y)

    def state(self) -> dict[str, torch.Tensor]:
        """Weights and optimiser moments (CPU copies) and the step count."""
        return {"flat": self.flat.cpu(), "exp_avg": self.exp_avg.cpu(),
                "exp_avg_sq": self.exp_avg_sq.cpu(), "steps": torch.tensor(self.steps)}


def _check_members(members: Sequence[Member]) -> list[Member]:
    """Members with checked seeds and rates."""
    return [Member(m.arm, _check_int("seed", m.seed, 0), _check_real("lr", m.lr, 0.0, strict=True))
            for m in members]


_OnEpoch = Callable[[StackedViT, int], None]


def _train_stack(data: ImageData, cfg: ViTConfig, members: Sequence[Member], train: TrainConfig,
                device: str = "cpu", on_epoch: _OnEpoch | None = None
                ) -> tuple[StackedViT, dict[str, list]]:
    """Train every member for `train.epochs` epochs (TrainConfig's batch, warm-up, weight decay,
    smoothing and augmentation; its `lr` and `seed` are the members'). Returns the trained stack
    and, per member, the validation accuracy after each epoch (`val`, needs `data.x_val`) and
    the last epoch's mean training loss (`train_loss`). `on_epoch(stack, epoch)` runs after each
    epoch's validation (the caller's test evaluation goes there).

    The test images are never read here: a choice made from `val` cannot depend on them.
    """
    members = _check_members(members)
    if data.x_val is None or data.y_val is None:
        raise ParameterError("data must have a validation split (load it with val_subset)")
    stack = StackedViT(cfg, members, device)
    R, N, batch = len(members), len(data.y_train), train.batch_size
    per_epoch = math.ceil(N / batch)
    total = per_epoch * train.epochs
    x_all, y_all = data.x_train.to(device), data.y_train.to(device)
    val: list[list[float]] = [[] for _ in range(R)]
    loss_sum = torch.zeros(R, device=device)
    for epoch in range(train.epochs):
        gens = [torch.Generator().manual_seed(derive_seed(m.seed, _EPOCH_STREAM, epoch))
                for m in members]
        orders = torch.stack([torch.randperm(N, generator=g) for g in gens])
        loss_sum.zero_()
        for k in range(per_epoch):
            idx = orders[:, k * batch:(k + 1) * batch]
            B = idx.shape[1]
            flat_idx = idx.reshape(-1).to(device)
            x = x_all[flat_idx]
            if train.augment:
                draws = [_draw_augment(B, data.shift, data.flip, g) for g in gens]
                offsets = None if draws[0][0] is None else torch.cat(
                    [d[0] for d in draws if d[0] is not None], dim=1)
                mask = None if draws[0][1] is None else torch.cat(
                    [d[1] for d in draws if d[1] is not None])
                x = _shift_flip(x, offsets, mask, data.shift)
            y = y_all[flat_idx]
            logits = stack.forward(x.view(R, B, *x.shape[1:]))
            per = F.cross_entropy(logits.reshape(R * B, -1), y, reduction="none",
                                  label_smoothing=train.label_smoothing).view(R, B).sum(1) / B
            stack.grad.zero_()
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=LAYOUT_WARNING)
                per.sum().backward()
            stack.adamw_step(lr_at(epoch * per_epoch + k, total, train.warmup, 1.0),
                             train.weight_decay)
            loss_sum += per.detach() * B
        acc = stack.accuracy(data.x_val, data.y_val)
        for r in range(R):
            val[r].append(float(acc[r]))
        if on_epoch is not None:
            on_epoch(stack, epoch)
    return stack, {"val": val, "train_loss": (loss_sum / N).cpu().tolist()}
