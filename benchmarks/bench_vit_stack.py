"""Stacked against one-at-a-time ViT training: seconds per model-step, side by side, one process.

    python benchmarks/bench_vit_stack.py --models 4 --steps 5 [--device cuda] [--depth 24]

Trains `--models` attention-only ViTs (Fashion-MNIST shape, D = 64, batch 128; random images, so no
data set is needed) for `--steps` optimiser steps two ways, interleaved over `--rounds`: one model
at a time (`train.train_epoch`'s loop: ViT + torch.optim.AdamW) and all at once
(`stack.StackedViT`). Prints seconds per model-step of each and their ratio (the speed-up of
stacking). On the GPU the ratio is what makes the fair sweep fit; on a CPU it is near 1.
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F  # noqa: N812

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import banner, check_common, parser

from tokensde.vit import TrainConfig, ViTConfig, make_model
from tokensde.vit.stack import LAYOUT_WARNING, Member, StackedViT
from tokensde.vit.train import make_optimizer


def one_at_a_time(cfg: ViTConfig, models: int, steps: int, x: torch.Tensor, y: torch.Tensor,
                  device: str) -> float:
    """Seconds for `steps` steps of each of `models` models trained one after the other."""
    t0 = time.perf_counter()
    for s in range(models):
        model = make_model(cfg, "default", s).to(device)
        opt = make_optimizer(model, TrainConfig(lr=2e-3, seed=s))
        for _ in range(steps):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        float(loss.detach())
    return time.perf_counter() - t0


def stacked(cfg: ViTConfig, models: int, steps: int, x: torch.Tensor, y: torch.Tensor,
            device: str) -> float:
    """Seconds for `steps` steps of `models` models trained as one stack."""
    t0 = time.perf_counter()
    stack = StackedViT(cfg, [Member("default", s, 2e-3) for s in range(models)], device)
    xs, ys = x.expand(models, *x.shape), y.repeat(models)
    for _ in range(steps):
        logits = stack.forward(xs)
        loss = F.cross_entropy(logits.reshape(-1, 10), ys, label_smoothing=0.1,
                               reduction="sum") / len(y)
        stack.grad.zero_()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=LAYOUT_WARNING)
            loss.backward()
        stack.adamw_step(1.0, 0.05)
    float(loss.detach())
    return time.perf_counter() - t0


def main() -> None:
    ap = parser(__doc__, "2 models, 2 steps, depth 4", runs=None, rounds=2)
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--depth", type=int, default=24)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = ap.parse_args()
    check_common(ap, args, ("--models", args.models, 1), ("--steps", args.steps, 1),
                 ("--depth", args.depth, 1))
    if args.quick:
        args.models, args.steps, args.depth, args.rounds = 2, 2, 4, 1
    print(banner(args.threads, f"device {args.device}"))
    cfg = ViTConfig(image_size=28, channels=1, patch=7, dim=64, depth=args.depth, heads=1,
                    norm="rms", residual_scale=True, block="attention-only")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(128, 1, 28, 28, generator=gen).to(args.device)
    y = torch.randint(0, 10, (128,), generator=gen).to(args.device)
    one_at_a_time(cfg, 1, 1, x, y, args.device)  # warm-up: lazy initialisation, CUDA context
    stacked(cfg, 1, 1, x, y, args.device)
    one, stack = [], []
    for _ in range(args.rounds):
        one.append(one_at_a_time(cfg, args.models, args.steps, x, y, args.device))
        stack.append(stacked(cfg, args.models, args.steps, x, y, args.device))
    per = args.models * args.steps
    a, b = min(one) / per, min(stack) / per
    print(f"depth {args.depth}, {args.models} models x {args.steps} steps (best of "
          f"{args.rounds}): one at a time {1e3 * a:.1f} ms per model-step, stacked "
          f"{1e3 * b:.1f} ms; ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
