"""Arms x seeds: train every (arm, seed) run, then tabulate test accuracy.

Per arm: final test accuracy mean and sample sd over seeds. Per arm other than `default`: the paired
difference `acc(arm, s) - acc(default, s)` over seeds `s` (same data order, augmentation and
non-value weights), its mean and 95 % t-interval `mean +- t_{0.975, S-1} sd / sqrt(S)`; the same at
every epoch, to show how the gap moves.
"""

from __future__ import annotations

import functools
import json
import math
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.stats import t_interval
from ..io.store import atomic_write, header
from ..model.params import ParameterError, _check_choice, _check_int
from ..sim.loop import _Progress
from .data import DATASETS, ImageData, load_dataset
from .init import Arm, parse_arms
from .model import ViTConfig
from .train import TrainConfig, _steps_per_epoch, train_run

__all__ = ["ComparePlan", "DataSpec", "compact", "compare", "compare_plan", "format_table", "summarise"]

_KIND_COMPARE = "tokensde.vit.compare"
SUMMARY, TABLE = "summary.json", "table.md"
_BASELINE = "default"
# The defaults per data set: patch size, training subset (0 = all) and batch size.
_DATA_DEFAULTS: dict[str, dict[str, int]] = {
    "fashion-mnist": {"patch": 7, "train_subset": 10000, "batch_size": 128},
    "cifar10": {"patch": 4, "train_subset": 10000, "batch_size": 128},
    "digits": {"patch": 4, "train_subset": 0, "batch_size": 32},
}



@dataclass(frozen=True)
class DataSpec:
    """Which data set to load, so that worker processes can load it themselves."""

    name: str
    data_dir: str | None = None
    train_subset: int | None = None
    test_subset: int | None = None

    def load(self) -> ImageData:
        """The data set (cached per process)."""
        return _load(self)


@functools.lru_cache(maxsize=2)
def _load(spec: DataSpec) -> ImageData:
    return load_dataset(spec.name, spec.data_dir, spec.train_subset, spec.test_subset)


def _run_dir(out: Path, arm: Arm, seed: int) -> Path:
    """Directory of one run: `out/runs/<arm>/seed<seed>` (':' spelt '_')."""
    return out / "runs" / arm.name.replace(":", "_") / f"seed{seed}"


def _job(data: DataSpec, model_cfg: ViTConfig, train_cfg: TrainConfig, arm: Arm,
         where: Path, threads: int) -> dict[str, Any]:
    return train_run(data.load(), model_cfg, train_cfg, arm, where, threads)


def _run_all(data: DataSpec, model_cfg: ViTConfig, train_cfg: TrainConfig, arms: list[Arm],
            seeds: list[int], out: Path, threads: int = 1, jobs: int = 1,
            progress: _Progress | None = None) -> dict[str, dict[int, dict[str, Any]]]:
    """Train all runs; return `{arm: {seed: result}}`. Finished runs are read back, others resume.

    With `jobs > 1` runs go to that many worker processes of `threads` threads each; the progress
    callback then advances once per finished run by its number of steps.
    """
    jobs = _check_int("jobs", jobs, 1)
    tasks = [(arm, s) for s in seeds for arm in arms]
    cfgs = {s: TrainConfig(**{**train_cfg.to_dict(), "seed": s}) for s in seeds}
    results: dict[str, dict[int, dict[str, Any]]] = {a.name: {} for a in arms}
    if jobs == 1:
        for arm, s in tasks:
            results[arm.name][s] = train_run(data.load(), model_cfg, cfgs[s], arm,
                                             _run_dir(out, arm, s), threads, progress)
        return results
    steps = _steps_per_epoch(data.load(), train_cfg) * train_cfg.epochs
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(_job, data, model_cfg, cfgs[s], arm, _run_dir(out, arm, s),
                               threads): (arm, s) for arm, s in tasks}
        try:
            for fut in as_completed(futures):
                arm, s = futures[fut]
                results[arm.name][s] = fut.result()
                if progress is not None:
                    progress(steps)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return results


def _sd(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if len(x) > 1 else math.nan


def summarise(results: dict[str, dict[int, dict[str, Any]]], seeds: list[int]) -> dict[str, Any]:
    """Table of final test accuracy per arm and paired differences to `default`, also per epoch.

    Args:
        results: `results[arm][seed]`: a run's result (final accuracy and per-epoch history).
        seeds: The seeds, in order.

    Returns:
        `arms`, `paired` and `seeds` of the `compare` summary.
    """
    curves = {a: np.array([[h["test_acc"] for h in runs[s]["history"]] for s in seeds])
              for a, runs in results.items()}  # (seeds, epochs)
    arms = {a: {"mean": float(c[:, -1].mean()), "sd": _sd(c[:, -1]), "runs": c[:, -1].tolist(),
                "curve_mean": c.mean(0).tolist(), "curves": c.tolist()} for a, c in curves.items()}
    paired = {}
    if _BASELINE in curves:
        for a, c in curves.items():
            if a == _BASELINE:
                continue
            diff = c - curves[_BASELINE]
            per_epoch = [t_interval(diff[:, e]) for e in range(diff.shape[1])]
            m, lo, hi = per_epoch[-1]
            paired[a] = {"mean": m, "lo": lo, "hi": hi, "diffs": diff[:, -1].tolist(),
                         "per_epoch": [{"mean": p[0], "lo": p[1], "hi": p[2]} for p in per_epoch]}
    return {"arms": arms, "paired": paired, "seeds": list(seeds)}


def compare(data: DataSpec, model_cfg: ViTConfig, train_cfg: TrainConfig, arms: list[Arm],
            seeds: list[int], out: str | Path, threads: int = 1, jobs: int = 1,
            progress: _Progress | None = None) -> dict[str, Any]:
    """Run every arm on every seed and return the summary (with a header saying how it was made).

    Args:
        data: Which data set to load (each worker loads it itself).
        model_cfg: The ViT's shape.
        train_cfg: The optimisation of each run (its seed is replaced by each run's).
        arms: The value-initialisation arms.
        seeds: The seeds; run `(arm, seed)` trains one model.
        out: Directory of the runs (`out/ARM/seed-S/`), which resume.
        threads: torch threads per run.
        jobs: Runs trained in parallel processes.
        progress: Called with the number of optimiser steps done, or None.

    Returns:
        The summary: a header (data set, model, training, arms), `arms` (accuracy mean, sd,
        curves per arm), `paired` (gap to `default` with its t-interval, per epoch too) and `seeds`.
    """
    out = Path(out)
    results = _run_all(data, model_cfg, train_cfg, arms, seeds, out, threads, jobs, progress)
    meta = header(_KIND_COMPARE, dataset=data.name, data=data.load().info, data_spec=asdict(data),
                  model=model_cfg.to_dict(), train={**train_cfg.to_dict(), "seed": None},
                  epochs=train_cfg.epochs, arm_names=[a.name for a in arms], threads=threads,
                  jobs=jobs)
    return {**meta, **summarise(results, seeds)}


def _model_config(data: ImageData, patch: int | None = None, **fields: Any) -> ViTConfig:
    """The ViTConfig for images of `data` (shape, classes; patch by data set unless given)."""
    patch = _DATA_DEFAULTS[data.name]["patch"] if patch is None else patch
    return ViTConfig(image_size=data.image_size, channels=data.channels, patch=patch,
                     classes=data.classes, **fields)


def _save_summary(summary: dict[str, Any], out: str | Path) -> dict[str, Path]:
    """Write `summary.json` and the markdown `table.md` into `out`; return their paths."""
    out = Path(out)
    text = json.dumps(summary, indent=1) + "\n"
    return {"summary": atomic_write(out / SUMMARY, lambda tmp: tmp.write_text(text)),
            "table": atomic_write(out / TABLE, lambda tmp: tmp.write_text(format_table(summary)))}


def compact(summary: dict[str, Any]) -> dict[str, Any]:
    """The `--json` shape: `{"arms": {ARM: {"mean", "sd", "runs"}}, "dataset", "epochs"}`.

    Args:
        summary: What `compare` returned.

    Returns:
        The `--json` document.
    """
    arms = {a: {k: v[k] for k in ("mean", "sd", "runs")} for a, v in summary["arms"].items()}
    return {"arms": arms, "dataset": summary["dataset"], "epochs": summary["epochs"]}


def _pct(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.2f}"


def format_table(summary: dict[str, Any]) -> str:
    """Markdown tables: final accuracy per arm, then the paired gap to `default` at every epoch.

    Args:
        summary: What `compare` returned.

    Returns:
        The Markdown text.
    """
    seeds = len(summary["seeds"])
    lines = [f"| arm | test accuracy % (mean ± sd, {seeds} seeds) | paired diff to default, "
             "points [95 % t-interval] |", "|---|---|---|"]
    for a, v in summary["arms"].items():
        p = summary["paired"].get(a)
        gap = "—" if p is None else f"{_pct(p['mean'])} [{_pct(p['lo'])}, {_pct(p['hi'])}]"
        lines.append(f"| {a} | {_pct(v['mean'])} ± {_pct(v['sd'])} | {gap} |")
    if summary["paired"]:
        epochs = len(next(iter(summary["arms"].values()))["curve_mean"])
        lines += ["", "| paired diff to default (points) by epoch | "
                  + " | ".join(str(e + 1) for e in range(epochs)) + " |",
                  "|---|" + "---|" * epochs]
        for a, p in summary["paired"].items():
            lines.append(f"| {a} | " + " | ".join(_pct(q["mean"]) for q in p["per_epoch"]) + " |")
    return "\n".join(lines) + "\n"


def _subset_size(value: int | None, default: int) -> int | None:
    """A subset size as the loaders take it: `value` (or `default` when None), 0 meaning all.

    Args:
        value: The number of images asked for; None for `default`; 0 for all.
        default: The size used when `value` is None.

    Returns:
        The number of images, or None for all of them.

    Raises:
        ParameterError: `value` is negative.
    """
    value = default if value is None else value
    if value < 0:
        raise ParameterError(f"subset sizes must be >= 0 (0 = all); got {value!r}")
    return value or None


@dataclass(frozen=True, eq=False)
class ComparePlan:
    """A checked `arms x seeds` comparison, its data loaded, ready to run (`compare_plan`)."""

    spec: DataSpec
    data: ImageData
    model_cfg: ViTConfig
    train_cfg: TrainConfig
    arms: list[Arm]
    seeds: list[int]

    @property
    def total_steps(self) -> int:
        """Optimiser steps of all runs together (for a progress bar)."""
        return (_steps_per_epoch(self.data, self.train_cfg) * self.train_cfg.epochs
                * len(self.arms) * len(self.seeds))

    def run(self, out: str | Path, threads: int = 1, jobs: int = 1,
            progress: _Progress | None = None) -> dict[str, Any]:
        """Train every run (resuming finished ones), write `summary.json` and `table.md` into
        `out` and return the summary (`compare`)."""
        summary = compare(self.spec, self.model_cfg, self.train_cfg, self.arms, self.seeds, out,
                          threads, jobs, progress)
        _save_summary(summary, out)
        return summary


def compare_plan(arms: str, seeds: int, dataset: str = "fashion-mnist",
                 data_dir: str | Path | None = None, *, seed0: int = 0,
                 train_subset: int | None = None, test_subset: int | None = 0,
                 batch_size: int | None = None, patch: int | None = None,
                 model: dict[str, Any] | None = None,
                 train: dict[str, Any] | None = None) -> ComparePlan:
    """Check the parameters of an `arms x seeds` comparison and load its data set.

    Args:
        arms: Comma-separated arms, e.g. `"default,noise:0"` (`parse_arms`).
        seeds: Number of seeds; the runs use `seed0, seed0 + 1, ...`.
        dataset: `fashion-mnist`, `cifar10` or `digits`.
        data_dir: Where the data set lives (None: its default place).
        seed0: The first seed.
        train_subset: Training images (0 = all; None: the data set's default, `DATA_DEFAULTS`).
        test_subset: Test images (0 = all).
        batch_size: Batch size (None: the data set's default).
        patch: Patch side (None: the data set's default).
        model: Other `ViTConfig` fields (dim, depth, heads, mlp_ratio, norm, block, ...).
        train: Other `TrainConfig` fields (epochs, lr, weight_decay, warmup, ...).

    Returns:
        The plan; `plan.run(out, ...)` trains and writes the summary.

    Raises:
        ParameterError: An argument is out of range or names no known arm or data set.
    """
    arm_list = parse_arms(arms)
    if seeds < 1:
        raise ParameterError(f"seeds must be an integer >= 1; got {seeds!r}")
    defaults = _DATA_DEFAULTS[_check_choice("dataset", dataset, DATASETS)]
    spec = DataSpec(dataset, None if data_dir is None else str(data_dir),
                    _subset_size(train_subset, defaults["train_subset"]),
                    _subset_size(test_subset, 0))
    batch = defaults["batch_size"] if batch_size is None else batch_size
    train_cfg = TrainConfig(**{"batch_size": batch,
                               **(train or {}), "seed": seed0})
    data = spec.load()
    model_cfg = _model_config(data, patch, **(model or {}))
    return ComparePlan(spec, data, model_cfg, train_cfg, arm_list,
                       list(range(seed0, seed0 + seeds)))
