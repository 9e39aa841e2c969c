"""ViT figures: `vit` (accuracy by value-matrix initialisation, standard ViT) and `vit-depth`
(the depth sweep of `tokensde.vit.depth`, gaps to the default initialisation against depth).

Both train with `tokensde.vit`; `vit` keeps its comparison under `OUT/vit/<size>/` and
`vit-depth` its sweep under `OUT/sweeps/vit-depth-<size>/` (finished cells are reused).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..io.report import Image, Section, Table, _interval
from .context import Context, FigureSpec


def _vit_summary_path(ctx: Context) -> Path:
    """Where a saved ViT comparison of this size lives (its summary.json)."""
    from ..vit.compare import SUMMARY

    return ctx.out / "vit" / ctx.size / SUMMARY


# Per size: data set, seeds, epochs and the model fields that differ from ViTConfig's defaults.
_VIT_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"dataset": "digits", "seeds": 2, "epochs": 1, "model": {"depth": 2, "dim": 16}},
    "quick": {"dataset": "digits", "seeds": 2, "epochs": 4, "model": {}},
    "full": {"dataset": "fashion-mnist", "seeds": 4, "epochs": 10, "model": {}},
}
_VIT_ARMS = "default,noise:0,noise:0.1,identity,shared"


def _run_vit(ctx: Context, out: Path) -> None:
    """Train the ViT comparison of this size (standard ViT, arms x seeds) into `out`."""
    from ..vit import DataSpec, TrainConfig, compare, parse_arms
    from ..vit.compare import _DATA_DEFAULTS, _model_config, _save_summary

    size = _VIT_SIZES[ctx.size]
    defaults = _DATA_DEFAULTS[size["dataset"]]
    spec = DataSpec(size["dataset"], None, defaults["train_subset"] or None, None)
    model_cfg = _model_config(spec.load(), **size["model"])
    train_cfg = TrainConfig(epochs=size["epochs"], batch_size=defaults["batch_size"])
    ctx.log(f"training the ViT comparison: {size['dataset']}, {size['seeds']} seeds, "
            f"{size['epochs']} epochs")
    summary = compare(spec, model_cfg, train_cfg, parse_arms(_VIT_ARMS),
                      list(range(size["seeds"])), out, jobs=ctx.workers)
    _save_summary(summary, out)


def _vit_data(ctx: Context) -> tuple[dict[str, Any], bool]:
    """The saved ViT comparison of this size (trained and saved first if absent)."""
    path = _vit_summary_path(ctx)
    reused = path.exists()
    if not reused:
        _run_vit(ctx, path.parent)
    return json.loads(path.read_text()), reused


def _draw_vit(ctx: Context, spec: FigureSpec, summary: dict[str, Any], reused: bool) -> Section:
    """ViT accuracy by value-matrix initialisation, read from a saved comparison."""
    from ..plots.vit import _plot_accuracy

    png = _plot_accuracy(summary, ctx.figures / "vit.png")
    return Section(spec.name, spec.title, spec.claim,
                   images=[Image(png, "Test accuracy per epoch by value initialisation, and the "
                                      "paired gap to the default (95% t-interval).")],
                   tables=[_vit_table(summary)],
                   provenance={"summary": str(_vit_summary_path(ctx)), "reused": reused,
                               "model": summary.get("model"),
                               "train": summary.get("train"), "seeds": summary.get("seeds")})


def _vit_table(s: dict[str, Any]) -> Table:
    from ..analysis.stats import t_interval

    rows = []
    for name, arm in s.get("arms", {}).items():
        _, lo, hi = t_interval(np.asarray(arm.get("runs", []), dtype=float))
        gap = s.get("paired", {}).get(name) or {}
        rows.append([name, _num(arm.get("mean")), _num(arm.get("sd")), _interval(lo, hi),
                     _num(gap.get("mean")), _interval(gap.get("lo"), gap.get("hi")),
                     len(s.get("seeds", [])), json.dumps(s.get("seeds", [])), s.get("epochs"),
                     s.get("dataset"), s.get("version")])
    return Table("vit", "Final test accuracy per arm (mean, sd, 95% t-interval over seeds) and "
                 "the paired gap to the default initialisation (95% t-interval)",
                 ["arm", "accuracy", "sd", "95%", "gap to default", "95%", "seeds", "seed list",
                  "epochs", "dataset", "version"], rows)


def _vit_depth_dir(ctx: Context) -> Path:
    """The directory of this size's ViT depth sweep."""
    return ctx.out / "sweeps" / f"vit-depth-{ctx.size}"


def _vit_depth_data(ctx: Context) -> tuple[dict[str, Any], bool]:
    """Run (or resume) the ViT depth sweep of this size; its run summary and paired gap table."""
    from ..vit.depth import _depth_config, _read_gaps, _run_depth

    out = _vit_depth_dir(ctx)
    summary = _run_depth(_depth_config(ctx.size), out, workers=ctx.workers)
    return {"summary": summary, "gaps": _read_gaps(out)}, summary["ran"] == 0


def _draw_vit_depth(ctx: Context, spec: FigureSpec, run: dict[str, Any], reused: bool
                   ) -> Section:
    """The ViT depth sweep (sweep kind vit_depth) of this size: gaps to default against depth."""
    summary, gaps, out = run["summary"], run["gaps"], _vit_depth_dir(ctx)
    figs = summary["report"]
    images = [Image(Path(figs["depth_gaps"]), "Paired gap to the default initialisation against "
                    "depth, per arm and block (95% t-interval; open markers: the interval "
                    "contains 0)."),
              Image(Path(figs["collapse"]), "The gap against the fraction of token pairs merged "
                    "(within tol of +1) after the last block of the untrained model."),
              Image(Path(figs["curves"]), "Test accuracy of the default arm after each epoch: "
                    "whether training had levelled off.")]
    if "lambda" in figs:
        images.insert(1, Image(Path(figs["lambda"]), "The gap against the noise amplitude λ at "
                               "fixed depth, without (pure noise) and with the mean part M = I."))
    return Section(spec.name, spec.title, spec.claim, images=images,
                   tables=[_vit_depth_table(gaps)],
                   provenance={"dir": str(out), "reused": reused,
                               "cells": {k: summary[k] for k in ("total", "ran", "skipped")},
                               "sweep_wall_s": round(summary["wall_s"], 1),
                               "command": f"tokensde vit depth --size {ctx.size} --out {out} "
                                          f"--workers {ctx.workers}"})


def _vit_depth_table(gaps: Any) -> Table:
    cols = ["block", "depth", "arm", "seeds", "accuracy %", "gap to default (points)", "95%",
            "merged at init", "antipodal at init", "effective rank at init", "model"]
    rows = [[r["block"], r["depth"], r["arm"], r["seeds"], r["acc"], _num(r["gap"]),
             _interval(r["gap_lo"], r["gap_hi"]), r["init_near_pos"], r["init_near_neg"],
             r["init_rank"], r["model"]] for r in gaps.to_dict("records")]
    return Table("vit-depth", "Per block, depth and arm: mean test accuracy, the paired gap to "
                 "the default arm over training seeds (95% t-interval), and the token geometry of "
                 "the untrained model after its last block (pairs within tol of +1 / -1, "
                 "participation-ratio rank)", cols, rows)


def _num(v: Any) -> Any:
    return None if v is None else float(v)
