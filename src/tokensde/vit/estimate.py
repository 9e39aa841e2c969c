"""Time estimate of ViT training, from a few timed steps of the model itself.

A training run costs `steps x (one optimiser step)` plus, after every epoch, a forward pass over
the test images. Both are timed here, on the model the runs train (its width, depth, heads,
tokens and batch), before any run starts: one warm-up step, then `TIMED_STEPS` optimiser steps
(forward, backward and AdamW on a random batch) and one no-grad forward of the batch, with the
runs' torch threads (`time_steps`, about a second for the default model). The result is a
`sim.budget.TimeModel` whose `c0` is the seconds of one optimiser step and `c1` those of one
test image's forward pass, and a `Budget` whose `steps` and `work` are the optimiser steps and
test images of the runs still to train, divided among the processes that train them in parallel
(`vit_budget`); `sim.budget.check_budget` then refuses a run above TOKENSDE_MAX_HOURS unless
--yes, as for every other command. `depth_budget` does the same for the cells of a `vit depth`
sweep, timing each model shape of its grid once, and `fair_budget` for a `vit fair` sweep, whose
cells train their seeds as one stack (`time_stack_steps`). Data loading and checkpoints are not
counted (they are small beside the steps); benchmarks/bench_estimate.py compares the estimate
with measured runs.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F  # noqa: N812

from ..model.params import _check_int
from ..sim.budget import Budget, TimeModel
from .model import ViT, ViTConfig

if TYPE_CHECKING:
    from ..sweep.config import SweepConfig
    from .compare import ComparePlan

__all__ = ["TIMED_STEPS", "StepTime", "depth_budget", "fair_budget", "time_stack_steps",
           "time_steps", "vit_budget", "vit_memory"]

TIMED_STEPS = 2  # optimiser steps timed after the warm-up one
_FLOAT_BYTES = 4  # the ViTs train in float32


@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimiser step (`train`, forward + backward + AdamW on `batch` images) and
    of one image's no-grad forward pass (`forward`), with the torch `threads` they were timed
    with."""

    train: float
    forward: float
    batch: int
    threads: int

    def model(self) -> TimeModel:
        """`TimeModel(c0 = train, c1 = forward)`: seconds of `steps` optimiser steps and `work`
        test images."""
        return TimeModel(self.train, self.forward,
                         f"{TIMED_STEPS} training steps of this ViT timed here, "
                         f"{self.train * 1e3:.3g} ms a step of {self.batch} images")


def time_steps(cfg: ViTConfig, batch_size: int, threads: int = 1, steps: int = TIMED_STEPS
               ) -> StepTime:
    """Time the training step and the forward pass of a ViT of shape `cfg` on random images.

    Args:
        cfg: The ViT's shape.
        batch_size: Images per optimiser step.
        threads: torch threads while timing (the runs' own; restored afterwards).
        steps: Optimiser steps timed after one warm-up step.

    Returns:
        The `StepTime` (the fastest timed step, so that a hiccup does not inflate it).
    """
    batch = _check_int("batch_size", batch_size, 1)
    steps = _check_int("steps", steps, 1)
    before = torch.get_num_threads()
    torch.set_num_threads(_check_int("threads", threads, 1))
    try:
        gen = torch.Generator().manual_seed(0)
        model = ViT(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(batch, cfg.channels, cfg.image_size, cfg.image_size, generator=gen)
        y = torch.randint(0, cfg.classes, (batch,), generator=gen)
        model.train()
        best = math.inf
        for k in range(steps + 1):
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if k:  # the first step warms up (allocations, kernel choice)
                best = min(best, time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            t0 = time.perf_counter()
            model(x)
            forward = (time.perf_counter() - t0) / batch
    finally:
        torch.set_num_threads(before)
    return StepTime(best, forward, batch, threads)


def vit_memory(cfg: ViTConfig, batch_size: int) -> int:
    """Bytes one training process holds beyond its data set, roughly: the weights, their
    gradients and AdamW's two moments (4 copies), and the activations that backward keeps, about
    `(8 + 3 mlp_ratio) D + 3 heads n` numbers per token and block."""
    d, n = cfg.dim, cfg.n_tokens
    params = sum(p.numel() for p in ViT(cfg).parameters())
    per_token = (8 + 3 * cfg.mlp_ratio) * d + 3 * cfg.heads * n
    return _FLOAT_BYTES * (4 * params + batch_size * n * cfg.depth * per_token)


def vit_budget(plan: ComparePlan, out: Path, threads: int, jobs: int
               ) -> tuple[Budget, TimeModel]:
    """The time and memory of the runs of `plan` not yet finished in `out`, and the timed model.

    The runs go to `min(jobs, runs, cores // threads)` processes at once, so their steps and
    test images are divided by that; memory is that many training processes.

    Args:
        plan: The checked comparison (`compare.compare_plan`).
        out: Its output folder (finished runs there are read back, not trained).
        threads: torch threads per run.
        jobs: Runs trained in parallel processes.

    Returns:
        `(budget, model)` for `sim.budget.check_budget`.
    """
    from .compare import _run_dir
    from .train import RESULT, _steps_per_epoch

    threads, jobs = _check_int("threads", threads, 1), _check_int("jobs", jobs, 1)
    cfg, tcfg = plan.model_cfg, plan.train_cfg
    left = sum(not (_run_dir(out, a, s) / RESULT).is_file() for a in plan.arms for s in plan.seeds)
    parallel = max(1, min(jobs, left, max(1, _cores() // threads)))
    per_run_steps = _steps_per_epoch(plan.data, tcfg) * tcfg.epochs
    per_run_images = len(plan.data.y_test) * tcfg.epochs
    each = vit_memory(cfg, tcfg.batch_size)
    model = time_steps(cfg, tcfg.batch_size, threads).model()
    detail = (f"{left} runs of {per_run_steps} steps of {tcfg.batch_size} images, {parallel} at "
              f"a time; D = {cfg.dim}, depth {cfg.depth}, {cfg.n_tokens} tokens")
    budget = Budget("vit compare", memory=each * parallel, per_run=0, runs=left,
                    work=left * per_run_images / parallel, detail=detail,
                    lower=("jobs", "batch_size"),
                    longer=("epochs", "seeds", "train_subset", "depth", "dim"),
                    steps=left * per_run_steps / parallel)
    return budget, model


def depth_budget(config: SweepConfig, out: Path, workers: int, backend: str = "local"
                 ) -> tuple[Budget, TimeModel] | None:
    """The time and memory of a `vit depth` sweep's cells, from a few timed steps of each model
    shape of the grid (one `time_steps` per shape and batch size, with one torch thread as the
    cells use). The cells are spread over `min(workers, cells, cores)` processes; a sweep folder
    that already holds cells is resumed, and those are not subtracted (the estimate is then an
    upper bound, `Budget.bounded` False, and never refused).

    Args:
        config: The `vit_depth` sweep (`depth._depth_config`).
        out: Its output folder.
        workers: Cells run at once.
        backend: The sweep's backend: 'local' is estimated; on 'ray' (other machines), or with
            `TOKENSDE_VIT_DEVICE=cuda`, None (not estimated).

    Returns:
        `(budget, model)` for `sim.budget.check_budget`: the budget's `steps` are seconds of the
        slowest process and `model` counts 1 s per step (the shapes differ, so their step
        times are summed here); or None.
    """
    from .depth import _DEVICE_ENV, _cell_config, _data_spec

    if backend != "local" or os.environ.get(_DEVICE_ENV, "cpu") != "cpu":
        return None

    workers = _check_int("workers", workers, 1)
    cells = [c.params for c in config.cells()]
    timed: dict[tuple[ViTConfig, int], StepTime] = {}
    total, memory = 0.0, 0
    for p in cells:
        data = _data_spec(p).load()
        cfg = _cell_config(p, data.image_size, data.channels, data.classes)
        key = (cfg, p["batch_size"])
        if key not in timed:
            timed[key] = time_steps(cfg, p["batch_size"], threads=1)
            memory = max(memory, vit_memory(cfg, p["batch_size"]))
        t = timed[key]
        steps = math.ceil(len(data.y_train) / p["batch_size"]) * p["epochs"]
        total += steps * t.train + len(data.y_test) * p["epochs"] * t.forward
    budget, model = _sweep_budget("vit depth sweep", total, len(cells), len(timed), out,
                                  workers, ("epochs", "train_subset", "workers"))
    return replace(budget, memory=memory * min(workers, len(cells), _cores())), model


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def time_stack_steps(cfg: ViTConfig, models: int, batch_size: int, steps: int = TIMED_STEPS
                     ) -> StepTime:
    """Time a training step of `models` stacked attention-only ViTs (`stack.StackedViT`, as a
    fair cell trains its seeds: forward, backward and its AdamW step on `batch_size` images each)
    and their accuracy pass, one torch thread, on random images.

    Args:
        cfg: The ViT's shape (attention-only).
        models: Models in the stack (the cell's seeds).
        batch_size: Images per model and step.
        steps: Optimiser steps timed after one warm-up step.

    Returns:
        The `StepTime`: `train` one stacked step, `forward` one image through all the models.
    """
    from .stack import LAYOUT_WARNING, Member, StackedViT

    R, B = _check_int("models", models, 1), _check_int("batch_size", batch_size, 1)
    steps = _check_int("steps", steps, 1)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        stack = StackedViT(cfg, [Member("default", s, 1e-3) for s in range(R)], "cpu")
        x = torch.randn(R, B, cfg.channels, cfg.image_size, cfg.image_size, generator=gen)
        y = torch.randint(0, cfg.classes, (R * B,), generator=gen)
        best = math.inf
        for k in range(steps + 1):
            t0 = time.perf_counter()
            logits = stack.forward(x)
            loss = F.cross_entropy(logits.reshape(R * B, -1), y, label_smoothing=0.1)
            stack.grad.zero_()
            with warnings.catch_warnings():  # as `stack._train_stack`: the flat leaf's layout
                warnings.filterwarnings("ignore", message=LAYOUT_WARNING)
                loss.backward()
            stack.adamw_step(1.0, 0.05)
            if k:
                best = min(best, time.perf_counter() - t0)
        t0 = time.perf_counter()
        stack.accuracy(x[0], y[:B])
        forward = (time.perf_counter() - t0) / B
    finally:
        torch.set_num_threads(before)
    return StepTime(best, forward, B, 1)


def fair_budget(config: SweepConfig, out: Path, workers: int, device: str = "cpu"
                ) -> tuple[Budget, TimeModel] | None:
    """`depth_budget` for a `vit fair` sweep: each cell trains its seeds as one stack
    (`time_stack_steps` once per model shape, batch and number of seeds) for `epochs` epochs of
    the training images, with a validation and a test pass after every epoch.

    Args:
        config: The `vit_fair` sweep (`fair._fair_config`).
        out: Its output folder.
        workers: Cells run at once.
        device: The cells' torch device: 'cpu' is estimated, a GPU not (None).

    Returns:
        `(budget, model)` as `depth_budget`, or None.
    """
    from .fair import _cell_config, _cell_data

    if device != "cpu":
        return None

    workers = _check_int("workers", workers, 1)
    cells = [c.params for c in config.cells()]
    timed: dict[tuple[ViTConfig, int, int], StepTime] = {}
    total = 0.0
    for p in cells:
        data = _cell_data(p)
        cfg = _cell_config(p, data)
        key = (cfg, p["seeds"], p["batch_size"])
        if key not in timed:
            timed[key] = time_stack_steps(cfg, p["seeds"], p["batch_size"])
        t = timed[key]
        steps = math.ceil(len(data.y_train) / p["batch_size"]) * p["epochs"]
        seen = len(data.y_test) + (0 if data.y_val is None else len(data.y_val))
        total += steps * t.train + seen * p["epochs"] * t.forward
    return _sweep_budget("vit fair sweep", total, len(cells), len(timed), out, workers,
                         ("epochs", "train_subset", "workers"))


def _sweep_budget(what: str, total: float, cells: int, shapes: int, out: Path, workers: int,
                  longer: tuple[str, ...]) -> tuple[Budget, TimeModel]:
    """The budget of `cells` sweep cells taking `total` seconds on one process, spread over
    `min(workers, cells, cores)` processes; an upper bound when `out` already holds cells."""
    parallel = max(1, min(workers, cells, _cores()))
    resumed = Path(out).is_dir() and any(Path(out).iterdir())
    detail = (f"{cells} cells{' (finished ones not subtracted)' if resumed else ''}, {shapes} "
              f"model shapes timed, {parallel} at a time")
    budget = Budget(what, memory=0, per_run=0, runs=cells, work=0.0, detail=detail,
                    lower=("workers",), bounded=not resumed, longer=longer,
                    steps=total / parallel)
    return budget, TimeModel(1.0, 0.0, f"{TIMED_STEPS} training steps of each model shape "
                             "timed here")
