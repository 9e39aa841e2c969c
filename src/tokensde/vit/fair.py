"""The fair protocol, as the sweep kind `vit_fair`: each arm at its own best learning rate, trained
to a plateau.

One cell trains `seeds` attention-only ViTs (training seeds `seed0 .. seed0 + seeds - 1`) of one
value-matrix arm at one peak learning rate `lr` for a budget of `epochs` epochs (warm-up over the
first 10 % of the steps, then cosine decay to 0 at the end of the budget, so every budget is a
complete schedule), all at once (`stack._train_stack`). After every epoch it records the accuracy on
a *validation* split — the `val_subset` training images after the first `train_subset` — and on
the test images.

The choice (`choose_lr`): for each arm and budget, the rate of the grid with the highest mean
validation accuracy at the end of training (over the seeds). It reads the validation columns only;
the test accuracy at the chosen rate is what is reported (`fair_gaps`). Pairing is as in the depth
sweep: every arm of a training seed starts from the same non-value weights and sees the same data
order and augmentation, so `acc(arm) - acc(default)` over seeds is a paired difference, each arm
at its own chosen rate.

The protocol is five modules: this one (the kind, its data and its packaged sweeps),
`fair_choice` (the per-seed table and the choice of rate), `fair_stats` (paired gaps, plateau),
`fair_report` (the saved report and its tables) and `fair_run` (running a sweep, promising cells
first, then its report).

`poison_test = true` replaces the test labels by a fixed random permutation of them: a control that
the choice and the validation numbers do not move (tests/test_vit_fair.py).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any

import torch

from ..model.params import ParameterError, _check_choice
from ..sweep.config import SweepConfig
from ..sweep.kinds import ExperimentKind, Param, _choice, _integer, real, register
from .data import DATASETS, ImageData, load_dataset
from .depth import _DEVICE_ENV, _PATCH, _SWEEPS, _check_arm, _sized_config
from .model import ViTConfig
from .stack import Member, StackedViT, _train_stack
from .train import TrainConfig

KIND = "vit_fair"
_FAIR_SWEEPS = ("fair", "fair-wide", "fair-tiny", "fair-pilot", "fair-cifar")
_POISON_SEED = 20261204


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{key} must be true or false; got {value!r}")
    return value


_PARAMS: dict[str, Param] = {
    "arm": Param(_check_arm, doc="value-matrix arm, e.g. default, noise:0, hybrid:0, identity"),
    "lr": real(0.0, strict=True, doc="peak AdamW learning rate of the grid"),
    "epochs": _integer(1, doc="training budget in epochs (the cosine ends at its last step)"),
    "seeds": _integer(1, 12, "models per cell: training seeds seed0 .. seed0 + seeds - 1"),
    "seed0": _integer(0, 0, "first training seed"),
    "depth": _integer(1, 24, "number of blocks L (branch scale 1/sqrt(L))"),
    "dataset": _choice(DATASETS, "fashion-mnist"),
    "data_dir": Param(lambda k, v: str(v), "", "data set directory or .npz file ('' = default)"),
    "train_subset": _integer(1, 5000, "first N training images"),
    "val_subset": _integer(1, 2000, "the next N training images: the validation split"),
    "test_subset": _integer(0, 2000, "first N test images (0 = all)"),
    "dim": _integer(2, 64, "token width D"),
    "heads": _integer(1, 1),
    "patch": _integer(0, 0, "patch side (0: 7 for fashion-mnist, 4 otherwise)"),
    "batch_size": _integer(1, 128),
    "poison_test": Param(_flag, False, "control: test labels permuted (the choice must not move)"),
}


@functools.lru_cache(maxsize=2)
def _data(dataset: str, data_dir: str, train: int, val: int, test: int) -> ImageData:
    return load_dataset(dataset, data_dir or None, train, test or None, val)


def _cell_data(cell: dict[str, Any]) -> ImageData:
    """The images of a cell (cached per process), test labels permuted if `poison_test`."""
    data = _data(cell["dataset"], cell["data_dir"], cell["train_subset"], cell["val_subset"],
                 cell["test_subset"])
    if not cell["poison_test"]:
        return data
    gen = torch.Generator().manual_seed(_POISON_SEED)
    y = data.y_test[torch.randperm(len(data.y_test), generator=gen)]
    return dataclasses.replace(data, y_test=y)


def _cell_config(cell: dict[str, Any], data: ImageData) -> ViTConfig:
    """The attention-only ViTConfig of a cell (as the depth sweep builds it)."""
    return ViTConfig(image_size=data.image_size, channels=data.channels,
                     patch=cell["patch"] or _PATCH[cell["dataset"]], dim=cell["dim"],
                     depth=cell["depth"], heads=cell["heads"], classes=data.classes, norm="rms",
                     residual_scale=True, block="attention-only")


def _fair_cell(cell: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train the cell's `seeds` models; validation and test accuracy after every epoch.

    Lists are per training seed; the curves are flattened seed-major (`seeds x epochs`)."""
    del seed  # training randomness comes from the training seeds (paired arms)
    device = _check_choice(_DEVICE_ENV, os.environ.get(_DEVICE_ENV, "cpu"), ("cpu", "cuda"))
    data = _cell_data(cell)
    cfg = _cell_config(cell, data)
    seeds = list(range(cell["seed0"], cell["seed0"] + cell["seeds"]))
    members = [Member(cell["arm"], s, cell["lr"]) for s in seeds]
    train = TrainConfig(epochs=cell["epochs"], batch_size=cell["batch_size"], lr=cell["lr"])
    test: list[list[float]] = [[] for _ in seeds]

    def on_epoch(stack: StackedViT, epoch: int) -> None:
        acc = stack.accuracy(data.x_test, data.y_test)
        for r in range(len(seeds)):
            test[r].append(float(acc[r]))

    t0 = time.perf_counter()
    _, rec = _train_stack(data, cfg, members, train, device, on_epoch)
    return {"train_seeds": seeds, "val_acc": [c[-1] for c in rec["val"]],
            "test_acc": [c[-1] for c in test], "val_curve": [a for c in rec["val"] for a in c],
            "test_curve": [a for c in test for a in c], "train_loss": rec["train_loss"],
            "train_s": time.perf_counter() - t0, "device": device, "tokens": cfg.n_tokens}


register(ExperimentKind(KIND, _fair_cell, _PARAMS,
                        "train one arm at one learning rate and budget over seeds (stacked); "
                        "validation and test accuracy per epoch"))


def _fair_config(size: str | os.PathLike = "fair", **params: Any) -> SweepConfig:
    """The packaged sweep `size` (FAIR_SWEEPS, or a TOML path of kind vit_fair), with fixed
    parameters replaced by `params` (None values are ignored)."""
    return _sized_config(size, KIND, _FAIR_SWEEPS, _SWEEPS / f"vit-{size}.toml", params)


def _check_data(config: SweepConfig) -> None:
    """Load the images of every data set-up of `config` once, so that a missing or bad data file
    stops the sweep with its message before any cell runs."""
    seen = set()
    for c in config.cells():
        key = tuple(c.params[k] for k in ("dataset", "data_dir", "train_subset", "val_subset",
                                          "test_subset"))
        if key not in seen:
            seen.add(key)
            _data(*key)
