"""Train one ViT arm on one seed: AdamW, warm-up + cosine decay, label smoothing, augmentation.

A run lives in its own directory: `checkpoint.pt` (model, optimiser, history) written atomically at
the end of every epoch, `log.jsonl` (one line per finished epoch, rewritten from the checkpoint's
history, so it never disagrees with it) and `result.json` once the run is complete. Starting a run
whose directory holds a checkpoint of the same run resumes after its last finished epoch; the data
order and augmentation of epoch `e` come from `derive_seed(seed, 1, e)`, so a resumed run repeats
exactly what an uninterrupted one would have done.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

from ..io.store import StoreError, _check_meta, atomic_write, header
from ..model.params import ParameterError, _check_int, _check_real
from ..sim.loop import _Progress
from ..sim.rng import derive_seed
from .data import ImageData
from .init import Arm, make_model
from .model import ViT, ViTConfig

__all__ = ["TrainConfig", "lr_at", "make_optimizer", "train_epoch", "train_run"]

_KIND_CHECKPOINT = "tokensde.vit.checkpoint"
_KIND_RUN = "tokensde.vit.run"
CHECKPOINT, LOG, RESULT = "checkpoint.pt", "log.jsonl", "result.json"
_EPOCH_STREAM = 1  # child-seed key of an epoch's data order and augmentation
_EVAL_BATCH = 1000



@dataclass(frozen=True)
class TrainConfig:
    """Optimisation of one run. `warmup` is the fraction of all steps with a linear warm-up."""

    epochs: int = 5
    batch_size: int = 128
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup: float = 0.1
    label_smoothing: float = 0.1
    augment: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        _check_int("epochs", self.epochs, 1)
        _check_int("batch_size", self.batch_size, 1)
        _check_int("seed", self.seed, 0)
        _check_real("lr", self.lr, 0.0, strict=True)
        _check_real("weight_decay", self.weight_decay, 0.0)
        for name in ("warmup", "label_smoothing"):
            if not 0.0 <= _check_real(name, getattr(self, name)) < 1.0:
                raise ParameterError(f"{name} must be in [0, 1); got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


def lr_at(step: int, total: int, warmup: float, base: float) -> float:
    """Learning rate at `step` (0-based): `base (step+1)/w` for step < w = ceil(warmup total),
    then `base (1 + cos(pi (step - w) / (total - w))) / 2`.

    Args:
        step: The optimiser step, 0-based.
        total: Steps of the whole run.
        warmup: Fraction of `total` with the linear warm-up.
        base: Peak learning rate.

    Returns:
        The learning rate.
    """
    w = math.ceil(warmup * total)
    if step < w:
        return base * (step + 1) / w
    return base * 0.5 * (1.0 + math.cos(math.pi * (step - w) / max(1, total - w)))


def _draw_augment(batch: int, shift: int, flip: bool, gen: torch.Generator
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The random part of `augment` for `batch` images: offsets `(2, batch)` in [0, 2 shift]
    (None without shift) and the flip mask `(batch,)` (None without flip), drawn in this order."""
    offsets = torch.randint(0, 2 * shift + 1, (2, batch), generator=gen) if shift > 0 else None
    mask = torch.rand(batch, generator=gen) < 0.5 if flip else None
    return offsets, mask


def _shift_flip(x: torch.Tensor, offsets: torch.Tensor | None, mask: torch.Tensor | None,
               shift: int) -> torch.Tensor:
    """Images `(B, C, H, W)` shifted by `offsets - shift` pixels (zero fill), then flipped where
    `mask`; `offsets`, `mask` from `draw_augment` (any device)."""
    B, C, H, W = x.shape
    if offsets is not None:
        dev = x.device
        dy, dx = offsets.to(dev)
        padded = F.pad(x, (shift, shift, shift, shift))
        rows = (dy[:, None] + torch.arange(H, device=dev))[:, None, :, None]
        cols = (dx[:, None] + torch.arange(W, device=dev))[:, None, None, :]
        batch = torch.arange(B, device=dev)[:, None, None, None]
        channel = torch.arange(C, device=dev)[None, :, None, None]
        x = padded[batch, channel, rows, cols]
    if mask is not None:
        x = torch.where(mask.to(x.device)[:, None, None, None], x.flip(-1), x)
    return x


def _augment(x: torch.Tensor, shift: int, flip: bool, gen: torch.Generator) -> torch.Tensor:
    """Shift each image `(B, C, H, W)` by up to `shift` pixels (zero fill), flip half if `flip`."""
    return _shift_flip(x, *_draw_augment(len(x), shift, flip, gen), shift)


@torch.no_grad()
def _evaluate(model: ViT, x: torch.Tensor, y: torch.Tensor, device: str = "cpu"
             ) -> dict[str, float]:
    """Mean cross-entropy (no smoothing) and accuracy of `model` (on `device`) on images `x`,
    labels `y`."""
    model.eval()
    loss, correct = 0.0, 0
    for i in range(0, len(y), _EVAL_BATCH):
        xb, yb = x[i:i + _EVAL_BATCH].to(device), y[i:i + _EVAL_BATCH].to(device)
        logits = model(xb)
        loss += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += int((logits.argmax(-1) == yb).sum())
    return {"loss": loss / len(y), "acc": correct / len(y)}


def make_optimizer(model: ViT, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW at rate `cfg.lr`, weight decay `cfg.weight_decay` on the matrices only.

    Norms, biases, the class token and the positions are not decayed.

    Args:
        model: The ViT whose parameters are optimised.
        cfg: The training configuration (peak rate, weight decay).

    Returns:
        The optimiser.
    """
    decay: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and name not in ("pos", "cls_token") else rest).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr)


def _steps_per_epoch(data: ImageData, cfg: TrainConfig) -> int:
    """Optimiser steps in one epoch (the last batch may be short)."""
    return math.ceil(len(data.y_train) / cfg.batch_size)


def train_epoch(model: ViT, opt: torch.optim.Optimizer, data: ImageData, cfg: TrainConfig,
                epoch: int, progress: _Progress | None = None, device: str = "cpu"
                ) -> dict[str, float]:
    """One pass over the training images in the order of `derive_seed(seed, 1, epoch)`; batches
    are drawn and augmented on the CPU, then moved to `device` (where `model` is)."""
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, _EPOCH_STREAM, epoch))
    per_epoch = _steps_per_epoch(data, cfg)
    total = per_epoch * cfg.epochs
    order = torch.randperm(len(data.y_train), generator=gen)
    model.train()
    loss_sum, correct, lr = 0.0, 0, cfg.lr
    for k in range(per_epoch):
        idx = order[k * cfg.batch_size:(k + 1) * cfg.batch_size]
        x, y = data.x_train[idx], data.y_train[idx]
        if cfg.augment:
            x = _augment(x, data.shift, data.flip, gen)
        x, y = x.to(device), y.to(device)
        lr = lr_at(epoch * per_epoch + k, total, cfg.warmup, cfg.lr)
        for group in opt.param_groups:
            group["lr"] = lr
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=cfg.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_sum += loss.item() * len(y)
        correct += int((logits.argmax(-1) == y).sum())
        if progress is not None:
            progress(1)
    n = len(data.y_train)
    return {"train_loss": loss_sum / n, "train_acc": correct / n, "lr": lr}


def _run_spec(data: ImageData, model_cfg: ViTConfig, train_cfg: TrainConfig,
             arm: Arm) -> dict[str, Any]:
    """Everything that defines a run (a checkpoint resumes only the same run)."""
    return {"arm": arm.name, "model": model_cfg.to_dict(), "train": train_cfg.to_dict(),
            "data": data.info}


def _save_state(state: dict[str, Any], tmp: Path) -> None:
    torch.save(state, tmp)


def _write_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=1) + "\n"))


def _write_log(path: Path, history: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(rec) + "\n" for rec in history)
    atomic_write(path, lambda tmp: tmp.write_text(text))


def _check_same_run(found: dict[str, Any], spec: dict[str, Any], path: Path) -> None:
    """Raise ParameterError if the run stored in `path` (`found`) is not the run `spec`."""
    want = json.loads(json.dumps(spec))
    if found != want:
        keys = sorted(k for k in want if found.get(k) != want[k])
        raise ParameterError(f"{path} belongs to a different run (differs in {', '.join(keys)}); "
                             "use another output directory or delete it")


def _load_checkpoint(path: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Read a checkpoint and check it belongs to the run `spec`."""
    try:
        state = torch.load(path, weights_only=True)
    except Exception as err:  # torch raises several types for a damaged file
        raise StoreError(f"{path} is not a readable checkpoint ({err}); delete it to start over"
                         ) from err
    meta = _check_meta(state.get("meta") if isinstance(state, dict) else None, _KIND_CHECKPOINT,
                      str(path))
    _check_same_run(meta["run"], spec, path)
    return state


def train_run(data: ImageData, model_cfg: ViTConfig, train_cfg: TrainConfig,
              arm: Arm | str, run_dir: str | Path, threads: int = 1,
              progress: _Progress | None = None) -> dict[str, Any]:
    """Train (or resume, or just read back) one run; return its result with the epoch history.

    Args:
        data: The images.
        model_cfg: The ViT's shape.
        train_cfg: The optimisation, with the run's seed.
        arm: The value-initialisation arm (or its name).
        run_dir: The run's directory (checkpoints, log, result).
        threads: torch threads.
        progress: Called with the number of optimiser steps done, or None.

    Returns:
        The run's result: final test accuracy, per-epoch history and the settings.
    """
    arm = arm if isinstance(arm, Arm) else Arm.parse(arm)
    torch.set_num_threads(_check_int("threads", threads, 1))
    run_dir = Path(run_dir)
    spec = _run_spec(data, model_cfg, train_cfg, arm)
    result_path, ckpt_path = run_dir / RESULT, run_dir / CHECKPOINT
    if result_path.is_file():
        result = _check_meta(json.loads(result_path.read_text()), _KIND_RUN, str(result_path))
        _check_same_run(result["run"], spec, result_path)
        if progress is not None:
            progress(_steps_per_epoch(data, train_cfg) * train_cfg.epochs)
        return result
    model = make_model(model_cfg, arm, train_cfg.seed)
    opt = make_optimizer(model, train_cfg)
    history: list[dict[str, Any]] = []
    if ckpt_path.is_file():
        state = _load_checkpoint(ckpt_path, spec)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        history = list(state["history"])
        _write_log(run_dir / LOG, history)
        if progress is not None:
            progress(_steps_per_epoch(data, train_cfg) * len(history))
    for epoch in range(len(history), train_cfg.epochs):
        start = time.perf_counter()
        rec = train_epoch(model, opt, data, train_cfg, epoch, progress)
        test = _evaluate(model, data.x_test, data.y_test)
        history.append({"arm": arm.name, "seed": train_cfg.seed, "epoch": epoch + 1, **rec,
                        "test_loss": test["loss"], "test_acc": test["acc"],
                        "seconds": time.perf_counter() - start})
        state = {"meta": header(_KIND_CHECKPOINT, run=spec), "model": model.state_dict(),
                 "optimizer": opt.state_dict(), "history": history}
        atomic_write(ckpt_path, functools.partial(_save_state, state))
        _write_log(run_dir / LOG, history)
    result = header(_KIND_RUN, run=spec, threads=threads, final=history[-1], history=history)
    _write_json(result_path, result)
    return result
